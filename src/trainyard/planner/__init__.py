"""trainyard.planner: choose a training job's parallel layout and collective algorithms, and
predict its memory per GPU, step time, throughput and MFU (pure computation, typed strictly).

Work in progress (issue 5): hardware catalogue, model description, memory, compute-time and
collective models. Search, launcher settings and the CLI follow.
"""
