"""Scheduler benchmark: cycle latency, arrival latency and placement rate on synthetic clusters.

The cluster has 8 GPUs per node, 32 nodes per leaf switch and 8 leaves per spine, and starts
half occupied by running jobs whose sizes and run times follow the Philly trace
(`workload.philly`), scattered at random so that free capacity is fragmented as in a real
cluster. `pending` jobs (Philly sizes, four tenant queues with equal guaranteed quotas, a few
priorities) wait. Measured:

- `cycle_ms_p50/p99`: a full `run_cycle` on that snapshot, with the static layout built once
  and reused, as the simulator does while nodes do not change (the server builds it in each
  cycle: `layout_build_ms` is what that adds);
- `arrival_decision_ms_p99`: the cluster after its decisions were applied until a cycle
  changes nothing (steady, as a server's cluster is a few rounds after a burst: full, with
  a queue; `rounds_to_steady` says how many it took), then one new job arrives and is
  decided;
- `placements_per_s`: placements of the first cycle / its time.

Timed calls run with the cyclic garbage collector paused, as the shells run cycles
(`trainyard.runtime.gc_paused`).
"""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import replace
from typing import Any

from trainyard.core import (
    Job,
    Node,
    NodeDevices,
    Queue,
    RunningJob,
    Snapshot,
    Topology,
    apply_decision,
    build_layout,
    run_cycle,
)
from trainyard.core import state as state_module
from trainyard.core.incremental import Scheduler
from trainyard.runtime import gc_paused
from trainyard.workload.philly import sample_duration, sample_gpus

GPUS_PER_NODE = 8
NODES_PER_LEAF = 32
LEAVES_PER_SPINE = 8
NOW = 1_000_000.0


def cluster(gpus: int) -> tuple[tuple[Node, ...], Topology]:
    """`gpus` GPUs as 8-GPU nodes under leaf switches and spines (virtual devices)."""
    nodes = []
    for i in range(max(1, gpus // GPUS_PER_NODE)):
        leaf = i // NODES_PER_LEAF
        spine = leaf // LEAVES_PER_SPINE
        nodes.append(
            Node(
                name=f"n{i:05d}",
                gpus=GPUS_PER_NODE,
                gpu_type="H100",
                gpu_memory_gb=80,
                cpus=128,
                memory_gb=2048,
                path=(f"spine{spine}", f"leaf{leaf}"),
                island_size=8,
                virtual=True,
            )
        )
    return tuple(nodes), Topology(levels=("spine", "leaf"))


def _job(rng: random.Random, i: int, queue: str, now: float) -> Job:
    g = sample_gpus(rng)
    return Job(
        id=f"j{i}",
        queue=queue,
        gpus=g,
        priority=rng.choice((0, 0, 0, 1)),
        submit_time=now - rng.uniform(0, 3600),
        cpus=float(4 * g),
        memory_gb=float(64 * g),
        expected_duration=sample_duration(rng),
        attained_service=0.0,
    )


def _scatter(rng: random.Random, nodes: tuple[Node, ...], jobs: list[Job]) -> list[RunningJob]:
    """Place `jobs` at random (not packed), as a cluster that has lived a while looks."""
    free = {n.name: list(range(n.gpus)) for n in nodes}
    names = [n.name for n in nodes]
    out = []
    for job in jobs:
        need = job.gpus
        if need <= GPUS_PER_NODE:
            for _ in range(64):
                name = rng.choice(names)
                if len(free[name]) >= need:
                    devs = free[name][:need]
                    del free[name][:need]
                    out.append(_running(rng, job, (NodeDevices(name, tuple(devs)),)))
                    break
        else:
            whole = [n for n in names if len(free[n]) == GPUS_PER_NODE]
            k = -(-need // GPUS_PER_NODE)
            if len(whole) < k:
                continue
            start = rng.randrange(0, len(whole) - k + 1)
            parts = []
            left = need
            for n in whole[start : start + k]:
                take = min(left, GPUS_PER_NODE)
                parts.append(NodeDevices(n, tuple(free[n][:take])))
                del free[n][:take]
                left -= take
            out.append(_running(rng, job, tuple(parts)))
    return out


def _running(rng: random.Random, job: Job, placement: tuple[NodeDevices, ...]) -> RunningJob:
    duration = job.expected_duration or 3600.0
    started = NOW - rng.uniform(0, duration)
    job = replace(job, attained_service=(NOW - started) * job.gpus)
    return RunningJob(job, placement, started)


def snapshot(gpus: int, pending: int, seed: int = 0) -> Snapshot:
    """The benchmark's snapshot: half-occupied cluster, `pending` jobs waiting."""
    rng = random.Random(seed)
    nodes, topo = cluster(gpus)
    total = sum(n.gpus for n in nodes)
    names = ("research", "product", "vision", "speech")
    queues = tuple(Queue(q, guaranteed=total // len(names)) for q in names)
    running_jobs: list[Job] = []
    used = 0
    i = 0
    while used < total // 2:
        job = _job(rng, i, rng.choice(names), NOW)
        i += 1
        if used + job.gpus > total // 2:
            continue
        running_jobs.append(job)
        used += job.gpus
    running = _scatter(rng, nodes, running_jobs)
    waiting = tuple(_job(rng, i + k, rng.choice(names), NOW) for k in range(pending))
    return Snapshot(NOW, nodes, topo, queues, tuple(running), waiting)


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def run(
    gpus: int,
    pending: int,
    repeats: int = 0,
    arrivals: int = 50,
    profile: str = "default",
    seed: int = 0,
) -> dict[str, Any]:
    """Measure and return the figures as a JSON-ready dict."""
    snap = snapshot(gpus, pending, seed)
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
        job = replace(_job(rng, 10_000_000 + k, rng.choice(queues), NOW), submit_time=NOW)
        t0 = time.perf_counter()
        with gc_paused():
            sched.decide_arrival(job)
        arrival.append((time.perf_counter() - t0) * 1e3)
        stale += sched.stale
        sched.forget(job.id)
    for k in range(min(arrivals, 5)):
        job = replace(_job(rng, 20_000_000 + k, "research", NOW), submit_time=NOW)
        t0 = time.perf_counter()
        with gc_paused():
            run_cycle(replace(steady, pending=(*steady.pending, job)), profile, layout)
        full_cycle.append((time.perf_counter() - t0) * 1e3)
    p50 = statistics.median(times)
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
        "cycle_ms_p50": round(p50, 2),
        "cycle_ms_p99": round(_pct(times, 0.99), 2),
        "placements": len(decision.placements),
        "evictions": len(decision.evictions),
        "reservations": len(decision.reservations),
        "placements_per_s": round(len(decision.placements) / (p50 / 1e3), 1),
        "arrival_decision_ms_p50": round(statistics.median(arrival), 3),
        "arrival_decision_ms_p99": round(_pct(arrival, 0.99), 3),
        "arrival_full_cycle_ms_p50": round(statistics.median(full_cycle), 2),
        "rounds_to_steady": rounds,
        "steady": sched.steady,
        "arrivals_needing_full_cycle": sched.full_cycles,
        "arrivals_moving_the_reservation": stale,
        "repeats": repeats,
        "arrivals": arrivals,
    }
