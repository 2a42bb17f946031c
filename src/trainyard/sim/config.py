"""What a simulation run is configured with: `SimOptions` and the queues a workload gets.

This module owns the run's knobs (round interval, what the scheduler is told about run
times, min runtime, cut-off) and `default_queues`, the queues and guaranteed quotas given to
a workload's tenants when the cluster file names none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainyard.core import Queue
from trainyard.fields import MAX_DURATION_S
from trainyard.sim.cluster import Cluster
from trainyard.sim.speed import SpeedModel
from trainyard.sim.workload import Workload, WorkloadError

__all__ = ["MAX_INTERVAL_S", "QUOTA_SHARE", "SimOptions", "default_queues"]


@dataclass(frozen=True)
class SimOptions:
    """Knobs of a run.

    - `interval_s`: seconds between scheduling rounds (0: a round at every event).
    - `estimates`: what the scheduler is told about run times: ``none`` (nothing, the
      default: real users rarely know) or ``exact`` (the true isolated run time, an oracle
      for what-if studies; used by backfill reservations and `sjf`).
    - `min_runtime_s`: seconds a started job runs before it may be preempted.
    - `max_time_s`: stop the simulation at this time (unfinished jobs are reported as such).
    - `fairshare_half_life_s`: keep each queue's decayed usage for DRF, as the server does
      (`sim/fairshare.py`); None (the default): no history.
    """

    interval_s: float = 60.0
    estimates: str = "none"
    min_runtime_s: float = 0.0
    max_time_s: float | None = None
    fairshare_half_life_s: float | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.interval_s <= MAX_INTERVAL_S:  # NaN too
            raise WorkloadError(
                "--interval", f"must be 0 to {MAX_INTERVAL_S:,.0f} seconds, got {self.interval_s}"
            )
        if self.estimates not in ("none", "exact"):
            raise WorkloadError("--estimates", f"must be none or exact, got {self.estimates!r}")
        if not self.min_runtime_s >= 0:  # NaN too
            raise WorkloadError("--min-runtime", "must be >= 0 seconds")
        half_life = self.fairshare_half_life_s
        if half_life is not None and not 0 < half_life <= MAX_DURATION_S:
            raise WorkloadError(
                "--fairshare-half-life", f"must be > 0 days and at most {MAX_DURATION_S // 86400:,}"
            )
        if self.max_time_s is not None and not self.max_time_s >= 0:
            raise WorkloadError("--max-time", f"must be >= 0 seconds, got {self.max_time_s}")


MAX_INTERVAL_S = 86_400.0  # a day between rounds; beyond it a run is not a schedule
QUOTA_SHARE = 0.5  # share of the cluster that queue guarantees add up to (see default_queues)


def default_queues(
    workload: Workload, cluster: Cluster, speed: SpeedModel, share: float = QUOTA_SHARE
) -> tuple[Queue, ...]:
    """Queues for a workload: the cluster file's, else one per workload queue.

    With several queues (Philly's virtual clusters) each is guaranteed its demand-
    proportional part (GPUs x isolated run time) of `share` of the cluster, rounded down;
    the rest is pooled and lent by fair share. Guarantees that add up to the whole cluster
    (share 1.0) keep reclaim evicting whenever any queue dips below its part; operators leave
    headroom, and 0.5 is the default (`--quota-share`)."""
    if not (math.isfinite(share) and 0 <= share <= 1):
        raise WorkloadError("--quota-share", f"must be in [0, 1], got {share}")
    if cluster.queues:
        return cluster.queues
    names = workload.queues or ("default",)
    if len(names) == 1:
        return (Queue(name=names[0], guaranteed=cluster.gpus),)
    demand = dict.fromkeys(names, 0.0)
    for job in workload.jobs:
        demand[job.queue] += job.gpus * speed.work(job) / speed.isolated_rate(job)
    total = sum(demand.values()) or 1.0
    return tuple(
        Queue(name=n, guaranteed=int(share * cluster.gpus * demand[n] / total)) for n in names
    )
