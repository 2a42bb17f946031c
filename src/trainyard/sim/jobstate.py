"""One job's simulated life (`JobState`), as the engine (`sim.engine`) keeps it.

Mutable and engine-private: progress, the placement and size it holds, its penalties, its
restarts and resizes, and the core `Job` the next snapshot shows. `isolated_time` is the
reference run time of finish-time fairness.
"""

from __future__ import annotations

import math

from trainyard.core import Job, NodeDevices, RunningJob
from trainyard.sim.speed import SpeedModel
from trainyard.sim.workload import SimJob

__all__ = ["JobState", "isolated_time"]

_INF = math.inf


class JobState:
    """One job's simulated life (mutable; the engine's alone)."""

    __slots__ = (
        "allocation",
        "attained",
        "change_at",
        "end",
        "first_start",
        "gpu_type",
        "gpus",
        "isolated",
        "job",
        "last_t",
        "penalty_until",
        "per_node",
        "placement",
        "preemptions",
        "progress",
        "rate",
        "resizes",
        "restarts",
        "run_time",
        "running",
        "sim",
        "started",
        "version",
        "work",
    )  # fmt: skip

    def __init__(self, sim: SimJob, job: Job, work: float, isolated: float) -> None:
        self.sim = sim
        self.job = job
        self.work = work
        self.progress = 0.0
        self.attained = 0.0
        self.started = 0.0
        self.penalty_until = 0.0
        self.last_t = 0.0
        self.rate = 0.0
        self.change_at = _INF
        self.placement: tuple[NodeDevices, ...] = ()
        self.per_node: tuple[int, ...] = ()
        self.gpu_type = ""
        self.first_start: float | None = None
        self.end: float | None = None
        self.run_time = 0.0
        self.preemptions = 0
        self.restarts = 0
        self.resizes = 0
        self.gpus = sim.gpus  # held while running (an elastic job's size changes)
        self.version = 0
        self.running: RunningJob | None = None
        self.isolated = isolated
        self.allocation: list[tuple[float, int]] = []  # (time, GPUs held from then on)

    def hold(self, t: float, gpus: int) -> None:
        """Record that from `t` the job holds `gpus` GPUs (a stop and a start at the same
        time, a resize, make one entry)."""
        if self.allocation and self.allocation[-1][0] == t:
            self.allocation.pop()
        if not self.allocation or self.allocation[-1][1] != gpus:
            self.allocation.append((t, gpus))


def isolated_time(speed: SpeedModel, sim: SimJob) -> float:
    exact = getattr(speed, "isolated_time", None)
    if exact is not None:
        return float(exact(sim))
    return speed.first_start_s + speed.work(sim) / speed.isolated_rate(sim)
