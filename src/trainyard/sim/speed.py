"""How fast a simulated job progresses on a placement: the `SpeedModel` protocol and the
trace-duration model.

This module owns the contract between the engine and the per-workload speed models
(`FixedDuration` here; `trainyard.sim.pollux_speed` and `trainyard.sim.gavel_speed` for
measured profiles; the workloads themselves are read by `trainyard.sim.readers`). A job
needs `work(job)` units; on a placement it makes `rate(...)` units per second of simulated
time, except for `first_start_s` seconds after its first start and `restart_s`
seconds after every restart, in which it makes none (Pollux's re-scale delay; checkpoint
restore).
"""

from __future__ import annotations

import math
from typing import Protocol

from trainyard.sim.workload import SimJob, WorkloadError

__all__ = ["FixedDuration", "SpeedModel", "restart_seconds"]


class SpeedModel(Protocol):
    """Work and rate of jobs. `per_node` is the GPUs the job holds on each node it uses,
    largest first (e.g. (4, 2) = 6 GPUs over two nodes); `gpu_type` their type."""

    name: str
    first_start_s: float
    restart_s: float

    def work(self, job: SimJob) -> float:
        """Total work units the job needs to complete."""
        ...

    def rate(self, job: SimJob, per_node: tuple[int, ...], gpu_type: str) -> float:
        """Work units per second on this placement (> 0)."""
        ...

    def isolated_rate(self, job: SimJob) -> float:
        """The rate alone on an idle cluster at its requested size, packed on the fewest
        nodes (the reference for finish-time fairness)."""
        ...


def restart_seconds(value: float, field: str = "restart_s") -> float:
    """`value` as seconds lost per restart: a finite number >= 0, else a `WorkloadError`
    naming `field` (the speed models' constructors; the CLI names its flag)."""
    if not (math.isfinite(value) and value >= 0):
        raise WorkloadError(field, f"must be a number of seconds >= 0, got {value}")
    return float(value)


class FixedDuration:
    """Jobs take their trace run time (`SimJob.duration`) at their requested size, wherever
    they are placed: work = duration seconds, rate = 1. `restart_s` is charged on every
    restart after a preemption (not on the first start, whose cost is in the trace)."""

    name = "duration"

    def __init__(self, restart_s: float = 0.0) -> None:
        self.restart_s = restart_seconds(restart_s)
        self.first_start_s = 0.0

    def work(self, job: SimJob) -> float:
        if job.duration is None:
            raise WorkloadError(job.id, "this workload needs a duration for every job")
        return job.duration

    def rate(self, job: SimJob, per_node: tuple[int, ...], gpu_type: str) -> float:
        return 1.0

    def isolated_rate(self, job: SimJob) -> float:
        return 1.0
