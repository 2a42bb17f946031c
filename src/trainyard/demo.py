"""`trainyard demo`: a simulated day on a small synthetic cluster, with a printer for people.

The demo shows the scheduler at work without a server or real jobs (`make up` runs the
platform itself, with real jobs). It is a simulator run (`trainyard.sim.engine.simulate`), not
a loop of its own: jobs arrive over 24 simulated hours (sizes and run times from the Philly
distributions in `sim.workload.philly`, more gangs than Philly's) into three tenant queues on
a 64-GPU cluster of *virtual* devices. This module owns only that synthetic day (`demo_cluster`,
`workload`) and the printing: `Printer` observes every round's decision and prints starts,
evictions and the reasons jobs wait; `summary` prints utilisation and waiting times per queue
and job size from the run's records.

The simulator's model applies: the scheduler is told each job's run time (`estimates` exact),
a round runs at every event, a started job runs at least `MIN_RUNTIME_S` before it may be
preempted, and a preempted job keeps its checkpointed progress and pays `RESTART_S` when it
starts again.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from trainyard.core import Decision, Node, Queue, Snapshot, Topology
from trainyard.sim.cluster import Cluster
from trainyard.sim.engine import SimOptions, simulate
from trainyard.sim.records import SimResult
from trainyard.sim.speed import FixedDuration
from trainyard.sim.workload import SimJob, Workload
from trainyard.sim.workload.philly import sample_duration, sample_gpus
from trainyard.stats import percentile

__all__ = ["DAY", "Printer", "demo_cluster", "run_day", "summary", "workload"]

DAY = 24 * 3600.0
RESTART_S = 60.0  # a preempted job's restart (reload its checkpoint)
MIN_RUNTIME_S = 300.0  # a started job runs this long before it may be preempted

# Sizes for a 64-GPU demo: Philly's are 93% single-GPU, which would leave a small cluster
# idle; this mix keeps Philly's shape (mostly small, a tail of gangs) with more gangs.
DEMO_SIZES = ((1, 0.55), (2, 0.1), (4, 0.14), (8, 0.13), (16, 0.05), (32, 0.03))
QUEUES = ("research", "product", "sandbox")


def demo_cluster() -> Cluster:
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
    return Cluster(nodes, Topology(levels=("leaf",)), "demo (8x8 virtual H100)", queues)


def workload(seed: int, jobs: int) -> Workload:
    """Arrivals over one day (busier in working hours), run times from Philly (2 min-8 h)."""
    rng = random.Random(seed)
    out = []
    sizes = [s for s, _w in DEMO_SIZES]
    weights = [w for _s, w in DEMO_SIZES]
    for i in range(jobs):
        queue = rng.choices(QUEUES, weights=(5, 3, 2))[0]
        gpus = rng.choices(sizes, weights)[0] if rng.random() < 0.9 else min(sample_gpus(rng), 32)
        duration = min(max(sample_duration(rng), 120.0), 8 * 3600.0)
        out.append(
            SimJob(
                id=f"job-{i:03d}",
                submit_time=min(rng.gauss(DAY * 0.45, DAY * 0.18) % (DAY * 0.9), DAY * 0.9),
                gpus=gpus,
                queue=queue,
                duration=duration,
                priority=1 if queue == "product" and rng.random() < 0.3 else 0,
                preemptible=queue != "product" or rng.random() < 0.5,
            )
        )
    return Workload(kind="demo", source=f"demo:seed={seed}", jobs=tuple(out), queues=QUEUES)


def _clock(t: float) -> str:
    s = int(t)
    return f"{s // 3600:02d}:{(s % 3600) // 60:02d}:{s % 60:02d}"


class Printer:
    """Observes the simulator's rounds: the first `show` notable decisions in full (gangs of 8
    GPUs or more, starts that are not plain allocations, evictions, and the first reason a
    job waits for a reservation, its quota or fragmentation), and a line per hour."""

    def __init__(self, total_gpus: int, show: int, echo: Callable[[str], None]) -> None:
        self.total = total_gpus
        self.show = show
        self.echo = echo
        self.shown = 0
        self.next_hour = 3600.0
        self.seen: set[str] = set()

    def __call__(self, snapshot: Snapshot, decision: Decision) -> None:
        now = snapshot.now
        while now >= self.next_hour:
            used = sum(r.job.gpus for r in snapshot.running)
            line = f"{used}/{self.total} GPUs busy, {len(snapshot.pending)} waiting"
            self.echo(f"{_clock(self.next_hour)}  hour  {line}")
            self.next_hour += 3600.0
        for e in decision.evictions:
            self._line(
                now, f"evict {e.job_id} ({e.queue}, {e.gpus} GPUs) for {e.for_job}: {e.reason}"
            )
        for p in decision.placements:
            if p.gpus >= 8 or p.action != "allocate" or p.after_evictions:
                where = " ".join(f"{nd.node}[{','.join(map(str, nd.devices))}]" for nd in p.nodes)
                self._line(
                    now, f"start {p.job_id} ({p.queue}, {p.gpus} GPUs) on {where}  [{p.action}]"
                )
        budget = 2
        for jid, reason in decision.pending.items():
            if budget == 0 or self.shown >= self.show:
                break
            key = f"{jid}:{reason.code}"
            if key in self.seen:
                continue
            if reason.code in ("reservation", "quota", "fragmented") or reason.estimated_start:
                self.seen.add(key)
                self._line(now, f"wait  {jid}: {reason.message}")
                budget -= 1

    def _line(self, now: float, text: str) -> None:
        if self.shown < self.show:
            self.shown += 1
            self.echo(f"{_clock(now)}  {text}")


def run_day(
    seed: int = 7,
    jobs: int = 400,
    profile: str = "default",
    show: int = 60,
    echo: Callable[[str], None] = print,
) -> SimResult:
    """Simulate one day, printing the first `show` decisions in full, then hourly lines."""
    cluster = demo_cluster()
    echo(
        f"trainyard demo: {cluster.gpus} GPUs on {len(cluster.nodes)} nodes (VIRTUAL devices, "
        f"no real GPUs), {jobs} jobs over one simulated day, profile {profile!r}"
    )
    options = SimOptions(interval_s=0.0, estimates="exact", min_runtime_s=MIN_RUNTIME_S)
    return simulate(
        workload(seed, jobs),
        cluster,
        FixedDuration(restart_s=RESTART_S),
        profile,
        options,
        queues=cluster.queues,
        seed=seed,
        observer=Printer(cluster.gpus, show, echo),
    )


def summary(result: SimResult, echo: Callable[[str], None] = print) -> None:
    """Utilisation and waiting time (first start - submit) per queue and job size."""
    finished = [r for r in result.records if r.end is not None]
    starts = sum(1 + r.restarts for r in result.records if r.first_start is not None)
    preemptions = sum(r.preemptions for r in result.records)
    horizon = result.end_time or DAY
    echo("")
    echo(
        f"finished {len(finished)} jobs in {_clock(horizon)}; {starts} starts, "
        f"{preemptions} preemptions, {result.rounds} scheduling cycles"
    )
    gpu_seconds = sum(r.run_time * r.gpus for r in result.records)
    echo(
        f"GPU utilisation over the run: {gpu_seconds / (result.total_gpus * horizon):.1%} "
        "(virtual devices)"
    )
    groups: dict[str, list[float]] = {}
    for r in finished:
        wait = r.queueing_delay or 0.0
        groups.setdefault(f"queue {r.queue}", []).append(wait)
        size = "small (<=2 GPUs)" if r.gpus <= 2 else "large (>2 GPUs)"
        groups.setdefault(f"jobs {size}", []).append(wait)
    for name in sorted(groups):
        waits = groups[name]
        mean = sum(waits) / len(waits)
        p90 = percentile(waits, 90) or 0.0
        line = f"mean wait {mean / 60:6.1f} min  p90 {p90 / 60:6.1f} min"
        echo(f"  {name:<24} {len(waits):4d} jobs  {line}")
