"""Trace-duration workloads (Philly, synthetic) with a share of their jobs made elastic, for
what-if studies (`trainyard simulate --elastic-share F`).

The Philly trace records how long each job ran at its size, nothing about how it would run at
another. `ElasticDuration` makes a chosen share of the GPU jobs elastic and gives them a
stated scaling law; the other jobs run exactly as `FixedDuration` runs them (their trace run
time wherever they are placed).

- Which jobs: a job is elastic when a hash of (seed, job id) falls below the share, so the
  choice is reproducible and does not depend on the order or number of other jobs. An
  elastic job may run on 1 up to min(64, 4 x its trace size) GPUs and asks for its trace size
  when pending.
- Its speed, at a fixed global batch (it does not adapt its batch): one step on k GPUs over n
  nodes takes, in units of a one-GPU step, t(k, n) = 0.02 + 0.98 / k + sync, with sync = 0 on
  one GPU, sigma inside a node and 3 sigma across nodes; sigma is drawn per job from the same
  hash, uniform in [0.02, 0.10] (data-parallel jobs whose gradient exchange costs 2-10% of a
  one-GPU step in a node). Its work is its trace run time at its trace size packed on the
  fewest nodes, so at that size and placement it takes exactly its trace time; the
  finish-time fairness reference (isolated time) is that run time too.
- The scheduler's view: a fixed global batch, and the step it measures on each placement
  it has run on (`core.StepSample`), as a real job's SDK would report it. The truth has the
  form of the core's goodput model (`core.goodput`) with parameters the scheduler is not
  told, so a what-if run measures the policy, not a model mismatch.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

from trainyard.core import Elastic, StepSample
from trainyard.sim.speed import FixedDuration
from trainyard.sim.workload import SimJob, Workload, WorkloadError

__all__ = ["GROWTH", "MAX_GPUS", "ElasticDuration"]

MAX_GPUS = 64
GROWTH = 4  # an elastic job may grow to this many times its trace size
_OVERHEAD = 0.02
_SYNC = (0.02, 0.10)
_NET = 3.0
_BATCH = 256  # the nominal global batch the scheduler is told (a fixed one)
_SAMPLES_KEPT = 8


def _unit(seed: int, job_id: str, salt: str) -> float:
    """A number in [0, 1) from (seed, job id, salt), stable across runs and platforms."""
    digest = hashlib.blake2b(f"{seed}:{salt}:{job_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


class ElasticDuration:
    """Speed model of a trace-duration workload with `share` of its jobs elastic (see the
    module docstring); `node_gpus` is the cluster's GPUs per node (the packed reference)."""

    name = "duration-elastic"
    first_start_s = 0.0

    def __init__(self, share: float, *, seed: int, node_gpus: int, restart_s: float) -> None:
        if not 0.0 <= share <= 1.0:
            raise WorkloadError(
                "--elastic-share", f"must be between 0 and 1 (a share of jobs), got {share:g}"
            )
        if node_gpus < 1:
            raise WorkloadError("cluster", "needs GPUs on its nodes for elastic jobs")
        self.share = share
        self.seed = seed
        self.node_gpus = node_gpus
        self.fixed = FixedDuration(restart_s=restart_s)
        self.restart_s = self.fixed.restart_s

    # -- which jobs are elastic ---------------------------------------------------------------

    def elastic_workload(self, workload: Workload) -> Workload:
        """`workload` with the chosen share of its GPU jobs elastic on [1, max]."""
        jobs = []
        for job in workload.jobs:
            if job.gpus >= 1 and _unit(self.seed, job.id, "pick") < self.share:
                top = max(job.gpus, min(MAX_GPUS, GROWTH * job.gpus))
                job = replace(job, min_gpus=1, max_gpus=top)
            jobs.append(job)
        return replace(workload, jobs=tuple(jobs))

    @staticmethod
    def _elastic(job: SimJob) -> bool:
        return job.min_gpus is not None or job.max_gpus is not None

    def sync(self, job: SimJob) -> float:
        """The job's synchronisation cost inside a node, in one-GPU steps."""
        lo, hi = _SYNC
        return lo + (hi - lo) * _unit(self.seed, job.id, "sync")

    def step_time(self, job: SimJob, per_node: tuple[int, ...]) -> float:
        """t(k, n) of the module docstring, in one-GPU steps."""
        k = sum(per_node)
        sync = 0.0 if k <= 1 else self.sync(job) * (_NET if len(per_node) > 1 else 1.0)
        return _OVERHEAD + (1.0 - _OVERHEAD) / k + sync

    def packed(self, gpus: int) -> tuple[int, ...]:
        full, rest = divmod(gpus, self.node_gpus)
        return (self.node_gpus,) * full + ((rest,) if rest else ())

    # -- SpeedModel ---------------------------------------------------------------------------

    def work(self, job: SimJob) -> float:
        duration = self.fixed.work(job)
        if not self._elastic(job):
            return duration
        return duration / self.step_time(job, self.packed(job.gpus))

    def rate(self, job: SimJob, per_node: tuple[int, ...], gpu_type: str) -> float:
        if not self._elastic(job):
            return 1.0
        return 1.0 / self.step_time(job, per_node)

    def isolated_rate(self, job: SimJob) -> float:
        return self.rate(job, self.packed(job.gpus), "")

    # -- what the scheduler is told -----------------------------------------------------------

    def elastic_info(self, job: SimJob) -> Elastic:
        """A fixed global batch and no samples yet."""
        return Elastic(batch=_BATCH, max_batch=_BATCH)

    def observe(
        self, job: SimJob, per_node: tuple[int, ...], progress: float, info: Elastic
    ) -> Elastic:
        """`info` after the job started on `per_node`: the step it measures there replaces any
        earlier sample of that shape (one second per one-GPU step)."""
        sample = StepSample(sum(per_node), len(per_node), _BATCH, self.step_time(job, per_node))
        kept = [s for s in info.samples if (s.gpus, s.nodes) != (sample.gpus, sample.nodes)]
        kept.append(sample)
        return replace(info, samples=tuple(kept[-_SAMPLES_KEPT:]))
