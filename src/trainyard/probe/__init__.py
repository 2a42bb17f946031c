"""trainyard.probe: programs the platform runs as jobs to measure the machines it was given
(`links`: collective latency and bandwidth with torch.distributed, for the planner)."""
