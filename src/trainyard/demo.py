"""A simulated day on a small synthetic cluster, scheduled by the real core (`trainyard demo`).

`trainyard demo` shows the scheduler at work without a server or real jobs (`make up` runs the
platform itself, with real jobs): jobs arrive over 24 simulated hours (sizes and run times
from the Philly distributions in `workload.philly`) into three tenant queues on a 64-GPU
cluster of *virtual* devices; at every arrival and completion the shell builds a `Snapshot`,
calls `core.run_cycle`, and applies the `Decision` (placements start, evictions return to the
queue and lose the work since their last checkpoint). It prints the decisions with their
explanations, then a summary of utilisation and waiting times per queue and per job size.

This is a shell around the core, like the server and the simulator: the clock and the event
queue live here, all decisions come from `run_cycle`. (It is a loop of its own beside the
simulator's; issue 12 plans to make it a simulator run with its own printer.)
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from trainyard.core import (
    Decision,
    Job,
    Node,
    Queue,
    RunningJob,
    Snapshot,
    Topology,
    build_layout,
    run_cycle,
)
from trainyard.runtime import gc_paused
from trainyard.workload.philly import sample_duration, sample_gpus

DAY = 24 * 3600.0
SHOWN_EVENTS = 60
CHECKPOINT_EVERY = 600.0  # seconds of work a preempted job may lose
RESTART_COST = 60.0


def demo_cluster() -> tuple[tuple[Node, ...], Topology, tuple[Queue, ...]]:
    """8 nodes x 8 virtual H100 GPUs under 2 leaf switches; three tenant queues."""
    nodes = tuple(
        Node(
            name=f"node{i}",
            gpus=8,
            gpu_type="H100",
            gpu_memory_gb=80,
            cpus=96,
            memory_gb=1024,
            path=(f"leaf{i // 4}",),
            island_size=8,
            virtual=True,
        )
        for i in range(8)
    )
    queues = (
        Queue("research", guaranteed=32, weight=2.0),
        Queue("product", guaranteed=24, weight=1.0),
        Queue("sandbox", guaranteed=8, limit=32, weight=1.0),
    )
    return nodes, Topology(levels=("leaf",)), queues


@dataclass
class Work:
    """A job's remaining work, outside the core."""

    job: Job
    remaining: float
    started: float = 0.0
    first_start: float | None = None
    waited: float = 0.0
    queued_since: float = 0.0
    preemptions: int = 0
    done_at: float | None = None


@dataclass
class DayStats:
    gpu_seconds: float = 0.0
    placements: int = 0
    evictions: int = 0
    cycles: int = 0
    finished: list[Work] = field(default_factory=list)


# Sizes for a 64-GPU demo: Philly's are 93% single-GPU, which would leave a small cluster
# idle; this mix keeps Philly's shape (mostly small, a tail of gangs) with more gangs.
DEMO_SIZES = ((1, 0.55), (2, 0.1), (4, 0.14), (8, 0.13), (16, 0.05), (32, 0.03))


def workload(seed: int, jobs: int) -> list[Job]:
    """Arrivals over one day (busier in working hours), run times from Philly (2 min-8 h)."""
    rng = random.Random(seed)
    out = []
    sizes = [s for s, _w in DEMO_SIZES]
    weights = [w for _s, w in DEMO_SIZES]
    for i in range(jobs):
        queue = rng.choices(("research", "product", "sandbox"), weights=(5, 3, 2))[0]
        gpus = rng.choices(sizes, weights)[0] if rng.random() < 0.9 else min(sample_gpus(rng), 32)
        duration = min(max(sample_duration(rng), 120.0), 8 * 3600.0)
        out.append(
            Job(
                id=f"job-{i:03d}",
                queue=queue,
                gpus=gpus,
                priority=1 if queue == "product" and rng.random() < 0.3 else 0,
                submit_time=min(rng.gauss(DAY * 0.45, DAY * 0.18) % (DAY * 0.9), DAY * 0.9),
                cpus=8.0 * gpus,
                memory_gb=64.0 * gpus,
                expected_duration=duration,
                min_runtime=300.0,
                preemptible=queue != "product" or rng.random() < 0.5,
            )
        )
    return sorted(out, key=lambda j: j.submit_time)


def _clock(t: float) -> str:
    s = int(t)
    return f"{s // 3600:02d}:{(s % 3600) // 60:02d}:{s % 60:02d}"


