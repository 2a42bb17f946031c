"""Issue 13 diagnostic, not a policy (JSON lines on stdout): where the idle GPUs of the
elastic runs on Pollux's workloads go, and which growth rule held the running elastic jobs
back while they were idle.

    PYTHONPATH=src:bench python bench/pollux_held.py [--loads 0.5,1.0] [--interval 60]

For each load, the 8 workloads (16 x 4, the `default` profile as shipped, the simulator's
30 s restarts) are run as `bench/simulator.py pollux-elastic` runs them, with an observer
that reads each round's decision: the GPUs left idle after it, held until the next round,
and the notes it gives the running elastic jobs below their maximum that were not grown
(`Decision.not_grown`, `core/actions/growth_notes.py`), by the rule that held each back.
Printed per load: idle GPU-hours and their share of the cluster's, and per rule the idle
GPU-hours during which at least one job was held back by it and the job-hours held by it.
An idle GPU beside a job held by the restart rule or the minimum gain is capacity the policy
chose not to use (the goodput model saw too little gain for a restart), not capacity it
could not reach. The observer cannot change the run, so the figures are those of the
published `pollux-elastic` runs. (`bench/pollux_idle.py` splits the same idle GPUs by
application; this script by the rule that held the jobs beside them.) Docs:
docs/benchmarks.md, issue 13.
"""

from __future__ import annotations

import argparse
import collections
import json
import time
from typing import Any

from simulator import LOADS, POLLUX, machine  # bench/simulator.py, beside this
from trainyard.core import Decision, Snapshot, get_profile
from trainyard.sim.cluster import parse_cluster
from trainyard.sim.config import SimOptions
from trainyard.sim.engine import simulate
from trainyard.sim.pollux_jobs import PolluxJobs
from trainyard.sim.readers import read_workload

# The rules of `growth_notes`, by a phrase of their note.
RULES = (
    ("min_runtime", "min_runtime"), ("resize hold", "hold"), ("is owed", "owed"),
    ("no placement", "placement"), ("no gain", "no_gain"), ("below the", "min_gain"),
    ("does not yet repay", "restart"),
)  # fmt: skip


def rule_of(reason: str) -> str:
    return next((name for phrase, name in RULES if phrase in reason), "other")


class Idle:
    """Accumulates, between rounds, the idle GPUs after a decision and its notes."""

    def __init__(self) -> None:
        self.idle_s = 0.0  # GPU-seconds idle
        self.span_s = 0.0
        self.gpus = 0
        self.idle_by_rule: collections.Counter[str] = collections.Counter()
        self.held_by_rule: collections.Counter[str] = collections.Counter()
        self._last: tuple[float, int, tuple[str, ...]] | None = None

    def start(self) -> None:
        """Before each run: the last round of the one before is not carried over."""
        self._last = None

    def observe(self, snapshot: Snapshot, decision: Decision) -> None:
        now = snapshot.now
        if self._last is not None:
            then, idle, rules = self._last
            dt = now - then
            self.span_s += dt * self.gpus
            self.idle_s += idle * dt
            for rule in set(rules):
                self.idle_by_rule[rule] += idle * dt
            for rule in rules:
                self.held_by_rule[rule] += dt
        self.gpus = sum(n.gpus for n in snapshot.nodes)
        used = sum(r.job.gpus for r in snapshot.running)
        used += sum(p.gpus for p in decision.placements) - sum(e.gpus for e in decision.evictions)
        used += sum(z.gpus - z.from_gpus for z in decision.resizes)
        rules = tuple(rule_of(note.reason) for note in decision.not_grown.values())
        self._last = (now, max(0, self.gpus - used), rules)


def run(load: str, interval_s: float) -> dict[str, Any]:
    began = time.perf_counter()
    idle = Idle()
    for w in range(1, 9):
        speed = PolluxJobs(POLLUX / "profiles", restart_s=30.0)
        path = POLLUX / LOADS[load] / f"workload-{w}.csv"
        workload = speed.elastic_workload(read_workload(f"pollux:{path}"))
        idle.start()  # a new run: its clock starts again
        simulate(workload, parse_cluster("16x4"), speed, get_profile("default"),
                 SimOptions(interval_s=interval_s), observer=idle.observe)  # fmt: skip
    hours = 3600.0
    return {
        "case": "pollux-held", "load": float(load), "interval_s": interval_s,
        "idle_gpu_h": round(idle.idle_s / hours, 1),
        "idle_share": round(idle.idle_s / idle.span_s, 4) if idle.span_s else 0.0,
        "idle_gpu_h_beside_a_job_held_by": {
            rule: round(s / hours, 1) for rule, s in idle.idle_by_rule.most_common()
        },
        "job_h_held_by": {rule: round(s / hours, 1) for rule, s in idle.held_by_rule.most_common()},
        "wall_s": round(time.perf_counter() - began, 1), **machine(),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loads", default="0.5,1.0,1.5,2.0")
    parser.add_argument("--interval", type=float, default=60.0, help="seconds between rounds")
    args = parser.parse_args()
    for load in args.loads.split(","):
        print(json.dumps(run(load.strip(), args.interval)), flush=True)


if __name__ == "__main__":
    main()
