"""Pollux's measured speed model for its six applications: `PolluxSpeed`.

This module owns reading the Pollux OSDI'21 artifact's profiles
(`pollux/profiles/<app>/{placements,scalability,validation-<bsz>}.csv`) and turning them into
progress rates for non-adaptive jobs (fixed GPU count and global batch, as Tiresias and our
other non-elastic policies run them). It is written from the facts in
`shared/traces/README.md`, not from the artifact's code.

Units and completion rule:

- Progress is measured in iterations of the application's initial (smallest profiled) batch
  size, the unit of the validation files' `progress` column (cifar10: 391 per epoch of
  50,000 images at batch 128). A job at the initial batch size makes 1 unit per step.
- Row `e` of `validation-<initial bsz>.csv` is the progress at the end of epoch `e`; epoch `e`
  spans [progress[e-1], progress[e]) (progress[-1] = 0) and uses row `e`'s gradient stats.
- A job completes when it finishes its last epoch, `max_epochs - 1`: `work(job)` is the
  progress recorded for that epoch (the last row the budget allows).
- Rate = gain / total step time, gain = (var + sqr) / (var / scale + sqr), scale = batch /
  initial batch, so a step of the global batch is worth `gain` initial-batch iterations.
- The profiles are for one GPU type; `gpu_type` is ignored.
"""

from __future__ import annotations

import bisect
import csv
import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from trainyard.sim.speed import restart_seconds
from trainyard.sim.workload import SimJob, WorkloadError
from trainyard.textfile import TextFileError, text_stream

__all__ = ["EPOCHS", "PolluxSpeed", "bracket", "normalise_placement"]

EPOCHS: dict[str, int] = {
    "bert": 2,
    "cifar10": 100,
    "deepspeech2": 80,
    "imagenet": 90,
    "ncf": 10,
    "yolov3": 50,
}
_LOCAL_CAP: dict[str, int] = {"yolov3": 8}
_MAX_NODES = 16
_NODE_GPUS = 4

_PLACEMENT_COLS = ("placement", "local_bsz", "step_time", "sync_time")
_SCALE_COLS = ("num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time")
_VALID_COLS = ("progress", "iteration", "metric", "grad_sqr", "grad_var")

# (local_bsz sorted, step_time, sync_time)
_Curve = tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]


def _interp(xs: tuple[float, ...], ys: tuple[float, ...], x: float) -> float:
    """Piecewise-linear through (xs, ys), constant beyond the ends."""
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    i = bisect.bisect_right(xs, x)
    x0, x1 = xs[i - 1], xs[i]
    return ys[i - 1] + (ys[i] - ys[i - 1]) * (x - x0) / (x1 - x0)


def bracket(xs: list[int], x: float) -> tuple[int, int, float]:
    """Indices (lo, hi) of the values around x in sorted xs and the weight of hi."""
    if x <= xs[0]:
        return 0, 0, 0.0
    if x >= xs[-1]:
        return len(xs) - 1, len(xs) - 1, 0.0
    i = bisect.bisect_right(xs, x)
    return i - 1, i, (x - xs[i - 1]) / (xs[i] - xs[i - 1])


def normalise_placement(per_node: tuple[int, ...]) -> str:
    """The profile key of a placement: GPUs per node as digits, lexicographically smallest
    rotation (e.g. (4, 2) -> "24", (4, 4, 2, 1) -> "1442")."""
    s = "".join(str(g) for g in per_node)
    return min(s[i:] + s[:i] for i in range(len(s))) if s else s


def _read(path: Path, cols: tuple[str, ...]) -> list[tuple[int, list[str]]]:
    """Rows (line number, fields) of a CSV with exactly the header `cols`."""
    if not path.is_file():
        raise WorkloadError(f"{path}:0:0", "profile file is missing")
    try:
        stream = text_stream(path)
    except TextFileError as exc:
        raise WorkloadError(f"{path}:0:0", f"profile file {exc}") from None
    with stream as f:
        rows = list(csv.reader(f))
    if not rows or tuple(c.strip() for c in rows[0]) != cols:
        raise WorkloadError(f"{path}:1:1", f"header must be {','.join(cols)}")
    out = []
    for n, fields in enumerate(rows[1:], start=2):
        if not fields:
            continue
        if len(fields) != len(cols):
            raise WorkloadError(
                f"{path}:{n}:{min(len(fields), len(cols)) + 1}",
                f"expected {len(cols)} fields, got {len(fields)}",
            )
        out.append((n, fields))
    if not out:
        raise WorkloadError(f"{path}:2:1", "no data rows")
    return out


