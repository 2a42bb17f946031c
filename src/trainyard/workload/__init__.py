"""Workload models: distributions of job sizes, durations and arrivals, kept as numbers in code
so that benchmarks, demos and synthetic simulations need no trace files."""
