"""Issue 13 diagnostic, not a policy (JSON lines on stdout): the elastic policy on Pollux's
workloads with the core's goodput model replaced by the simulator's truth.

    PYTHONPATH=src python bench/pollux_oracle.py [--fitted] [--loads 0.5,2.0]
        [--set resize_restart_s=60 ...] [--explore 16] [--restart-s 0] [--interval 0]
        [--gap] [--truth-apps yolov3,cifar10]

With the truth, every elastic job's `GoodputModel` (`core.goodput.fit`, which the resize
action calls) answers goodput(gpus, nodes) with the profiles' true rate at the job's
progress (`PolluxJobs.rate_at`, the GPUs spread evenly over the nodes), so what is left is
the policy's own decisions and frictions. `--fitted` runs the same without the hook (the
published `pollux-elastic` figures); `--set` changes fields of the `default` profile (e.g.
`resize_restart_s`, `resize_horizon_s`, `resize_min_gain`); `--explore N` lets a job grow
to N times the largest size it has run instead of `resize.EXPLORE` (4: the fitted model is
not trusted further from its data; the truth is right everywhere); `--restart-s S` makes the
simulator charge S seconds for a restart instead of Pollux's 30 (the first start still 30 s;
the policy's own `resize_restart_s` is unchanged): with 0 the same decisions cost no restart,
what restarts cost the policy in all. `--interval S` runs a round every S seconds instead of
Pollux's 60 (0: at every event, as the server runs). `--truth-apps A,B` gives the truth to those
applications' jobs only (the others keep the fitted model): whether one application's model
is what holds it back, or the models' errors relative to each other. One line per load: mean JCT
over the 8 workloads (16 x 4) over Pollux's published mean, and the restarts.
`--gap` then runs `bench/simulator.py`'s `pollux-gap` at those loads under the same hook:
per application, the mean JCT's share in the workloads, alone on the empty cluster, ideal
alone and under Pollux (with the `default` profile as shipped).

The hook replaces a module global, so it needs the pure-Python core: run with
PYTHONPATH=src (the installed core is compiled with mypyc and calls `fit` directly).
Docs: docs/benchmarks.md, issue 13.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import time
from typing import Any

import trainyard.core.actions.resize as resize_action
from simulator import LOADS, POLLUX, machine, pollux_gap  # bench/simulator.py, beside this
from trainyard.core import Job, get_profile
from trainyard.core.framework import Profile
from trainyard.core.goodput import GoodputModel
from trainyard.sim.cluster import parse_cluster
from trainyard.sim.config import SimOptions
from trainyard.sim.engine import simulate
from trainyard.sim.metrics import summarize
from trainyard.sim.pollux_jobs import PolluxJobs
from trainyard.sim.pollux_speed import EPOCHS
from trainyard.sim.readers import read_workload
from trainyard.sim.workload import SimJob, Workload

_FIT = resize_action.fit
_KNOBS = ("resize_restart_s", "resize_horizon_s", "resize_min_gain", "resize_hold_s")


class TruthModel:
    """A job's true goodput at its progress now (the `GoodputModel.goodput` the resize action
    asks), from the simulator's profiles."""

    def __init__(self, speed: PolluxJobs, job: SimJob, remaining_steps: float) -> None:
        self.speed, self.job = speed, job
        self.progress = max(0.0, speed.work(job) - remaining_steps)
        self._memo: dict[tuple[int, int], float] = {}

    def goodput(self, gpus: int, nodes: int) -> float:
        if gpus <= 0:
            return 0.0
        key = (gpus, nodes)
        if key not in self._memo:
            n = max(1, min(nodes, gpus))
            per_node = tuple(gpus // n + (1 if i < gpus % n else 0) for i in range(n))
            self._memo[key] = self.speed.rate_at(self.job, per_node, "", self.progress)
        return self._memo[key]


class Truth:
    """Feeds the resize action `TruthModel`s for the elastic jobs of the workload the
    simulator made last (`PolluxJobs.elastic_workload` is wrapped to note it)."""

    def __init__(self, apps: frozenset[str] = frozenset()) -> None:
        self.speed: PolluxJobs | None = None
        self.jobs: dict[str, SimJob] = {}
        self.apps = apps  # only these applications' jobs get the truth (empty: all)
        self._make = PolluxJobs.elastic_workload

    def install(self) -> None:
        truth = self

        def noted(speed: PolluxJobs, workload: Workload) -> Workload:
            made = truth._make(speed, workload)
            truth.speed, truth.jobs = speed, {j.id: j for j in made.jobs}
            return made

        PolluxJobs.elastic_workload = noted  # type: ignore[method-assign]
        resize_action.fit = self.fit  # type: ignore[assignment]

    def remove(self) -> None:
        PolluxJobs.elastic_workload = self._make  # type: ignore[method-assign]
        resize_action.fit = _FIT

    def fit(self, job: Job) -> GoodputModel | TruthModel:
        info = job.elastic
        if info is None or self.speed is None or job.id not in self.jobs or info.batch <= 0:
            return _FIT(job)
        sim = self.jobs[job.id]
        if self.apps and sim.application not in self.apps:
            return _FIT(job)
        return TruthModel(self.speed, sim, info.remaining / info.batch)


def profile_with(settings: list[str]) -> Profile:
    """`default` with each FIELD=NUMBER of `settings` changed (`--set`)."""
    profile = get_profile("default")
    changes: dict[str, float] = {}
    for item in settings:
        name, _, value = item.partition("=")
        if not hasattr(profile, name) or not value:
            raise SystemExit(f"--set {item!r}: expected FIELD=NUMBER with a Profile field")
        changes[name] = float(value)
    return dataclasses.replace(profile, **changes)


def run(
    load: str, profile: Profile, restart_s: float = 30.0, interval_s: float = 60.0
) -> dict[str, Any]:
    """One load's 8 workloads, the simulator charging `restart_s` a restart and running a round
    every `interval_s` (0: at every event): the JSON line."""
    start = time.perf_counter()
    cluster = parse_cluster("16x4")
    published = POLLUX / "results-jobload" / f"pollux-{load}" / "summary.json"
    jcts, restarts = [], 0
    for w in range(1, 9):
        speed = PolluxJobs(POLLUX / "profiles", restart_s=restart_s)
        path = POLLUX / LOADS[load] / f"workload-{w}.csv"
        wl = speed.elastic_workload(read_workload(f"pollux:{path}"))
        result = simulate(wl, cluster, speed, profile, SimOptions(interval_s=interval_s))
        jcts.append(summarize(result)["jct_avg"])
        restarts += sum(r.restarts for r in result.records)
    mean = statistics.mean(jcts)
    return {
        "case": "pollux-oracle", "load": float(load),
        "profile": {k: getattr(profile, k) for k in _KNOBS}, "explore": resize_action.EXPLORE,
        "sim_restart_s": restart_s, "interval_s": interval_s,
        "jct_avg": mean, "vs_pollux": mean / json.loads(published.read_text())["mean"],
        "restarts": restarts, "wall_s": time.perf_counter() - start, **machine(),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fitted", action="store_true", help="keep the fitted goodput model")
    parser.add_argument("--loads", default="0.5", help="comma-separated: 0.5, 1.0, 1.5, 2.0")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=NUMBER")
    parser.add_argument("--gap", action="store_true", help="per application, alone and ideal")
    parser.add_argument("--explore", type=int, default=resize_action.EXPLORE, metavar="N")
    parser.add_argument(
        "--restart-s", type=float, default=30.0, metavar="SECONDS",
        help="the simulator's charge per restart (Pollux's 30; 0: free)",
    )  # fmt: skip
    parser.add_argument(
        "--interval", type=float, default=60.0, metavar="SECONDS",
        help="seconds between rounds (Pollux's 60; 0: a round at every event, as the server)",
    )  # fmt: skip
    parser.add_argument(
        "--truth-apps", default="", metavar="APP[,APP]",
        help="the truth only for these applications' jobs (the others fitted)",
    )  # fmt: skip
    args = parser.parse_args()
    apps = frozenset(x.strip() for x in args.truth_apps.split(",") if x.strip())
    unknown_apps = sorted(apps - EPOCHS.keys())  # the simulator's Pollux applications
    if unknown_apps:
        raise SystemExit(
            f"--truth-apps: {unknown_apps[0]!r} is not one of {', '.join(sorted(EPOCHS))}"
        )
    if apps and args.fitted:
        raise SystemExit("--truth-apps: the truth for some jobs contradicts --fitted")
    if not (math.isfinite(args.restart_s) and args.restart_s >= 0):
        raise SystemExit(f"--restart-s: seconds >= 0, got {args.restart_s}")
    if not (math.isfinite(args.interval) and args.interval >= 0):
        raise SystemExit(f"--interval: seconds >= 0, got {args.interval}")
    if args.explore < 1:
        raise SystemExit(f"--explore: a whole number >= 1, got {args.explore}")
    if not resize_action.__file__ or not resize_action.__file__.endswith(".py"):
        raise SystemExit("the truth hook needs the pure-Python core: run with PYTHONPATH=src")
    loads = [x.strip() for x in args.loads.split(",") if x.strip()]
    unknown = [x for x in loads if x not in LOADS]
    if unknown:
        raise SystemExit(f"--loads: {unknown[0]!r} is not one of {', '.join(LOADS)}")
    profile = profile_with(args.set)
    truth = None if args.fitted else Truth(apps)
    if truth is not None:
        truth.install()
    explore, resize_action.EXPLORE = resize_action.EXPLORE, args.explore  # type: ignore[misc]
    try:
        for load in loads:
            line = run(load, profile, args.restart_s, args.interval) | {"truth": truth is not None}
            if apps:
                line["truth_apps"] = sorted(apps)
            print(json.dumps(line), flush=True)
        if args.gap:
            pollux_gap(loads)
    finally:
        resize_action.EXPLORE = explore  # type: ignore[misc]
        if truth is not None:
            truth.remove()


if __name__ == "__main__":
    if not POLLUX.is_dir():
        raise SystemExit(f"{POLLUX} not found: set TRAINYARD_SHARED to the shared data folder")
    main()