def _num(path: Path, line: int, col: int, text: str, *, integer: bool = False) -> float:
    try:
        v = float(int(text)) if integer else float(text)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise WorkloadError(f"{path}:{line}:{col}", f"{text!r} is not {kind}") from None
    if not math.isfinite(v) or v < 0:
        raise WorkloadError(f"{path}:{line}:{col}", f"{text!r} must be finite and >= 0")
    return v


_K = TypeVar("_K", bound=Hashable)
_Samples = dict[float, list[tuple[float, float]]]  # local_bsz -> [(step_time, sync_time)]


def _curves(groups: dict[_K, _Samples]) -> dict[_K, _Curve]:
    """Average duplicate (key, local_bsz) samples and sort them by local_bsz."""
    out: dict[_K, _Curve] = {}
    for key, by_bsz in groups.items():
        bszs = tuple(sorted(by_bsz))
        steps = tuple(sum(s for s, _ in by_bsz[b]) / len(by_bsz[b]) for b in bszs)
        syncs = tuple(sum(s for _, s in by_bsz[b]) / len(by_bsz[b]) for b in bszs)
        out[key] = (bszs, steps, syncs)
    return out


@dataclass(frozen=True)
class _App:
    name: str
    placements: dict[str, _Curve]
    by_size: dict[int, dict[int, _Curve]]  # num_nodes -> num_replicas -> curve
    max_local: float
    bszs: list[int]  # validation batch sizes, ascending; bszs[0] is the initial one
    stats: dict[int, tuple[tuple[float, float], ...]]  # bsz -> per epoch (grad_sqr, grad_var)
    bounds: tuple[float, ...]  # progress at the end of each epoch

    @classmethod
    def load(cls, root: Path, name: str) -> _App:
        d = root / name
        groups: dict[str, _Samples] = {}
        sizes: dict[tuple[int, int], _Samples] = {}
        path = d / "placements.csv"
        for n, f in _read(path, _PLACEMENT_COLS):
            key = f[0].strip()
            if not key.isdigit() or "0" in key or normalise_placement(tuple(map(int, key))) != key:
                raise WorkloadError(f"{path}:{n}:1", f"{key!r} is not a normalised placement")
            b = _num(path, n, 2, f[1])
            st, sy = _num(path, n, 3, f[2]), _num(path, n, 4, f[3])
            groups.setdefault(key, {}).setdefault(b, []).append((st, sy))
            size = (len(key), sum(int(c) for c in key))
            sizes.setdefault(size, {}).setdefault(b, []).append((st, sy))
        path = d / "scalability.csv"
        for n, f in _read(path, _SCALE_COLS):
            nodes, reps = _num(path, n, 1, f[0], integer=True), _num(path, n, 2, f[1], integer=True)
            b = _num(path, n, 3, f[2])
            st, sy = _num(path, n, 4, f[3]), _num(path, n, 5, f[4])
            sizes.setdefault((int(nodes), int(reps)), {}).setdefault(b, []).append((st, sy))
        placements = _curves(groups)
        by_size: dict[int, dict[int, _Curve]] = {}
        for (nodes, reps), curve in _curves(sizes).items():
            by_size.setdefault(nodes, {})[reps] = curve
        stats: dict[int, tuple[tuple[float, float], ...]] = {}
        progress: dict[int, tuple[float, ...]] = {}
        epochs = EPOCHS[name]
        files = sorted(d.glob("validation-*.csv"))
        for path in files:
            tail = path.stem.removeprefix("validation-")
            if not tail.isdigit() or int(tail) <= 0:
                raise WorkloadError(f"{path}:0:0", "name must be validation-<batch size>.csv")
            rows = _read(path, _VALID_COLS)
            if len(rows) < epochs:
                raise WorkloadError(
                    f"{path}:{rows[-1][0]}:1", f"{len(rows)} epochs, {name} needs {epochs}"
                )
            rows = rows[:epochs]
            stats[int(tail)] = tuple(
                (_num(path, n, 4, f[3]), _num(path, n, 5, f[4])) for n, f in rows
            )
            progress[int(tail)] = tuple(_num(path, n, 1, f[0]) for n, f in rows)
            for (n, _), a, b in zip(
                rows[1:], progress[int(tail)], progress[int(tail)][1:], strict=False
            ):
                if b <= a:
                    raise WorkloadError(f"{path}:{n}:1", "progress must increase epoch by epoch")
            if progress[int(tail)][0] <= 0:
                raise WorkloadError(f"{path}:{rows[0][0]}:1", "progress must be > 0")
        if not stats:
            raise WorkloadError(f"{d / 'validation-<bsz>.csv'}:0:0", "no validation files")
        bszs = sorted(stats)
        max_local = _LOCAL_CAP.get(name, max(max(c[0]) for c in placements.values()))
        return cls(name, placements, by_size, max_local, bszs, stats, progress[bszs[0]])

    def step_time(self, per_node: tuple[int, ...], local: float, accum: int) -> float:
        """Seconds per global-batch step: `accum` extra local micro-batches of `local` each."""
        curve = self.placements.get(normalise_placement(per_node))
        if curve is not None:
            st, sy = _interp(curve[0], curve[1], local), _interp(curve[0], curve[2], local)
        else:
            st, sy = self._between_sizes(min(len(per_node), _MAX_NODES), sum(per_node), local)
        return st + (st - sy) * accum

    def _between_sizes(self, nodes: int, reps: int, local: float) -> tuple[float, float]:
        """Bilinear-style interpolation over (num_nodes, num_replicas): linear in replicas
        within each measured node count, then linear between the two nearest node counts."""
        levels = sorted(self.by_size)
        lo, hi, w = bracket(levels, nodes)
        out = [0.0, 0.0]
        for idx, weight in ((lo, 1.0 - w), (hi, w)):
            if weight == 0.0:
                continue
            level = self.by_size[levels[idx]]
            reps_list = sorted(level)
            r0, r1, wr = bracket(reps_list, reps)
            for ridx, rw in ((r0, 1.0 - wr), (r1, wr)):
                c = level[reps_list[ridx]]
                out[0] += weight * rw * _interp(c[0], c[1], local)
                out[1] += weight * rw * _interp(c[0], c[2], local)
        return out[0], out[1]

    def gain(self, batch: float, epoch: int) -> float:
        i0, i1, w = bracket(self.bszs, batch)
        s0, s1 = self.stats[self.bszs[i0]][epoch], self.stats[self.bszs[i1]][epoch]
        sqr = s0[0] + (s1[0] - s0[0]) * w
        var = s0[1] + (s1[1] - s0[1]) * w
        scale = batch / self.bszs[0]
        if sqr + var <= 0:
            return 1.0
        return (var + sqr) / (var / scale + sqr)


