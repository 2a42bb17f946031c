"""Validate `PolluxElastic` against the Pollux artifact's own job model.

Drives the same job through the same allocation sequence three ways: (a) with our model
(`trainyard.sim.pollux_elastic`, integrated epoch by epoch with the 30 s re-scale delay at
every change), (b) with the artifact's `simulator.Job` (petuum/adaptdl, branch
`osdi21-artifact`, `simulator/`), which re-picks its batch with its fitted goodput model every
60 s simulated step, as its cluster loop does, and (c) with that Job picking its batch from the
profiles' truth instead ("oracle", which isolates the mechanics). Prints JSON: per job, the
progress at the end of each allocation and the completion time from each, and the relative
differences of (a) to (b) and to (c). Results: docs/pollux-validation.md.

The artifact is imported from the folder given with --artifact (a checkout of its
`simulator/`, traces included). It needs numpy, pandas < 2, scipy and autograd: run this with
a Python that has them, e.g.

    python3.11 -m venv /tmp/pvenv
    /tmp/pvenv/bin/pip install "numpy<2" "pandas<2" "scipy<1.12" autograd
    TRAINYARD_PURE=1 PYTHONPATH=src /tmp/pvenv/bin/python bench/pollux_validate.py \
        --artifact /tmp/pollux-artifact/simulator

Its scheduling policies (which need pymoo) are not used and are replaced by empty stand-ins
before `simulator` is imported.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import types
import warnings
from pathlib import Path
from typing import Any

from trainyard.sim.pollux_elastic import PolluxElastic
from trainyard.sim.workload import SimJob

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("TRAINYARD_SHARED", REPO.parent / "shared"))

Seq = list[tuple[float, tuple[int, ...]]]  # (seconds, GPUs per node); last one runs to the end

# One job per application from workload-1.csv, each through a sequence of re-allocations:
# starts small, grows within a node, spreads over nodes, shrinks, then finishes on a
# mid-size placement. Two sequences reach 5+ nodes (interpolated step times).
JOBS: list[tuple[str, str, int, int, Seq]] = [
    ("bert-27", "bert", 12, 384,
     [(900, (1,)), (900, (4,)), (600, (4, 4)), (600, (2,)), (math.inf, (4, 4, 4))]),
    ("cifar10-0", "cifar10", 6, 2048,
     [(600, (1,)), (300, (4,)), (300, (4, 4)), (300, (2,)), (math.inf, (4, 2))]),
    ("cifar10-4", "cifar10", 16, 4096,
     [(300, (2,)), (300, (4, 4, 4, 4)), (300, (3, 1)), (math.inf, (4,) * 6)]),
    ("deepspeech2-1", "deepspeech2", 6, 320,
     [(1800, (1,)), (1200, (4,)), (900, (4, 4)), (600, (2,)), (math.inf, (4, 4, 4, 4))]),
    ("imagenet-11", "imagenet", 32, 6400,
     [(7200, (4,)), (7200, (4, 4, 4, 4)), (3600, (2, 2)), (math.inf, (4,) * 8)]),
    ("ncf-2", "ncf", 1, 32768,  # ~10 s on one GPU: 5 s of work per segment
     [(35, (1,)), (35, (2,)), (35, (4, 4)), (math.inf, (4,))]),
    ("yolov3-31", "yolov3", 4, 64,
     [(3600, (1,)), (3600, (4,)), (1800, (4, 4)), (1800, (2,)), (math.inf, (4, 4, 4, 4))]),
]  # fmt: skip
# Placements on 5+ nodes whose (nodes, replicas) pair is not measured in scalability.csv: step
# times are interpolated, and PolluxSpeed's scheme differs from the artifact's (see the doc).
WIDE: list[tuple[str, str, int, int, Seq]] = [
    ("bert-78", "bert", 16, 384, [(900, (4,)), (math.inf, (4,) * 5)]),
    ("cifar10-8", "cifar10", 12, 4096, [(300, (4,)), (math.inf, (4,) * 5)]),
    ("deepspeech2-3", "deepspeech2", 12, 640, [(1200, (4,)), (math.inf, (4,) * 5)]),
    ("imagenet-126", "imagenet", 24, 3200, [(3600, (4, 4)), (math.inf, (4,) * 10)]),
    ("yolov3-51", "yolov3", 4, 64, [(3600, (4,)), (math.inf, (4,) * 10)]),
]


def ours(model: PolluxElastic, job: SimJob, seq: Seq) -> tuple[list[float], float]:
    """Progress at the end of each segment but the last, and the completion time."""
    work = model.work(job)
    progress, t, marks = 0.0, 0.0, []
    for seconds, placement in seq:
        end_t = t + seconds
        t += model.restart_s  # re-scale delay at every (re)allocation, the first included
        while progress < work and t < end_t:
            rate = model.rate_at(job, placement, "", progress)
            edge = min(model.next_change(job, progress), work)
            dt = (edge - progress) / rate
            if t + dt <= end_t:
                progress, t = edge, t + dt
            else:
                progress, t = progress + rate * (end_t - t), end_t
        if progress >= work:
            return marks, t
        marks.append(progress)
        t = end_t
    raise AssertionError("the last segment runs to completion")


def our_batches(model: PolluxElastic, job: SimJob, seq: Seq) -> list[list[int]]:
    """Our best batch per segment, first and last epoch."""
    last = len(model.speed.apps[str(job.application)].bounds) - 1
    return [[model.best_batch(job, p, e).batch for e in (0, last)] for _, p in seq]


def load_artifact(path: Path) -> Any:
    sys.path.insert(0, str(path))
    for mod in ("pollux", "optimus", "tiresias"):  # policies: not used here, need pymoo
        stub = types.ModuleType(mod)
        setattr(stub, mod.capitalize() + "Policy", type(mod.capitalize() + "Policy", (), {}))
        sys.modules[mod] = stub
    warnings.simplefilter("ignore")
    import simulator

    return simulator


def oracle_job(sim: Any, trace_batch: int) -> Any:
    """The artifact's Job, but picking its batch from the profiles' truth (the artifact's own
    `get_throughput` and `get_grad_stats`) over the candidates `PolluxElastic` uses, instead of
    from its fitted goodput model: isolates the progress mechanics and interpolation."""

    class OracleJob(sim.Job):  # type: ignore[misc,name-defined]
        def update_local_bsz(self, placement: Any) -> None:
            app = self.application
            if self.target_batch_size is not None:
                return super().update_local_bsz(placement)
            placement = tuple(filter(None, placement))
            reps, init, top = sum(placement), app.init_batch_size, app.max_batch_size
            epoch = min(self.epoch, app.max_epochs - 1)
            lo = min(max(init, app.min_local_bsz * reps), top)
            cands = [lo * (top / lo) ** (i / 49) for i in range(50)]
            cands += [b for b in [*app.validation, trace_batch] if lo <= b <= top]
            best = None
            for b in cands:
                local = b / reps
                accum = max(math.ceil(local / app.max_local_bsz - 1e-8) - 1, 0)
                if reps == 1 and local > init + 1e-8:
                    accum = max(accum, 1)
                atomic = math.ceil(local / (accum + 1) - 1e-8)
                if not app.min_local_bsz <= atomic <= app.max_local_bsz:
                    continue
                atomic = min(atomic, int(top / (reps * (accum + 1))))
                batch = reps * atomic * (accum + 1)
                step, sync = app.get_throughput(placement, atomic)
                sqr, var = app.get_grad_stats(batch, epoch)
                gain = (var + sqr) / (var * init / batch + sqr)
                goodput = gain / (step + (step - sync) * accum)
                if best is None or goodput > best[0]:
                    best = (goodput, atomic, accum)
            assert best is not None
            _, self.atomic_bsz, self.accum_steps = best
            return None

    return OracleJob


def theirs(
    sim: Any, name: str, app: str, seq: Seq, oracle_batch: int | None = None
) -> tuple[list[float], float, list[list[int]]]:
    """The artifact's Job through `seq` in 60 s steps (its scheduling interval; shorter when a
    segment is), and the batch sizes it ran in each segment. With `oracle_batch` (the trace
    batch), the `oracle_job` variant."""
    cls = sim.Job if oracle_batch is None else oracle_job(sim, oracle_batch)
    job = cls(name, sim.APPLICATIONS[app], 0)
    if app == "ncf":  # as its Cluster sets it for Pollux
        job.target_batch_size = 32768
    marks: list[float] = []
    batches: list[list[int]] = []
    for seconds, placement in seq:
        job.reallocate(list(placement))
        done, seen = 0.0, []
        while job.completion_time is None and done < seconds:
            step = min(60.0, seconds - done)
            job.step(step)
            done += step
            batch = sum(placement) * job.atomic_bsz * (job.accum_steps + 1)
            if batch not in seen:
                seen.append(batch)
        batches.append(seen)
        if job.completion_time is not None:
            return marks, float(job.completion_time), batches
        marks.append(float(job.progress))
    raise AssertionError("the last segment runs to completion")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--artifact", type=Path, required=True, help="the artifact's simulator/")
    ap.add_argument("--profiles", type=Path, default=SHARED / "traces/pollux/profiles")
    ap.add_argument("--only", help="comma-separated job names")
    ap.add_argument("--wide", action="store_true", help="also the 5+ node placements (WIDE)")
    ap.add_argument(
        "--exact-epochs",
        action="store_true",
        help="diagnostic: stop the artifact rounding each epoch's time to whole seconds",
    )
    args = ap.parse_args()
    sim = load_artifact(args.artifact)
    if args.exact_epochs:
        sim.round = lambda x: x  # shadows the builtin in Job.step
    model = PolluxElastic(args.profiles)
    rows = []
    for group, (name, app, gpus, bsz, seq) in [("main", j) for j in JOBS] + [
        ("wide", j) for j in (WIDE if args.wide else [])
    ]:
        if args.only and name not in args.only.split(","):
            continue
        job = SimJob(name, 0.0, gpus, application=app, batch_size=bsz)
        our_marks, our_t = ours(model, job, seq)
        their_marks, their_t, batches = theirs(sim, name, app, seq)
        orc_marks, orc_t, _ = theirs(sim, name, app, seq, oracle_batch=bsz)
        diffs = [abs(a / b - 1) for a, b in zip(our_marks, their_marks, strict=False) if b > 0]
        orc_diffs = [abs(a / b - 1) for a, b in zip(our_marks, orc_marks, strict=False) if b > 0]
        rows.append(
            {
                "job": name,
                "group": group,
                "sequence": [[s if math.isfinite(s) else None, list(p)] for s, p in seq],
                "ours_progress": [round(x, 1) for x in our_marks],
                "artifact_progress": [round(x, 1) for x in their_marks],
                "ours_finish_s": round(our_t, 1),
                "artifact_finish_s": round(their_t, 1),
                "finish_diff": round(our_t / their_t - 1, 4),
                "max_progress_diff": round(max(diffs, default=0.0), 4),
                "oracle_progress": [round(x, 1) for x in orc_marks],
                "oracle_finish_s": round(orc_t, 1),
                "oracle_finish_diff": round(our_t / orc_t - 1, 4),
                "oracle_max_progress_diff": round(max(orc_diffs, default=0.0), 4),
                "artifact_batches": batches,
                "our_batches": our_batches(model, job, seq),
            }
        )
        print(json.dumps(rows[-1]), file=sys.stderr)
    worst = {
        key: max((abs(r[key]) for r in rows if r["group"] == "main"), default=0.0)
        for key in ("finish_diff", "max_progress_diff", "oracle_finish_diff",
                    "oracle_max_progress_diff")
    }  # fmt: skip
    print(json.dumps({"jobs": rows, "worst_main": worst}, indent=1))


if __name__ == "__main__":
    main()
