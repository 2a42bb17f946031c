"""Time per scheduling decision on a Pollux workload: trainyard's `default` cycle against the
Pollux artifact's NSGA-II search (JSON on stdout, one line per side).

    # ours: every round of `trainyard simulate --workload pollux:F --cluster 16x4`, timed
    .venv/bin/python bench/decision_time.py ours --workload F

    # Pollux: the artifact's own cluster loop (petuum/adaptdl, branch osdi21-artifact,
    # simulator/), each `PolluxPolicy.optimize` call timed, stopped after --wall seconds
    /tmp/pv/bin/pip install "numpy==1.23.5" "pandas<2" "scipy<1.12" "pymoo==0.4.2.1" autograd
    TRAINYARD_PURE=1 PYTHONPATH=src /tmp/pv/bin/python bench/decision_time.py pollux \
        --artifact DIR --workload F --wall 600

The artifact is imported from DIR (a checkout of its `simulator/`, traces included); no code
of it is copied here. Both sides decide every 60 simulated seconds on 16 nodes x 4 GPUs.
Figures: docs/benchmarks.md ("Resize decision speed").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any


def _stats(times: list[float], jobs: list[int]) -> dict[str, Any]:
    from trainyard.stats import percentile

    def ms(p: float) -> float | None:
        value = percentile(times, p)
        return None if value is None else round(1000 * value, 3)

    return {
        "decisions": len(times),
        "decision_ms_mean": round(1000 * statistics.mean(times), 3) if times else None,
        "decision_ms_p50": ms(50),
        "decision_ms_p99": ms(99),
        "decision_ms_max": ms(100),
        "jobs_per_decision_mean": round(statistics.mean(jobs), 1) if jobs else None,
        "jobs_per_decision_max": max(jobs) if jobs else None,
        "cpu_s_total": round(sum(times), 2),
    }


def ours(workload: str) -> dict[str, Any]:
    import trainyard.sim.engine as engine
    from trainyard.sim.cluster import parse_cluster
    from trainyard.sim.pollux_jobs import PolluxJobs
    from trainyard.sim.readers import read_workload

    times: list[float] = []
    jobs: list[int] = []
    real = engine.run_cycle

    def timed(snapshot: Any, *args: Any) -> Any:
        began = time.perf_counter()
        out = real(snapshot, *args)
        times.append(time.perf_counter() - began)
        jobs.append(len(snapshot.running) + len(snapshot.pending))
        return out

    path = Path(workload)
    speed = PolluxJobs(path.parent.parent / "profiles")
    wl = speed.elastic_workload(read_workload(f"pollux:{path}"))
    engine.run_cycle = timed  # type: ignore[assignment]
    try:
        began = time.perf_counter()
        result = engine.simulate(wl, parse_cluster("16x4"), speed, "default")
        wall = time.perf_counter() - began
    finally:
        engine.run_cycle = real  # type: ignore[assignment]
    return {
        "side": "trainyard default", "workload": workload, "wall_s": round(wall, 2),
        "simulated_s": result.end_time, **_stats(times, jobs),
    }  # fmt: skip


def pollux(artifact: Path, workload: str, wall_s: float) -> dict[str, Any]:
    sys.path.insert(0, str(artifact))
    os.chdir(artifact)  # the artifact reads its traces relative to its folder
    import pandas  # the artifact's own dependency
    import pollux as artifact_pollux

    import simulator

    times: list[float] = []
    jobs: list[int] = []
    real = artifact_pollux.PolluxPolicy.optimize

    def timed(self: Any, job_infos: Any, *args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        out = real(self, job_infos, *args, **kwargs)
        times.append(time.perf_counter() - began)
        jobs.append(len(job_infos))
        return out

    artifact_pollux.PolluxPolicy.optimize = timed
    cluster = simulator.Cluster(
        pandas.read_csv(workload), artifact_pollux.PolluxPolicy(), 16, num_gpus=4
    )
    began = time.perf_counter()
    complete = False
    while time.perf_counter() - began < wall_s:
        cluster.step(60)
        if cluster.all_complete():
            complete = True
            break
    return {
        "side": "pollux NSGA-II (artifact)", "workload": workload,
        "wall_s": round(time.perf_counter() - began, 2), "simulated_s": cluster.current_time,
        "complete": complete, **_stats(times, jobs),
    }  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("side", choices=("ours", "pollux"))
    parser.add_argument("--workload", required=True, help="a Pollux workload CSV")
    parser.add_argument("--artifact", type=Path, help="the artifact's simulator/ folder")
    parser.add_argument("--wall", type=float, default=600.0, help="Pollux: stop after this")
    args = parser.parse_args()
    workload = str(Path(args.workload).resolve())
    if args.side == "ours":
        print(json.dumps(ours(workload)))
    else:
        if args.artifact is None:
            parser.error("pollux needs --artifact DIR")
        print(json.dumps(pollux(args.artifact.resolve(), workload, args.wall)))
