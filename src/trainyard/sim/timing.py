"""Timing the scheduler: cycle latency, arrival latency and placement rate.

`run` builds `sim.workload.cluster.snapshot` (a half-occupied synthetic cluster with a queue)
and measures:

- `cycle_ms_p50/p99`: a full `run_cycle` on that snapshot, with the static layout built once
  and passed in, as the simulator does while nodes do not change (the server builds it in each
  cycle: `layout_build_ms` is what that adds);
- `arrival_decision_ms_p50/p99`: the cluster after its decisions were applied until a cycle
  changes nothing (steady, as a server's cluster is a few rounds after a burst: full, with
  a queue; `rounds_to_steady` says how many it took), then one new job arrives and is
  decided by the incremental scheduler;
- `placements_per_s`: placements of the first cycle / its median time.

Percentiles are `trainyard.stats.percentile` (nearest rank). Timed calls run with the cyclic
garbage collector paused, as the shells run cycles (`trainyard.runtime.gc_paused`).
`trainyard bench scheduler` and `bench/scheduler.py` print what `run` returns.
"""

from __future__ import annotations

import random
import time
from dataclasses import replace
from typing import Any

from trainyard.core import apply_decision, build_layout, run_cycle
from trainyard.core import state as state_module
from trainyard.core.incremental import Scheduler
from trainyard.runtime import gc_paused
from trainyard.sim.workload.cluster import NOW, elastic, random_job, snapshot
from trainyard.stats import percentile

__all__ = ["run"]


def _ms(values: list[float], p: float, digits: int) -> float:
    found = percentile(values, p)
    assert found is not None
    return round(found, digits)


def run(
    gpus: int,
    pending: int,
    repeats: int = 0,
    arrivals: int = 50,
    profile: str = "default",
    seed: int = 0,
    elastic_share: float = 0.0,
) -> dict[str, Any]:
    """Measure and return the figures as a JSON-ready dict; `elastic_share` of the jobs are
    elastic (`sim.workload.cluster.elastic`)."""
    snap = snapshot(gpus, pending, seed)
    if elastic_share > 0:
        snap = elastic(snap, elastic_share, seed)
    t0 = time.perf_counter()
    layout = build_layout(snap.nodes, snap.topology)
    layout_ms = (time.perf_counter() - t0) * 1e3
    repeats = repeats or (20 if gpus <= 20_000 else 5)
    times = []
    decision = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        with gc_paused():
            decision = run_cycle(snap, profile, layout)
        times.append((time.perf_counter() - t0) * 1e3)
    assert decision is not None
    steady = apply_decision(snap, decision)
    rounds = 1
    while rounds < 20:  # evicted jobs pending again may reclaim or preempt in turn
        with gc_paused():
            more = run_cycle(steady, profile, layout)
        if more.is_empty:
            break
        steady = apply_decision(steady, more)
        rounds += 1
    sched = Scheduler(steady, profile, layout)
    rng = random.Random(seed + 1)
    arrival = []
    full_cycle = []
    stale = 0
    queues = [q.name for q in steady.queues]
    for k in range(arrivals):
        job = replace(random_job(rng, 10_000_000 + k, rng.choice(queues), NOW), submit_time=NOW)
        t0 = time.perf_counter()
        with gc_paused():
            sched.decide_arrival(job)
        arrival.append((time.perf_counter() - t0) * 1e3)
        stale += sched.stale
        sched.forget(job.id)
    for k in range(min(arrivals, 5)):
        job = replace(random_job(rng, 20_000_000 + k, "research", NOW), submit_time=NOW)
        t0 = time.perf_counter()
        with gc_paused():
            run_cycle(replace(steady, pending=(*steady.pending, job)), profile, layout)
        full_cycle.append((time.perf_counter() - t0) * 1e3)
    p50 = _ms(times, 50, 2)
    return {
        "gpus": sum(n.gpus for n in snap.nodes),
        "nodes": len(snap.nodes),
        "pending": pending,
        "running": len(snap.running),
        "profile": profile,
        "devices": "virtual (synthetic cluster)",
        "core": "compiled (mypyc)" if state_module.__file__.endswith(".so") else "pure Python",
        "gc": "paused during each timed call (trainyard.runtime.gc_paused)",
        "layout_build_ms": round(layout_ms, 2),
        "cycle_ms_p50": p50,
        "cycle_ms_p99": _ms(times, 99, 2),
        "placements": len(decision.placements),
        "evictions": len(decision.evictions),
        "elastic_share": elastic_share,
        "resizes": len(decision.resizes),
        "reservations": len(decision.reservations),
        "placements_per_s": round(len(decision.placements) / (p50 / 1e3), 1),
        "arrival_decision_ms_p50": _ms(arrival, 50, 3),
        "arrival_decision_ms_p99": _ms(arrival, 99, 3),
        "arrival_full_cycle_ms_p50": _ms(full_cycle, 50, 2),
        "rounds_to_steady": rounds,
        "steady": sched.steady,
        "arrivals_needing_full_cycle": sched.full_cycles,
        "arrivals_moving_the_reservation": stale,
        "repeats": repeats,
        "arrivals": arrivals,
    }
