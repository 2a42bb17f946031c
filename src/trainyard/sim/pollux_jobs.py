"""Pollux workloads as Pollux's evaluation runs them: elastic jobs that adapt their batch size.

`PolluxJobs` is the speed model of a Pollux run with elastic jobs (the default of
`trainyard simulate --workload pollux:F`; `--rigid` runs the trace's fixed sizes with
`PolluxSpeed`). It owns what lies between the simulator's truth and the scheduler's view:

- `elastic_workload`: each job may run on 1 up to `max_gpus(job)` GPUs: twice-explored sizes up
  to 64 and the application's maximum batch over its smallest profiled per-GPU batch (the
  artifact's bound for its Pollux jobs); ncf runs at a fixed batch on one GPU, so it stays
  rigid. A job asks for its trace `num_replicas` when it is pending.
- Progress: an elastic job's rate is `PolluxElastic`'s (the best batch on its placement in
  its epoch); a rigid one's is `PolluxSpeed`'s, so a mixed workload runs both.
- The scheduler's view (`core.Elastic`, through the engine's `elastic_info` and `observe`
  hooks): the batch range and per-GPU cap, the gradient statistics at the initial batch in
  the job's current epoch, one `core.StepSample` per placement and batch the job has run at
  (the step time of the batch it chose there, a new one whenever its epoch's best batch
  changes between restarts), the most recently run last and at most `SAMPLES_KEPT` of them,
  as the server keeps a job's reports (`server.services.reports`: an observation per GPUs,
  nodes and batch, each report making its own the newest, the 16 newest passed to the core),
  and the samples it has left (`remaining`: its
  progress still to make, in samples of its initial batch; a job trains to a target, as a
  training script runs a set number of epochs), as a real job's SDK would report them. The
  core fits its own goodput model to these (`core.goodput`); it never sees the profiles.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from trainyard.core import Elastic, StepSample
from trainyard.sim.pollux_elastic import PolluxElastic
from trainyard.sim.pollux_speed import PolluxSpeed, bracket
from trainyard.sim.workload import SimJob, Workload

__all__ = ["MAX_GPUS", "SAMPLES_KEPT", "PolluxJobs"]

MAX_GPUS = 64  # the artifact's simulator cap on a Pollux job's replicas
SAMPLES_KEPT = 16  # step samples the core sees, as the server's `reports.MAX_SAMPLES`


class PolluxJobs:
    """Speed model for Pollux workloads whose jobs may be elastic (see the module docstring)."""

    name = "pollux-elastic"
    first_start_s = 30.0

    def __init__(self, profiles_dir: Path, *, restart_s: float = 30.0) -> None:
        self.rigid = PolluxSpeed(profiles_dir, restart_s=restart_s)
        self.restart_s = self.rigid.restart_s
        self.adaptive = PolluxElastic(speed=self.rigid)
        self._placed: dict[str, tuple[int, ...]] = {}  # job id -> the placement it runs on

    def check(self, jobs: Iterable[SimJob]) -> None:
        """The trace's batch sizes against the profiles (`PolluxSpeed.check`): a job at its
        trace size, rigid or not yet resized, runs at that batch."""
        self.rigid.check(jobs)

    # -- which jobs are elastic ---------------------------------------------------------------

    def max_gpus(self, job: SimJob) -> int:
        """The most GPUs the job can use: its maximum batch over its smallest per-GPU batch,
        at most `MAX_GPUS`; 1 for an application run at a fixed batch (ncf)."""
        if job.application in self.adaptive.fixed_batch:
            return 1
        _init, top = self.adaptive.bounds(job)
        lo_local, _cap = self.adaptive.local_range(job)
        return max(1, min(MAX_GPUS, int(top // max(lo_local, 1.0))))

    def elastic_workload(self, workload: Workload) -> Workload:
        """Every job elastic on [1, max_gpus], asking for its trace size when pending."""
        jobs = []
        for job in workload.jobs:
            top = self.max_gpus(job)
            if top > 1:
                gpus = min(job.gpus, top)
                job = replace(job, gpus=gpus, min_gpus=1, max_gpus=top)
            jobs.append(job)
        return replace(workload, jobs=tuple(jobs))

    # -- SpeedModel ---------------------------------------------------------------------------

    @staticmethod
    def _elastic(job: SimJob) -> bool:
        return job.min_gpus is not None or job.max_gpus is not None

    def work(self, job: SimJob) -> float:
        return self.rigid.work(job)

    def next_change(self, job: SimJob, progress: float) -> float:
        return self.rigid.next_change(job, progress)

    def rate_at(
        self, job: SimJob, per_node: tuple[int, ...], gpu_type: str, progress: float
    ) -> float:
        model = self.adaptive if self._elastic(job) else self.rigid
        return model.rate_at(job, per_node, gpu_type, progress)

    def rate(self, job: SimJob, per_node: tuple[int, ...], gpu_type: str) -> float:
        return self.rate_at(job, per_node, gpu_type, 0.0)

    def isolated_rate(self, job: SimJob) -> float:
        return self.rate(job, PolluxSpeed.packed(job.gpus), "")

    def isolated_time(self, job: SimJob) -> float:
        model = self.adaptive if self._elastic(job) else self.rigid
        return model.isolated_time(job)

    # -- what the scheduler is told -----------------------------------------------------------

    def _stats(self, job: SimJob, progress: float) -> tuple[float, float]:
        """The gradient statistics the job measures now: those of its current epoch at the
        batch it runs (in initial-batch units, interpolated between the profiled batches, as
        `PolluxSpeed`'s gain reads them), or at the initial batch before it has run."""
        app = self.rigid.apps[job.application or ""]
        epoch = self.adaptive.epoch(job, progress)
        per_node = self._placed.get(job.id)
        if per_node is None:
            sqr, var = app.stats[app.bszs[0]][epoch]
            return sqr, var
        batch = float(self.adaptive.best_batch(job, per_node, epoch).batch)
        i0, i1, w = bracket(app.bszs, batch)
        s0, s1 = app.stats[app.bszs[i0]][epoch], app.stats[app.bszs[i1]][epoch]
        return s0[0] + (s1[0] - s0[0]) * w, s0[1] + (s1[1] - s0[1]) * w

    def elastic_info(self, job: SimJob) -> Elastic:
        """The scheduler's first view of an elastic job: its batch range, no samples yet."""
        init, top = self.adaptive.bounds(job)
        lo, cap = self.adaptive.local_range(job)
        self._placed.pop(job.id, None)  # not run yet (ids repeat across workloads)
        sqr, var = self._stats(job, 0.0)
        return Elastic(
            batch=init,
            max_batch=top,
            max_local_batch=math.floor(cap),
            min_local_batch=math.ceil(lo),
            grad_sqr=sqr,
            grad_var=var,
            remaining=self.work(job) * init,
        )

    def report(self, job: SimJob, progress: float, info: Elastic) -> Elastic:
        """`info` while the job runs on: the gradient statistics of its current epoch, and a
        step sample at the batch it runs now when that changed since its last sample (the
        same object when nothing has)."""
        sqr, var = self._stats(job, progress)
        left = self._left(job, progress, info)
        samples = info.samples
        per_node = self._placed.get(job.id)
        if per_node is not None:
            samples = self._sampled(job, per_node, progress, samples)
        if (sqr, var, left) == (info.grad_sqr, info.grad_var, info.remaining) and (
            samples is info.samples
        ):
            return info
        return replace(info, samples=samples, grad_sqr=sqr, grad_var=var, remaining=left)

    def _sampled(
        self,
        job: SimJob,
        per_node: tuple[int, ...],
        progress: float,
        samples: tuple[StepSample, ...],
    ) -> tuple[StepSample, ...]:
        """`samples` with the step the job measures on `per_node` at its epoch's best batch
        the newest (an earlier one of the same GPUs, nodes and batch replaced), the oldest
        dropped beyond `SAMPLES_KEPT`; `samples` itself when that step is already the newest."""
        choice = self.adaptive.best_batch(job, per_node, self.adaptive.epoch(job, progress))
        shape = (sum(per_node), len(per_node), choice.batch)
        if samples and (samples[-1].gpus, samples[-1].nodes, samples[-1].batch) == shape:
            return samples
        seen = self.adaptive.step_samples(job, per_node, choice.batch)
        kept = [s for s in samples if (s.gpus, s.nodes, s.batch) != shape]
        kept.append(StepSample(shape[0], shape[1], shape[2], seen.total))
        return tuple(kept[-SAMPLES_KEPT:])

    def _left(self, job: SimJob, progress: float, info: Elastic) -> float:
        """Samples of the initial batch still to train (progress is in its steps)."""
        return max(0.0, self.work(job) - progress) * info.batch

    def observe(
        self, job: SimJob, per_node: tuple[int, ...], progress: float, info: Elastic
    ) -> Elastic:
        """`info` after the job started on `per_node` at `progress`: the step it measures
        there (at the batch it chose) is its newest sample (`_sampled`), and the gradient
        statistics are those of its current epoch."""
        self._placed[job.id] = tuple(per_node)
        samples = self._sampled(job, tuple(per_node), progress, info.samples)
        sqr, var = self._stats(job, progress)
        return replace(
            info, samples=samples, grad_sqr=sqr, grad_var=var,
            remaining=self._left(job, progress, info),
        )  # fmt: skip
