"""A synthetic cluster for timing the scheduler: nodes, a half-occupied start and a queue.

The cluster has 8 GPUs per node (virtual H100s, 80 GB), 32 nodes per leaf switch and 8
leaves per spine. It starts half occupied by running jobs whose sizes and run times follow the
Philly trace (`sim.workload.philly`), scattered at random so that free capacity is fragmented
as in a cluster that has lived a while. `pending` jobs (Philly sizes, four tenant queues with
equal guaranteed quotas, a few priorities) wait. `elastic` makes a share of the jobs elastic
(for timing the resize action). Everything is drawn from one seed, so a
snapshot is the same on every machine. `trainyard.sim.timing` times cycles on it; tests use it
as a large realistic state.
"""

from __future__ import annotations

import random
from dataclasses import replace

from trainyard.core import (
    Elastic,
    Job,
    Node,
    NodeDevices,
    Queue,
    RunningJob,
    Snapshot,
    StepSample,
    Topology,
)
from trainyard.sim.workload.philly import sample_duration, sample_gpus

__all__ = ["GPUS_PER_NODE", "NOW", "cluster", "elastic", "random_job", "snapshot"]

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


def random_job(rng: random.Random, i: int, queue: str, now: float) -> Job:
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
        job = random_job(rng, i, rng.choice(names), NOW)
        i += 1
        if used + job.gpus > total // 2:
            continue
        running_jobs.append(job)
        used += job.gpus
    running = _scatter(rng, nodes, running_jobs)
    waiting = tuple(random_job(rng, i + k, rng.choice(names), NOW) for k in range(pending))
    return Snapshot(NOW, nodes, topo, queues, tuple(running), waiting)


def _elastic_job(rng: random.Random, job: Job, nodes: int) -> Job:
    """`job` elastic on [1, 2 x its size] (at most 64), having measured one step at its size
    (compute-bound, a little sync), with Pollux-like gradient statistics."""
    k = job.gpus
    step = 0.2 * (1.0 + 0.05 * (k > 1) + 0.1 * (nodes > 1)) * rng.uniform(0.8, 1.2)
    info = Elastic(
        batch=64,
        max_batch=64 * 32,
        max_local_batch=256,
        samples=(StepSample(k, nodes, 64 * k, step),),
        grad_sqr=1.0,
        grad_var=rng.uniform(1.0, 8.0),
    )
    return replace(job, min_gpus=1, max_gpus=min(64, 2 * k), elastic=info)


def elastic(snap: Snapshot, share: float, seed: int = 0) -> Snapshot:
    """`snap` with `share` of its GPU jobs (running and pending, drawn at random) elastic."""
    rng = random.Random(seed + 7)
    running = tuple(
        replace(r, job=_elastic_job(rng, r.job, len(r.placement)))
        if r.job.gpus and rng.random() < share
        else r
        for r in snap.running
    )
    pending = tuple(
        _elastic_job(rng, j, -(-j.gpus // GPUS_PER_NODE)) if j.gpus and rng.random() < share else j
        for j in snap.pending
    )
    return replace(snap, running=running, pending=pending)