def run_day(
    seed: int = 7,
    jobs: int = 400,
    profile: str = "default",
    show: int = 60,
    echo: Callable[[str], None] = print,
) -> DayStats:
    """Simulate one day and print the first `show` decisions in full, then hourly lines."""
    nodes, topo, queues = demo_cluster()
    layout = build_layout(nodes, topo)
    total = sum(n.gpus for n in nodes)
    works = {
        j.id: Work(j, j.expected_duration or 0.0, queued_since=j.submit_time)
        for j in workload(seed, jobs)
    }
    events: list[tuple[float, int, str, str]] = [
        (w.job.submit_time, 0, "arrive", jid) for jid, w in works.items()
    ]
    heapq.heapify(events)
    running: dict[str, RunningJob] = {}
    pending: dict[str, Job] = {}
    stats = DayStats()
    shown = 0
    seen: set[str] = set()
    next_hour = 3600.0
    echo(
        f"trainyard demo: {total} GPUs on {len(nodes)} nodes (VIRTUAL devices, no real GPUs), "
        f"{jobs} jobs over one simulated day, profile {profile!r}"
    )
    while events:
        now = events[0][0]
        while events and events[0][0] == now:
            _t, _p, kind, jid = heapq.heappop(events)
            w = works[jid]
            if kind == "arrive":
                pending[jid] = w.job
            elif kind == "finish" and jid in running and w.done_at == now:
                stats.gpu_seconds += (now - running.pop(jid).started_at) * w.job.gpus
                stats.finished.append(w)
        while now >= next_hour:
            used = sum(r.job.gpus for r in running.values())
            echo(f"{_clock(next_hour)}  hour  {used}/{total} GPUs busy, {len(pending)} waiting")
            next_hour += 3600.0
        snap = Snapshot(now, nodes, topo, queues, tuple(running.values()), tuple(pending.values()))
        with gc_paused():
            decision = run_cycle(snap, profile, layout)
        stats.cycles += 1
        for e in decision.evictions:
            r = running.pop(e.job_id)
            w = works[e.job_id]
            ran = now - r.started_at
            stats.gpu_seconds += ran * r.job.gpus
            w.remaining -= max(0.0, ran - RESTART_COST) // CHECKPOINT_EVERY * CHECKPOINT_EVERY
            w.preemptions += 1
            w.queued_since = now
            pending[e.job_id] = replace(
                r.job, attained_service=r.job.attained_service + ran * r.job.gpus
            )
            stats.evictions += 1
            if shown < show:
                shown += 1
                who = f"{e.job_id} ({e.queue}, {e.gpus} GPUs)"
                echo(f"{_clock(now)}  evict {who} for {e.for_job}: {e.reason}")
        for p in decision.placements:
            job = pending.pop(p.job_id)
            w = works[p.job_id]
            w.waited += now - w.queued_since
            if w.first_start is None:
                w.first_start = now
            running[p.job_id] = RunningJob(job, p.nodes, now)
            w.done_at = now + w.remaining + (RESTART_COST if w.preemptions else 0.0)
            heapq.heappush(events, (w.done_at, 1, "finish", p.job_id))
            stats.placements += 1
            if shown < show and (p.gpus >= 8 or p.action != "allocate" or p.after_evictions):
                shown += 1
                where = " ".join(f"{nd.node}[{','.join(map(str, nd.devices))}]" for nd in p.nodes)
                who = f"{p.job_id} ({p.queue}, {p.gpus} GPUs)"
                echo(f"{_clock(now)}  start {who} on {where}  [{p.action}]")
        if shown < show:
            shown += _explain(decision, now, echo, min(show - shown, 2), seen)
    return stats


def _explain(
    decision: Decision, now: float, echo: Callable[[str], None], budget: int, seen: set[str]
) -> int:
    """Print the reason of pending jobs the first time they are reserved for or held back."""
    printed = 0
    for jid, reason in decision.pending.items():
        if printed >= budget:
            break
        key = f"{jid}:{reason.code}"
        if key in seen:
            continue
        if reason.code in ("reservation", "quota", "fragmented") or reason.estimated_start:
            seen.add(key)
            echo(f"{_clock(now)}  wait  {jid}: {reason.message}")
            printed += 1
    return printed


def summary(stats: DayStats, echo: Callable[[str], None] = print) -> None:
    """Utilisation and waiting time per queue and job size."""
    nodes, _topo, _queues = demo_cluster()
    total = sum(n.gpus for n in nodes)
    horizon = max((w.done_at or 0.0) for w in stats.finished) if stats.finished else DAY
    echo("")
    echo(
        f"finished {len(stats.finished)} jobs in {_clock(horizon)}; {stats.placements} starts, "
        f"{stats.evictions} preemptions, {stats.cycles} scheduling cycles"
    )
    echo(
        f"GPU utilisation over the run: {stats.gpu_seconds / (total * horizon):.1%} "
        "(virtual devices)"
    )
    groups: dict[str, list[float]] = {}
    for w in stats.finished:
        groups.setdefault(f"queue {w.job.queue}", []).append(w.waited)
        size = "small (<=2 GPUs)" if w.job.gpus <= 2 else "large (>2 GPUs)"
        groups.setdefault(f"jobs {size}", []).append(w.waited)
    for name in sorted(groups):
        waits = sorted(groups[name])
        mean = sum(waits) / len(waits)
        p90 = waits[int(0.9 * (len(waits) - 1))]
        line = f"mean wait {mean / 60:6.1f} min  p90 {p90 / 60:6.1f} min"
        echo(f"  {name:<24} {len(waits):4d} jobs  {line}")
