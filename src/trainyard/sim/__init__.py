"""Trace-driven discrete-event simulator: drives the unchanged `trainyard.core` with a simulated
clock on real (Philly, Pollux, Gavel) or synthetic workloads and measures JCT, queueing delay,
utilisation, fragmentation and fairness."""