class PolluxSpeed:
    """SpeedModel over Pollux's profiles for non-adaptive jobs (`SimJob.application`,
    `gpus` replicas, global `batch_size`). Rates depend on the epoch, so the engine should
    integrate with `rate_at` and `next_change`; `rate` is the rate in the first epoch."""

    name = "pollux"
    first_start_s = 30.0  # Pollux's re-scale delay at every allocation, the first one too

    def __init__(self, profiles_dir: Path, *, restart_s: float = 30.0) -> None:
        self.restart_s = restart_seconds(restart_s)
        self.apps = {name: _App.load(Path(profiles_dir), name) for name in EPOCHS}
        self._step_cache: dict[tuple[str, tuple[int, ...], int], float] = {}
        self._gain_cache: dict[tuple[str, int, int], float] = {}

    def _app(self, job: SimJob) -> _App:
        app = self.apps.get(job.application or "")
        if app is None:
            raise WorkloadError(
                job.id, f"unknown application {job.application!r}; use one of {sorted(EPOCHS)}"
            )
        if job.batch_size is None or job.batch_size <= 0:
            raise WorkloadError(job.id, "a Pollux job needs a global batch_size > 0")
        return app

    def check(self, jobs: Iterable[SimJob]) -> None:
        """A `WorkloadError` naming a trace job and its `batch_size` when that batch lies
        outside its application's profiled range (the profiles measure no other: the rate
        would be an extrapolation, e.g. a mean JCT of 10^14 hours for a batch of 10^20) or
        gives a GPU less than one sample (found by an outside review)."""
        for job in jobs:
            app = self._app(job)
            batch = job.batch_size or 0
            low, high = app.bszs[0], app.bszs[-1]
            if not low <= batch <= high:
                raise WorkloadError(
                    f"{job.id}:batch_size",
                    f"{batch} is outside {app.name}'s profiled global batch sizes "
                    f"{low}..{high}; give one in that range",
                )
            if batch < job.gpus:
                raise WorkloadError(
                    f"{job.id}:batch_size",
                    f"{batch} is less than one sample for each of its {job.gpus} GPUs "
                    "(num_replicas)",
                )

    def epoch(self, job: SimJob, progress: float) -> int:
        """The epoch a job at `progress` is in (clamped to its last one)."""
        app = self._app(job)
        return min(bisect.bisect_right(app.bounds, progress), len(app.bounds) - 1)

    def work(self, job: SimJob) -> float:
        return self._app(job).bounds[-1]

    def next_change(self, job: SimJob, progress: float) -> float:
        """The next progress > `progress` at which the rate changes (the end of the current
        epoch); `math.inf` at or past the job's work."""
        bounds = self._app(job).bounds
        i = bisect.bisect_right(bounds, progress)
        return bounds[i] if i < len(bounds) else math.inf

    def step_time(self, job: SimJob, per_node: tuple[int, ...]) -> float:
        """Seconds per step of the global batch on `per_node`, with gradient accumulation
        when the local batch exceeds the application's per-GPU cap."""
        app = self._app(job)
        assert job.batch_size is not None
        key = (app.name, tuple(per_node), job.batch_size)
        t = self._step_cache.get(key)
        if t is None:
            reps = sum(per_node)
            if reps <= 0 or min(per_node) <= 0:
                raise WorkloadError(job.id, f"placement {per_node} has no GPUs")
            atomic = job.batch_size / reps
            accum = max(math.ceil(atomic / app.max_local - 1e-9) - 1, 0)
            t = app.step_time(tuple(per_node), atomic / (accum + 1), accum)
            self._step_cache[key] = t
        return t

    def gain(self, job: SimJob, epoch: int) -> float:
        """Statistical efficiency of the job's batch at `epoch`, in initial-batch steps."""
        app = self._app(job)
        assert job.batch_size is not None
        key = (app.name, job.batch_size, epoch)
        g = self._gain_cache.get(key)
        if g is None:
            g = app.gain(float(job.batch_size), epoch)
            self._gain_cache[key] = g
        return g

    def rate_at(
        self, job: SimJob, per_node: tuple[int, ...], gpu_type: str, progress: float
    ) -> float:
        """Progress units per second on `per_node` while the job is at `progress`."""
        return self.gain(job, self.epoch(job, progress)) / self.step_time(job, per_node)

    def rate(self, job: SimJob, per_node: tuple[int, ...], gpu_type: str) -> float:
        return self.rate_at(job, per_node, gpu_type, 0.0)

    @staticmethod
    def packed(gpus: int) -> tuple[int, ...]:
        """The tightest placement of `gpus` on 4-GPU nodes, largest first (6 -> (4, 2))."""
        full, rest = divmod(gpus, _NODE_GPUS)
        return (_NODE_GPUS,) * full + ((rest,) if rest else ())

    def isolated_rate(self, job: SimJob) -> float:
        return self.rate(job, self.packed(job.gpus), "")

    def isolated_time(self, job: SimJob) -> float:
        """Seconds to complete alone on its packed placement: `first_start_s` plus every
        epoch's progress at that epoch's rate."""
        bounds = self._app(job).bounds
        step = self.step_time(job, self.packed(job.gpus))
        total, prev = self.first_start_s, 0.0
        for e, end in enumerate(bounds):
            total += (end - prev) * step / self.gain(job, e)
            prev = end
        return total
