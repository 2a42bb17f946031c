"""Where load 0.5's GPUs go under the elastic policy (issue 13; JSON lines on stdout):
`python bench/pollux_idle.py`, a diagnostic, not a policy.

For each of Pollux's 8 load-0.5 workloads on 16 x 4 under `default` (60 s rounds, as
`bench/simulator.py pollux-elastic` runs them): the GPU-hours held, those idle while any job
runs and those idle while some running elastic job is below its maximum (by application,
shared equally among the jobs below their maximum at the time); how many of the elastic
jobs' placements span more nodes than a packed one and what that costs their rate in the
simulator's truth; how many growths made a job slower (and shrinks faster) there, by
application; and the jobs' restart counts.
Docs: docs/benchmarks.md, issue 13.
"""

from __future__ import annotations

import itertools
import json
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

from simulator import LOADS, POLLUX, machine  # bench/simulator.py, beside this script
from trainyard.core import Elastic
from trainyard.sim.cluster import parse_cluster
from trainyard.sim.config import SimOptions
from trainyard.sim.engine import simulate
from trainyard.sim.metrics import summarize
from trainyard.sim.pollux_jobs import PolluxJobs
from trainyard.sim.pollux_speed import PolluxSpeed
from trainyard.sim.readers import read_workload
from trainyard.sim.records import JobRecord
from trainyard.sim.workload import SimJob


class _PlacementWatch(PolluxJobs):
    """`PolluxJobs` that notes each elastic job's distinct placements and, for one spanning
    more nodes than packing needs, the share of the packed placement's rate it loses
    (negative: the profiles make it faster) (`pollux_idle`)."""

    def __init__(self, profiles_dir: Path) -> None:
        super().__init__(profiles_dir)
        self.seen: dict[tuple[str, tuple[int, ...]], float | None] = {}
        self.starts: dict[str, list[tuple[tuple[int, ...], float, SimJob]]] = {}

    def observe(
        self, job: SimJob, per_node: tuple[int, ...], progress: float, info: Elastic
    ) -> Elastic:
        self.starts.setdefault(job.id, []).append((tuple(per_node), progress, job))
        return super().observe(job, per_node, progress, info)

    def moves(self) -> dict[str, dict[str, int]]:
        """Growths and shrinks, by application, counted by whether the job's true rate at the
        progress of the move went down ("slower") or up ("faster") at its new size."""
        out: dict[str, dict[str, int]] = {}
        for seq in self.starts.values():
            for (old, _p, job), (new, at, _j) in itertools.pairwise(seq):
                if sum(new) == sum(old):
                    continue
                before = self.rate_at(job, old, "", at)
                after = self.rate_at(job, new, "", at)
                kind = "grow" if sum(new) > sum(old) else "shrink"
                key = f"{kind}_{'slower' if after < before * 0.999 else 'faster'}"
                counts = out.setdefault(key, {})
                app = job.application or ""
                counts[app] = counts.get(app, 0) + 1
        return out

    def rate_at(
        self, job: SimJob, per_node: tuple[int, ...], gpu_type: str, progress: float
    ) -> float:
        rate = super().rate_at(job, per_node, gpu_type, progress)
        key = (job.id, tuple(per_node))
        if self._elastic(job) and sum(per_node) > 0 and key not in self.seen:
            packed = PolluxSpeed.packed(sum(per_node))
            best = super().rate_at(job, packed, gpu_type, progress)
            spread = len(per_node) > len(packed) and best > 0.0
            self.seen[key] = 1.0 - rate / best if spread else None  # None: packed
        return rate


def _idle_hours(
    records: Sequence[JobRecord], top: dict[str, int], apps: dict[str, str], gpus: int
) -> tuple[float, float, dict[str, float]]:
    """GPU-hours held, idle while any job runs, and idle while some running elastic job is
    below its maximum (shared equally among those jobs' applications)."""
    events = sorted((t, r.id, g) for r in records for t, g in r.allocation)
    held_now: dict[str, int] = {}
    last, held, idle_running = 0.0, 0.0, 0.0
    growable: dict[str, float] = {}
    for t, job_id, g in events:
        dt = t - last
        if held_now:
            used = sum(held_now.values())
            held += dt * used
            idle = gpus - used
            below = [j for j, k in held_now.items() if k < top[j]]
            if idle > 0:
                idle_running += dt * idle
                for j in below:
                    growable[apps[j]] = growable.get(apps[j], 0.0) + dt * idle / len(below)
        if g:
            held_now[job_id] = g
        else:
            held_now.pop(job_id, None)
        last = t
    return held / 3600, idle_running / 3600, {a: v / 3600 for a, v in sorted(growable.items())}


def _restarts_by_app(records: Sequence[JobRecord], apps: dict[str, str]) -> dict[str, list[int]]:
    """Each application's jobs' restart counts, in submission order."""
    out: dict[str, list[int]] = {}
    for r in sorted(records, key=lambda r: r.submit):
        out.setdefault(apps[r.id], []).append(r.restarts)
    return dict(sorted(out.items()))


def pollux_idle() -> None:
    """One JSON line per load-0.5 workload (module docstring)."""
    cluster = parse_cluster("16x4")
    for w in range(1, 9):
        speed = _PlacementWatch(POLLUX / "profiles")
        start = time.perf_counter()
        path = POLLUX / LOADS["0.5"] / f"workload-{w}.csv"
        wl = speed.elastic_workload(read_workload(f"pollux:{path}"))
        top = {j.id: j.max_gpus or j.gpus for j in wl.jobs}
        apps = {j.id: j.application or "" for j in wl.jobs}
        result = simulate(wl, cluster, speed, "default", SimOptions(interval_s=60.0))
        held, idle, growable = _idle_hours(result.records, top, apps, cluster.gpus)
        spread = [v for v in speed.seen.values() if v is not None]
        out = {
            "case": "pollux-idle", "load": 0.5, "workload": w, "policy": "default",
            "jct_avg": summarize(result)["jct_avg"], "gpu_hours_held": held,
            "gpu_hours_idle_while_running": idle,
            "gpu_hours_idle_while_growable": sum(growable.values()),
            "idle_while_growable_by_app": growable, "placements": len(speed.seen),
            "placements_spread": len(spread),
            "spread_rate_loss_mean": statistics.mean(spread) if spread else 0.0,
            "spread_rate_loss_range": [min(spread), max(spread)] if spread else [],
            "moves_by_true_rate": speed.moves(),
            "restarts": sum(r.restarts for r in result.records),
            "restarts_by_app": _restarts_by_app(result.records, apps),
            "wall_s": time.perf_counter() - start, **machine(),
        }  # fmt: skip
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    if not POLLUX.is_dir():
        raise SystemExit(f"{POLLUX} not found: set TRAINYARD_SHARED to the shared data folder")
    pollux_idle()
