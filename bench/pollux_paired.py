"""Issue 13 diagnostic: a change of the elastic policy's knobs against the shipped `default`,
workload by workload, on more workloads than the eight published per load (JSON lines).

    PYTHONPATH=src python bench/pollux_paired.py --set resize_horizon_s=600 \
        [--set FIELD=NUMBER ...] [--loads 0.5] [--interval 60] [WORKLOAD.csv ...]

A knob's effect on the published workloads' mean is within the spread of eight workloads
(about 1 % a workload), so a point that looks better there may be noise. Each workload runs
under both profiles (Pollux's 16 x 4 cluster, the simulator's Pollux jobs, elastic), and the
ratio variant / shipped of its mean JCT is the paired figure: its mean, how many workloads
got better, its spread and the mean's standard error, for the published workloads of each
load in `--loads` and, separately, for the extra CSVs given. Extra workloads come from the
Pollux artifact's generator (`simulator/workload.py --seed N -n 80` for load 0.5; the
commands are in docs/benchmarks.md, "Workloads never published"): no Pollux run is needed,
the comparison is ours against ours.

One line per workload ({"workload", "set", "shipped", "variant", "ratio"}), then one summary
line per group. `--means WORKLOAD.csv ...` prints only each workload's mean JCT under the
shipped `default` of the tree on PYTHONPATH, so that a change of code (not of knobs) is
paired by running it on both trees. Docs: docs/benchmarks.md, issue 13.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path
from typing import Any

from pollux_oracle import profile_with  # bench/pollux_oracle.py, beside this
from simulator import LOADS, POLLUX, machine  # bench/simulator.py, beside this
from trainyard.core import get_profile
from trainyard.core.framework import Profile
from trainyard.sim.cluster import parse_cluster
from trainyard.sim.config import SimOptions
from trainyard.sim.engine import simulate
from trainyard.sim.metrics import summarize
from trainyard.sim.pollux_jobs import PolluxJobs
from trainyard.sim.readers import read_workload

variant = profile_with  # `default` with each FIELD=NUMBER changed


def mean_jct(path: Path, profile: Profile, interval_s: float) -> float:
    speed = PolluxJobs(POLLUX / "profiles")
    wl = speed.elastic_workload(read_workload(f"pollux:{path}"))
    result = simulate(wl, parse_cluster("16x4"), speed, profile, SimOptions(interval_s=interval_s))
    return float(summarize(result)["jct_avg"])


def summary(group: str, ratios: list[float], settings: list[str]) -> dict[str, Any]:
    spread = statistics.stdev(ratios) if len(ratios) > 1 else 0.0
    return {
        "group": group, "set": settings, "workloads": len(ratios),
        "mean_ratio": statistics.mean(ratios), "better": sum(r < 1.0 for r in ratios),
        "spread": spread, "standard_error": spread / math.sqrt(len(ratios)), **machine(),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=NUMBER")
    parser.add_argument("--loads", default="0.5", help="published loads, comma-separated ('')")
    parser.add_argument("--interval", type=float, default=60.0, help="seconds; 0: every event")
    parser.add_argument("extra", nargs="*", type=Path, help="more Pollux workload CSVs")
    parser.add_argument(
        "--means", action="store_true",
        help="only the shipped mean JCT of each extra CSV (to pair two trees' code)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.means:  # one line per workload: run it on each tree and pair the lines
        for path in args.extra:
            jct = mean_jct(path, get_profile("default"), args.interval)
            print(json.dumps({"workload": str(path), "mean_jct": jct, **machine()}), flush=True)
        return
    if not args.set:
        raise SystemExit("give at least one --set FIELD=NUMBER: the variant to compare")
    shipped, changed = get_profile("default"), variant(args.set)
    groups: dict[str, list[Path]] = {
        f"published-{load}": [POLLUX / LOADS[load] / f"workload-{w}.csv" for w in range(1, 9)]
        for load in filter(None, args.loads.split(","))
    }
    if args.extra:
        groups["extra"] = list(args.extra)
    for group, paths in groups.items():
        ratios = []
        for path in paths:
            start = time.perf_counter()
            base = mean_jct(path, shipped, args.interval)
            other = mean_jct(path, changed, args.interval)
            ratios.append(other / base)
            print(json.dumps({
                "workload": str(path), "group": group, "set": args.set, "shipped": base,
                "variant": other, "ratio": other / base, "wall_s": time.perf_counter() - start,
            }), flush=True)  # fmt: skip
        print(json.dumps(summary(group, ratios, args.set)), flush=True)


if __name__ == "__main__":
    main()
