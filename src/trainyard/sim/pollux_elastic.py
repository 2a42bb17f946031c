"""Pollux's adaptive jobs: `PolluxElastic`, a SpeedModel whose jobs pick their own batch size.

This module owns the job side of Pollux's co-adaptation: on a placement, an adaptive job runs
the global batch size that maximises its goodput, statistical efficiency x throughput, and
re-picks it whenever its placement or epoch changes. Profiles, step times and gains are those
of `trainyard.sim.pollux_speed.PolluxSpeed` (composed, not re-read); what is added here is the
choice of (global batch, per-GPU micro-batch, accumulation steps) and the rates that follow.

The rules, from the facts in `shared/traces/README.md` and the Pollux artifact's simulator
(petuum/adaptdl, branch `osdi21-artifact`, `simulator/goodput.py` and `simulator.py`,
Apache-2.0; cited as facts, written anew here):

- Candidates: 50 global batch sizes spaced geometrically from max(initial batch, smallest
  profiled per-GPU batch x replicas) to the application's maximum (largest validation batch),
  plus the validation batch sizes and the job's trace batch when they lie in that range.
- A candidate's per-GPU batch is split into `accum + 1` equal micro-batches (rounded up) when
  it exceeds the per-GPU cap (largest profiled, yolov3 8); on one GPU a batch above the initial
  one always accumulates at least once (Pollux needs two micro-batches to measure gradient
  noise). The micro-batch must lie within the profiled per-GPU range, and is cut so that
  replicas x micro-batch x (accum + 1) stays within the maximum.
- Goodput = gain(batch, epoch) / step time, both from the profiles (`PolluxSpeed`'s
  interpolation), in initial-batch iterations per second. The job takes the best candidate.
  (The artifact's job picks with its own fitted model of step time and with the gradient
  statistics it last measured; `docs/pollux-validation.md` measures what that changes.)
- Pollux's evaluation runs ncf at a fixed batch of 32,768 (the artifact sets it for ncf under
  Pollux); `fixed_batch` holds such overrides, `{}` makes every application adaptive.

Rates change only at epoch boundaries (`next_change`), and at re-allocations, which the engine
charges `restart_s` (Pollux's 30 s re-scale delay; also `first_start_s`).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from trainyard.sim.pollux_speed import PolluxSpeed
from trainyard.sim.workload import SimJob, WorkloadError

__all__ = ["POLLUX_FIXED_BATCH", "BatchChoice", "PolluxElastic", "StepSample"]

POLLUX_FIXED_BATCH: Mapping[str, int] = {"ncf": 32768}
_CANDIDATES = 50
_EPS = 1e-8


class BatchChoice(NamedTuple):
    """A job's configuration on a placement: global `batch` = replicas x micro-batch x
    (`accum` + 1), and its `goodput` (initial-batch iterations per second)."""

    batch: int
    accum: int
    goodput: float


class StepSample(NamedTuple):
    """What a running job observes per optimiser step: `step_time` and `sync_time` of the last
    (all-reducing) micro-batch, and `total` = step_time + (step_time - sync_time) x accum."""

    atomic: int
    accum: int
    step_time: float
    sync_time: float
    total: float


class PolluxElastic:
    """SpeedModel for adaptive Pollux jobs (`SimJob.application`; `batch_size` optional and
    only a candidate). A job's rate on `per_node` is the goodput of its best batch there in its
    current epoch; integrate with `rate_at` and `next_change`."""

    name = "pollux-elastic"
    first_start_s = 30.0

    def __init__(
        self,
        profiles_dir: Path | None = None,
        *,
        speed: PolluxSpeed | None = None,
        fixed_batch: Mapping[str, int] = POLLUX_FIXED_BATCH,
    ) -> None:
        if speed is None:
            if profiles_dir is None:
                raise WorkloadError("profiles_dir", "give the profiles folder or a PolluxSpeed")
            speed = PolluxSpeed(profiles_dir)
        self.speed = speed
        self.restart_s = speed.restart_s
        self.fixed_batch = dict(fixed_batch)
        self._best: dict[tuple[str, tuple[int, ...], int, int | None], BatchChoice] = {}

    # ---- application facts --------------------------------------------------------------

    def _app_name(self, job: SimJob) -> str:
        if job.application not in self.speed.apps:
            raise WorkloadError(
                job.id,
                f"unknown application {job.application!r}; use one of {sorted(self.speed.apps)}",
            )
        return job.application

    def bounds(self, job: SimJob) -> tuple[int, int]:
        """(initial, maximum) global batch: the smallest and largest validation batch."""
        bszs = self.speed.apps[self._app_name(job)].bszs
        return bszs[0], bszs[-1]

    def local_range(self, job: SimJob) -> tuple[float, float]:
        """The per-GPU micro-batch range: smallest profiled, and the cap `PolluxSpeed` uses."""
        app = self.speed.apps[self._app_name(job)]
        return min(c[0][0] for c in app.placements.values()), app.max_local

    def epoch(self, job: SimJob, progress: float) -> int:
        bounds = self.speed.apps[self._app_name(job)].bounds
        return min(bisect.bisect_right(bounds, progress), len(bounds) - 1)

    # ---- batch choice -------------------------------------------------------------------

    def split(self, job: SimJob, reps: int, batch: float) -> tuple[int, int]:
        """(atomic, accum) for a global batch on `reps` GPUs, Pollux's way (module docstring);
        the micro-batch may fall outside the profiled range (`best_batch` skips those)."""
        init, top = self.bounds(job)
        _, cap = self.local_range(job)
        local = batch / reps
        accum = max(math.ceil(local / cap - _EPS) - 1, 0)
        if reps == 1 and local > init + _EPS:
            accum = max(accum, 1)
        atomic = math.ceil(local / (accum + 1) - _EPS)
        return min(atomic, int(top / (reps * (accum + 1)))), accum

    def goodput(
        self, job: SimJob, per_node: tuple[int, ...], atomic: int, accum: int, epoch: int
    ) -> float:
        """Initial-batch iterations per second with this configuration at `epoch`."""
        app = self.speed.apps[self._app_name(job)]
        batch = sum(per_node) * atomic * (accum + 1)
        return app.gain(float(batch), epoch) / app.step_time(tuple(per_node), atomic, accum)

    def _candidates(self, job: SimJob, reps: int) -> list[float]:
        init, top = self.bounds(job)
        lo_local, _ = self.local_range(job)
        lo = min(max(float(init), lo_local * reps), float(top))
        grid = [lo * (top / lo) ** (i / (_CANDIDATES - 1)) for i in range(_CANDIDATES)]
        extra = list(self.speed.apps[self._app_name(job)].bszs)
        if job.batch_size is not None:
            extra.append(job.batch_size)
        return grid + [float(b) for b in extra if lo <= b <= top]

    def best_batch(self, job: SimJob, per_node: tuple[int, ...], epoch: int) -> BatchChoice:
        """The goodput-maximising configuration on `per_node` at `epoch` (or the application's
        fixed batch, see `fixed_batch`)."""
        per_node = tuple(per_node)
        name = self._app_name(job)
        if not per_node or min(per_node) <= 0:
            raise WorkloadError(job.id, f"placement {per_node} has no GPUs")
        key = (name, per_node, epoch, job.batch_size)
        hit = self._best.get(key)
        if hit is not None:
            return hit
        reps = sum(per_node)
        lo_local, cap = self.local_range(job)
        fixed = self.fixed_batch.get(name)
        best: BatchChoice | None = None
        for batch in [float(fixed)] if fixed is not None else self._candidates(job, reps):
            atomic, accum = self.split(job, reps, batch)
            if fixed is None and not lo_local <= atomic <= cap:
                continue
            atomic = max(atomic, 1)
            g = self.goodput(job, per_node, atomic, accum, epoch)
            if best is None or g > best.goodput:
                best = BatchChoice(reps * atomic * (accum + 1), accum, g)
        if best is None:  # more replicas than the smallest micro-batch allows: run at 1
            atomic, accum = self.split(job, reps, float(self.bounds(job)[1]))
            atomic = max(atomic, 1)
            g = self.goodput(job, per_node, atomic, accum, epoch)
            best = BatchChoice(reps * atomic * (accum + 1), accum, g)
        self._best[key] = best
        return best

    def step_samples(self, job: SimJob, per_node: tuple[int, ...], batch: float) -> StepSample:
        """The step and sync time a job running global `batch` on `per_node` would measure."""
        app = self.speed.apps[self._app_name(job)]
        atomic, accum = self.split(job, sum(per_node), batch)
        atomic = max(atomic, 1)
        step = app.step_time(tuple(per_node), atomic, 0)
        sync = 2 * step - app.step_time(tuple(per_node), atomic, 1)  # step(1) = 2 step - sync
        return StepSample(atomic, accum, step, max(sync, 0.0), step + (step - sync) * accum)

    # ---- SpeedModel ---------------------------------------------------------------------

    def work(self, job: SimJob) -> float:
        return self.speed.apps[self._app_name(job)].bounds[-1]

    def next_change(self, job: SimJob, progress: float) -> float:
        """The end of the epoch `progress` is in; `math.inf` at or past the job's work."""
        bounds = self.speed.apps[self._app_name(job)].bounds
        i = bisect.bisect_right(bounds, progress)
        return bounds[i] if i < len(bounds) else math.inf

    def rate_at(
        self, job: SimJob, per_node: tuple[int, ...], gpu_type: str, progress: float
    ) -> float:
        """Goodput of the best batch on `per_node` in the epoch of `progress`."""
        return self.best_batch(job, per_node, self.epoch(job, progress)).goodput

    def rate(self, job: SimJob, per_node: tuple[int, ...], gpu_type: str) -> float:
        return self.rate_at(job, per_node, gpu_type, 0.0)

    def isolated_rate(self, job: SimJob) -> float:
        """First-epoch rate on the job's trace GPU count (`SimJob.gpus`, Pollux's
        `num_replicas`), packed on 4-GPU nodes."""
        return self.rate(job, PolluxSpeed.packed(job.gpus), "")

    def isolated_time(self, job: SimJob) -> float:
        """Seconds to complete alone on the packed placement of its trace GPU count, re-picking
        the batch every epoch: `first_start_s` plus each epoch's progress at its rate. The trace
        count is the reference because an adaptive job has no size of its own; it is the one
        the non-adaptive baselines give it, so the two models compare on equal GPUs."""
        bounds = self.speed.apps[self._app_name(job)].bounds
        placement = PolluxSpeed.packed(job.gpus)
        total, prev = self.first_start_s, 0.0
        for e, end in enumerate(bounds):
            total += (end - prev) / self.best_batch(job, placement, e).goodput
            prev = end
        return total
