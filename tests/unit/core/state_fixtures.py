"""Shared fixtures of the core unit tests: a two-level topology, a cluster state loaded from a
snapshot (with jobs on a drained node and a failed device), and the recomputation from scratch
that its incrementally kept aggregates are compared against."""

from __future__ import annotations

import copy
from typing import Any

from trainyard.core import (
    Job,
    Node,
    NodeDevices,
    Queue,
    RunningJob,
    Snapshot,
    Topology,
    build_layout,
    validate,
)
from trainyard.core.queues import QueueIndex
from trainyard.core.state import ClusterState
from trainyard.core.topology import Layout

TWO_LEVELS = Topology(levels=("spine", "leaf"))

STATE_QUEUES = (
    Queue("root", guaranteed=8, limit=20),
    Queue("team", parent="root", guaranteed=4),
    Queue("other", guaranteed=2),
)
STATE_NODES = (
    Node("n0", 8, "H100", cpus=64.0, memory_gb=512.0, path=("s0", "l0"), island_size=4),
    Node("n1", 8, "H100", cpus=64.0, memory_gb=512.0, path=("s0", "l0"), unavailable=(7,)),
    Node("n2", 4, "A100", 40.0, cpus=32.0, memory_gb=256.0, path=("s0", "l1")),
    Node("n3", 4, "H100", cpus=32.0, memory_gb=256.0, path=("s1", "l2")),
    Node("n4", 4, "H100", path=("s1", "l2"), schedulable=False),
)
STATE_RUNNING = (
    RunningJob(
        Job("gang", "team", gpus=6, cpus=12.0, memory_gb=60.0),
        (NodeDevices("n0", (4, 5, 6, 7)), NodeDevices("n1", (0, 1))),
    ),
    RunningJob(Job("small", "other", gpus=1, cpus=3.0), (NodeDevices("n2", (2,)),)),
    RunningJob(Job("cpu", "root", gpus=0, cpus=8.0, memory_gb=16.0), (NodeDevices("n3", ()),)),
    # a node drained, and a device failed, under running jobs
    RunningJob(Job("drained", "other", gpus=2), (NodeDevices("n4", (0, 1)),)),
    RunningJob(Job("failed", "team", gpus=1), (NodeDevices("n1", (7,)),)),
)


def make_state(running: tuple[RunningJob, ...] = STATE_RUNNING) -> ClusterState:
    snap = Snapshot(0.0, STATE_NODES, TWO_LEVELS, STATE_QUEUES, running)
    validate(snap)
    layout = build_layout(snap.nodes, snap.topology)
    total_cpus = sum(n.cpus for n in snap.nodes)
    total_mem = sum(n.memory_gb for n in snap.nodes)
    queues = QueueIndex(snap.queues, sum(layout.class_capacity), total_cpus, total_mem, 0.5)
    return ClusterState(layout, snap, queues)


def recomputed(state: ClusterState) -> dict[str, Any]:
    """Every aggregate of `state`, computed from scratch from its allocations."""
    layout: Layout = state.layout
    n = len(layout.nodes)
    held = [0] * n
    cpu = [node.cpus for node in layout.nodes]
    mem = [node.memory_gb for node in layout.nodes]
    qi = state.queues
    qgpus = [0] * len(qi.queues)
    qcpus = [0.0] * len(qi.queues)
    qmem = [0.0] * len(qi.queues)
    for alloc in state.allocs.values():
        for i, mask, c, m in alloc.parts:
            assert not held[i] & mask, "two allocations share a device"
            held[i] |= mask
            cpu[i] -= c
            mem[i] -= m
        if alloc.queue >= 0:
            for a in qi.path[alloc.queue]:
                qgpus[a] += alloc.gpus
                qcpus[a] += alloc.job.cpus
                qmem[a] += alloc.job.memory_gb
    free_mask = [layout.usable_mask[i] & ~held[i] for i in range(n)]
    free_cnt = [m.bit_count() for m in free_mask]
    ncls = len(layout.classes)
    bucket = [[0] * (layout.class_node_max[c] + 1) for c in range(ncls)]
    class_free = [0] * ncls
    dom_free = [
        [[0] * len(layout.domain_names[lv]) for _ in range(ncls)] for lv in range(layout.depth)
    ]
    for i in range(n):
        c = layout.class_of_node[i]
        if c < 0:
            continue
        bucket[c][free_cnt[i]] |= 1 << i
        class_free[c] += free_cnt[i]
        for lv in range(layout.depth):
            dom_free[lv][c][layout.domain_of[lv][i]] += free_cnt[i]
    return {
        "free_mask": free_mask,
        "free_cnt": free_cnt,
        "free_cpu": [round(x, 6) for x in cpu],
        "free_mem": [round(x, 6) for x in mem],
        "bucket": bucket,
        "class_free": class_free,
        "dom_free": dom_free,
        "queue_gpus": qgpus,
        "queue_cpus": [round(x, 6) for x in qcpus],
        "queue_mem": [round(x, 6) for x in qmem],
    }


def aggregates(state: ClusterState) -> dict[str, Any]:
    """The aggregates `state` maintains incrementally, in the shape of `recomputed`."""
    return {
        "free_mask": list(state.free_mask),
        "free_cnt": list(state.free_cnt),
        "free_cpu": [round(x, 6) for x in state.free_cpu],
        "free_mem": [round(x, 6) for x in state.free_mem],
        "bucket": copy.deepcopy(state.bucket),
        "class_free": list(state.class_free),
        "dom_free": copy.deepcopy(state.dom_free),
        "queue_gpus": list(state.queues.gpus),
        "queue_cpus": [round(x, 6) for x in state.queues.cpus],
        "queue_mem": [round(x, 6) for x in state.queues.mem],
    }
