"""The elastic policy against Pollux on workloads neither has been published on (JSON lines).

    python bench/pollux_unseen.py WORKLOAD.csv:POLLUX.log [WORKLOAD.csv:POLLUX.log ...]
    python bench/pollux_unseen.py WORKLOAD.csv=POLLUX_MEAN_JCT_S [...]

Pollux's published results cover the 8 workloads of each load that the policy was measured
on. This compares it on others: workloads drawn by the artifact's own generator with seeds it
did not publish, each run here by the artifact's simulator under its Pollux policy (its
standard output saved as POLLUX.log; the last "Completed jobs" line holds every job's JCT)
and by ours, under `default`, with Pollux's 60 s rounds and with a round at every event (as
the server runs). docs/benchmarks.md has the commands that make the workloads and the logs
(petuum/adaptdl, branch osdi21-artifact, `simulator/workload.py --seed N` and
`simulator/simulator.py --policy pollux`); nothing of the artifact runs here, its log is
only read.

Each line: the workload, its jobs, Pollux's mean JCT, ours at each interval with the ratio,
how many jobs finished later than under Pollux, and the mean JCT per application. Given
Pollux's mean JCT instead of its log (`WORKLOAD.csv=SECONDS`, e.g. a figure of
docs/benchmarks.md once the log is gone), only the means and their ratios.
"""

from __future__ import annotations

import ast
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

from trainyard.datafiles import shared_root
from trainyard.sim.cluster import parse_cluster
from trainyard.sim.config import SimOptions
from trainyard.sim.engine import simulate
from trainyard.sim.pollux_jobs import PolluxJobs
from trainyard.sim.readers import read_workload

SHARED = shared_root()  # $TRAINYARD_SHARED, else ../shared
PROFILES = SHARED / "traces" / "pollux" / "profiles"


def pollux_jcts(log: Path) -> dict[str, float]:
    """Every job's JCT from the artifact's log: the dict after its last "Completed jobs"."""
    lines = log.read_text().splitlines()
    marks = [i for i, line in enumerate(lines) if line.startswith("Completed jobs")]
    if not marks or marks[-1] + 1 >= len(lines):
        raise SystemExit(f"{log}: no 'Completed jobs' line; is the run finished?")
    done = ast.literal_eval(lines[marks[-1] + 1])
    if not isinstance(done, dict):
        raise SystemExit(f"{log}: the line after 'Completed jobs' is not a dict")
    return {str(k): float(v) for k, v in done.items()}


def ours(workload: Path, speed: PolluxJobs) -> dict[str, dict[str, float]]:
    """Every job's JCT under `default` on 16 x 4, with 60 s rounds ("60") and a round at
    every event ("events")."""
    wl = speed.elastic_workload(read_workload(f"pollux:{workload}"))
    cluster = parse_cluster("16x4")
    runs = {}
    for name, interval_s in (("60", 60.0), ("events", 0.0)):
        result = simulate(wl, cluster, speed, "default", SimOptions(interval_s=interval_s))
        runs[name] = {r.id: float(r.jct) for r in result.records if r.jct is not None}
    return runs


def compare(workload: Path, log: Path, speed: PolluxJobs) -> dict[str, object]:
    theirs = pollux_jcts(log)
    runs = ours(workload, speed)
    out: dict[str, object] = {"workload": str(workload), "jobs": len(runs["60"])}
    if set(theirs) != set(runs["60"]):
        out["warning"] = f"Pollux finished {len(theirs)} of {len(runs['60'])} jobs"
    out.update(_means(runs, sum(theirs.values()) / len(theirs)))
    for name, jcts in runs.items():
        out[f"ours_{name}_jobs_slower"] = sum(
            1 for job, jct in jcts.items() if job in theirs and jct > theirs[job]
        )
    per_app: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for job, jct in runs["60"].items():
        row = per_app[job.rsplit("-", 1)[0]]
        row[0] += 1
        row[1] += jct
        row[2] += theirs.get(job, float("nan"))
    out["per_application"] = {
        app: {"jobs": int(n), "ours_60": round(a / n), "pollux": round(b / n)}
        for app, (n, a, b) in sorted(per_app.items())
    }
    return out


def compare_mean(workload: Path, theirs: float, speed: PolluxJobs) -> dict[str, object]:
    """Ours against Pollux's mean JCT alone (its log not at hand)."""
    runs = ours(workload, speed)
    return {"workload": str(workload), "jobs": len(runs["60"]), **_means(runs, theirs)}


def _means(runs: dict[str, dict[str, float]], theirs: float) -> dict[str, float]:
    """Pollux's mean JCT, and ours at each interval with the ratio."""
    out = {"pollux_jct_avg": round(theirs, 1)}
    for name, jcts in runs.items():
        mean = sum(jcts.values()) / len(jcts)
        out[f"ours_{name}_jct_avg"] = round(mean, 1)
        out[f"ours_{name}_vs_pollux"] = round(mean / theirs, 3)
    return out


def parse(pair: str) -> tuple[Path, Path | float]:
    """`WORKLOAD.csv:POLLUX.log` or `WORKLOAD.csv=SECONDS` (Pollux's mean JCT)."""
    workload, sep, log = pair.partition(":")
    if sep:
        return Path(workload), Path(log)
    workload, sep, mean = pair.rpartition("=")
    try:
        seconds = float(mean) if sep else 0.0
    except ValueError:
        seconds = 0.0
    if not workload or not (math.isfinite(seconds) and seconds > 0.0):
        raise SystemExit(
            f"{pair!r}: write WORKLOAD.csv:POLLUX.log, or WORKLOAD.csv=SECONDS with Pollux's"
            " mean JCT in seconds (a positive number)"
        )
    return Path(workload), seconds


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit(__doc__)
    pairs = [parse(pair) for pair in argv]  # every argument checked before any run
    speed = PolluxJobs(PROFILES)  # the profiles, read once
    for workload, theirs in pairs:
        if isinstance(theirs, Path):
            line = compare(workload, theirs, speed)
        else:
            line = compare_mean(workload, theirs, speed)
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
