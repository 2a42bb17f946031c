"""Issue 13 diagnostics of the goodput model and of a lone job's best schedule (JSON lines on
stdout; not a policy):

    PYTHONPATH=src:bench python bench/pollux_model.py lone [--loads 0.5]
    PYTHONPATH=src:bench python bench/pollux_model.py model-error

`lone`: per application, its share of the mean JCT over the 8 workloads of a load when each
job runs alone on the empty 16 x 4 cluster: `ideal` (its best size in every epoch, restarts
free, no first start: `simulator._ideal_alone`), `optimum` (the best schedule knowing the
future but paying the simulator's restart and first start: a dynamic programme over the
profile's epochs and sizes 1 to its maximum, packed, `optimum_alone`) and `policy` (the
`default` profile alone, rounds at every event, as `simulator.py pollux-gap` runs it).

`model-error`: the fitted goodput model (`core.goodput.fit`) over the simulator's truth, for
the first job of each application in `workloads-0.5/workload-3`, fitted on the steps the job
measures at 4 GPUs, then at 4 and 16, then at 4, 16 and 64 (packed), at 5 % and 50 % of its
work, asked about 1 to 64 GPUs: one line per (application, progress, sizes run).
Docs: docs/benchmarks.md, issue 13.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

from simulator import LOADS, POLLUX, _ideal_alone, machine  # bench/simulator.py, beside this
from trainyard.core import Job
from trainyard.core.goodput import fit, packed_nodes
from trainyard.sim.cluster import parse_cluster
from trainyard.sim.config import SimOptions
from trainyard.sim.engine import simulate
from trainyard.sim.pollux_jobs import PolluxJobs
from trainyard.sim.pollux_speed import PolluxSpeed
from trainyard.sim.readers import read_workload
from trainyard.sim.workload import SimJob

SIZES = (1, 2, 4, 8, 16, 32, 64)


def optimum_alone(speed: PolluxJobs, job: SimJob) -> float:
    """Seconds of `job`'s best schedule alone: a size per epoch of its profile, each change of
    size a restart (`speed.restart_s`), plus the first start, knowing every epoch's rate."""
    sizes = range(1, (job.max_gpus or job.gpus) + 1) if job.max_gpus else (job.gpus,)
    work, done, times = speed.work(job), 0.0, []
    while done < work:
        end = min(speed.next_change(job, done), work)
        times.append([(end - done) / speed.rate_at(job, PolluxSpeed.packed(k), "", done)
                      for k in sizes])  # fmt: skip
        done = end
    best = [0.0] * len(sizes)  # seconds from the epoch on, running at each size into it
    for row in reversed(times):
        move = speed.restart_s + min(best)
        best = [t + min(stay, move) for t, stay in zip(row, best, strict=True)]
    return speed.first_start_s + min(best)


def lone(load: str) -> dict[str, object]:
    speed, cluster, start = (
        PolluxJobs(POLLUX / "profiles"),
        parse_cluster("16x4"),
        time.perf_counter(),
    )
    seen: dict[tuple[object, ...], tuple[float, float, float]] = {}
    sums: dict[str, list[float]] = {}
    total = 0
    for w in range(1, 9):
        path = POLLUX / LOADS[load] / f"workload-{w}.csv"
        wl = speed.elastic_workload(read_workload(f"pollux:{path}"))
        for job in wl.jobs:
            key = (job.application, job.max_gpus, job.gpus, job.batch_size)
            if key not in seen:
                one = replace(wl, jobs=(replace(job, submit_time=0.0),))
                alone = simulate(one, cluster, speed, "default", SimOptions(interval_s=0.0))
                policy = alone.records[0].jct or 0.0
                seen[key] = (_ideal_alone(speed, job), optimum_alone(speed, job), policy)
            got = sums.setdefault(job.application or "?", [0.0, 0.0, 0.0])
            for i, v in enumerate(seen[key]):
                got[i] += v
            total += 1
    kinds = ("ideal", "optimum", "policy")
    apps = {a: dict(zip(kinds, (round(v / total, 1) for v in s), strict=True))
            for a, s in sorted(sums.items())}  # fmt: skip
    return {
        "case": "lone", "load": float(load), "per_application": apps,
        **{k: round(sum(a[k] for a in apps.values()), 1) for k in kinds},
        "wall_s": time.perf_counter() - start, **machine(),
    }  # fmt: skip


def model_error() -> list[dict[str, object]]:
    speed = PolluxJobs(POLLUX / "profiles")
    path = POLLUX / LOADS["0.5"] / "workload-3.csv"
    firsts: dict[str, SimJob] = {}
    for job in speed.elastic_workload(read_workload(f"pollux:{path}")).jobs:
        firsts.setdefault(job.application or "?", job)
    out: list[dict[str, object]] = []
    for app, job in firsts.items():
        for share in (0.05, 0.5):
            progress = share * speed.work(job)
            for ran in ((4,), (4, 16), (4, 16, 64)):
                info = speed.elastic_info(job)
                for k in ran:
                    info = speed.observe(job, PolluxSpeed.packed(k), progress, info)
                model = fit(Job(id=job.id, queue="default", gpus=ran[-1], min_gpus=1,
                                max_gpus=64, elastic=info))  # fmt: skip
                ratio = {
                    k: round(model.goodput(k, packed_nodes(k, 4))
                             / speed.rate_at(job, PolluxSpeed.packed(k), "", progress), 3)
                    for k in SIZES
                }  # fmt: skip
                out.append({"case": "model-error", "application": app, "work_share": share,
                            "sizes_run": list(ran), "model_over_truth": ratio})  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", choices=("lone", "model-error"))
    parser.add_argument("--loads", default="0.5", help="comma-separated: 0.5, 1.0, 1.5, 2.0")
    args = parser.parse_args()
    if args.case == "model-error":
        for line in model_error():
            print(json.dumps(line), flush=True)
        return
    for load in (x.strip() for x in args.loads.split(",") if x.strip()):
        if load not in LOADS:
            raise SystemExit(f"--loads: {load!r} is not one of {', '.join(LOADS)}")
        print(json.dumps(lone(load)), flush=True)


if __name__ == "__main__":
    if not POLLUX.is_dir():
        raise SystemExit(f"{POLLUX} not found: set TRAINYARD_SHARED to the shared data folder")
    main()
