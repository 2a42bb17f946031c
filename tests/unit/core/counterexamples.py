"""Known counterexamples: the minimal snapshots that broke a property of the scheduling
core. They are pinned with `@example` on the property tests and checked directly by the
regression tests (test_properties_regressions.py).
"""

from __future__ import annotations

from strategies import NOW

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

LEAVES = Topology(levels=("leaf",))

# A gang that fits only across two leaves, because the leaf with enough free GPUs lacks the
# memory: n1 alone has 2 free GPUs but memory for 1; n0 + n1 fit (100 GB per GPU).
GANG_NEEDS_TWO_LEAVES = Snapshot(
    NOW,
    (
        Node("n0", 1, memory_gb=128.0, path=("leaf0",)),
        Node("n1", 2, memory_gb=128.0, path=("leaf1",)),
    ),
    LEAVES,
    pending=(Job("gang", gpus=2, memory_gb=200.0),),
)

# `big` needs a's last GPU (b has CPUs for only 3 of its GPUs) and may preempt `low` for it;
# `cpu` is a CPU-only job that allocate places on `a` first.
CPU_JOB_BLOCKS_PREEMPTION = Snapshot(
    NOW,
    (Node("a", 2, cpus=64.0), Node("b", 4, cpus=128.0)),
    running=(
        RunningJob(Job("keep", preemptible=False), (NodeDevices("a", (0,)),)),
        RunningJob(Job("low"), (NodeDevices("a", (1,)),)),
    ),
    pending=(Job("big", gpus=4, cpus=160.0, priority=1), Job("cpu", gpus=0)),
)

# q0 is at its limit, so `p2` waits for quota; `p0` then preempts `r1` (4 GPUs) in q1,
# which brings q0 down to 1 of 4: `p2` fits in the same cycle.
EVICTION_FREES_QUOTA = Snapshot(
    NOW,
    (Node("a", 4),),
    queues=(Queue("q0", limit=4), Queue("q1", parent="q0")),
    running=(RunningJob(Job("r1", queue="q1", gpus=4), (NodeDevices("a", (0, 1, 2, 3)),)),),
    pending=(Job("p0", queue="q1", priority=1), Job("p2", queue="q0", priority=2)),
)

# `head` is reserved all of node a (when `r` ends, at t=1000); the CPU-only job `cpu` takes
# 100 of a's 128 GB, which `head` needs at its start.
RESERVED_MEMORY = Snapshot(
    100.0,
    (Node("a", 4, memory_gb=128.0),),
    running=(RunningJob(Job("r", gpus=2, expected_duration=1000.0), (NodeDevices("a", (0, 1)),)),),
    pending=(
        Job("head", gpus=4, memory_gb=100.0),
        Job("small", submit_time=1.0, expected_duration=5000.0),
        Job("cpu", gpus=0, memory_gb=100.0, submit_time=2.0),
    ),
)

# `head` (non-preemptible, so it must fit in q's guaranteed 6) is reserved node a; `small`
# of the same queue is backfilled on b, after which q holds 3 and, until `r` ends, `head`
# no longer passes its quota check (3 + 4 > 6).
RESERVED_QUOTA = Snapshot(
    100.0,
    (Node("a", 4), Node("b", 1)),
    queues=(Queue("q", guaranteed=6),),
    running=(
        RunningJob(
            Job("r", queue="q", gpus=2, priority=5, expected_duration=1000.0),
            (NodeDevices("a", (0, 1)),),
        ),
    ),
    pending=(
        Job("head", queue="q", gpus=4, priority=1, preemptible=False),
        Job("small", queue="q", submit_time=1.0),
        Job("small2", queue="q", submit_time=2.0),
    ),
)

# `p3` preempts `r0` on n1 (the only schedulable node), which frees n1's memory; `p0`, a
# CPU-only job with a reservation on n1, then fits there, but its own reservation held that
# memory, so the settle step after the evictions did not place it (found by hypothesis,
# 2026-12-01).
_KEEP = {"queue": "q0", "preemptible": False}
OWN_RESERVATION_BLOCKS_SETTLE = Snapshot(
    10_000.0,
    (
        Node("n0", 6, cpus=16.0, memory_gb=128.0, path=("spine0", "leaf0"), schedulable=False),
        Node("n1", 8, cpus=16.0, memory_gb=128.0, path=("spine0", "leaf0")),
        Node("n2", 1, cpus=16.0, memory_gb=128.0, path=("spine0", "leaf0"), schedulable=False),
    ),
    Topology(levels=("spine", "leaf")),
    queues=(Queue("q0", limit=15), Queue("q1"), Queue("q2")),
    running=(
        RunningJob(
            Job("r0", queue="q0", memory_gb=32.0, expected_duration=600.0),
            (NodeDevices("n1", (0,)),),
        ),
        RunningJob(Job("r1", gpus=0, **_KEEP), (NodeDevices("n0", ()),)),
        RunningJob(Job("r3", gpus=2, **_KEEP), (NodeDevices("n0", (0, 1)),)),
        RunningJob(Job("r5", gpus=4, **_KEEP), (NodeDevices("n0", (2, 3, 4, 5)),)),
        RunningJob(
            Job("r6", gpus=8, **_KEEP),
            (NodeDevices("n1", (1, 2, 3, 4, 5, 6, 7)), NodeDevices("n2", (0,))),
        ),
    ),
    pending=(
        Job("p0", queue="q0", gpus=0, priority=1, memory_gb=100.0),
        Job("p1", gpus=0, priority=1, **_KEEP),
        Job("p2", gpus=0, priority=1, **_KEEP),
        Job("p3", queue="q0", gpus=1, priority=1),
    ),
)

# `p3` (2 GPUs, queue q2) gets a reservation of unknown start on n0; `p0` (priority 1) then
# preempts `r2` and `p3` is placed by preempt in the room left over, on n2, with its own
# reservation still standing: the 2 GPUs held on n0 kept `p5` (3 GPUs) waiting although it
# fits. A placed job's reservation is spent (found by hypothesis, 2026-12-02).
_ONE_GPU_OFF = {"cpus": 16.0, "memory_gb": 128.0, "schedulable": False}
_NO_GPU = {"gpus": 0, "preemptible": False}
SPENT_RESERVATION_HELD = Snapshot(
    10_000.0,
    (
        Node("n0", 3, cpus=16.0, memory_gb=128.0),
        Node("n1", 1, **_ONE_GPU_OFF),
        Node("n2", 4, cpus=16.0, memory_gb=128.0),
        *(Node(f"n{k}", 1, **_ONE_GPU_OFF) for k in range(3, 7)),
    ),
    Topology(),
    queues=(
        Queue("q0", guaranteed=3, limit=14, weight=0.5),
        Queue("q1", weight=0.5),
        Queue("q2", parent="q0", guaranteed=3, weight=0.5),
        Queue("q3", weight=0.5),
    ),
    running=(
        RunningJob(Job("r0", queue="q0", submit_time=0, **_NO_GPU), (NodeDevices("n0", ()),), 0.0),
        RunningJob(Job("r1", queue="q0", submit_time=0, **_NO_GPU), (NodeDevices("n0", ()),), 0.0),
        RunningJob(
            Job("r2", queue="q2", gpus=12, submit_time=0),
            (
                NodeDevices("n0", (0, 1, 2)),
                NodeDevices("n1", (0,)),
                NodeDevices("n2", (0, 1, 2, 3)),
                *(NodeDevices(f"n{k}", (0,)) for k in range(3, 7)),
            ),
            0.0,
        ),
    ),
    pending=(
        Job("p0", queue="q2", gpus=1, priority=1, submit_time=0.0, preemptible=False),
        Job("p1", queue="q0", submit_time=0.0, **_NO_GPU),
        Job("p2", queue="q0", submit_time=0.0, **_NO_GPU),
        Job("p3", queue="q2", gpus=2, submit_time=0.0),
        Job("p4", queue="q0", submit_time=0.0, **_NO_GPU),
        Job("p5", queue="q0", gpus=3, submit_time=0.0),
    ),
)

# Allocate places `p5` (q2) on n0; reclaim then takes n0 back for `p0` (q4 is owed its
# guarantee; `p0` needs memory of two nodes), retracting `p5`'s tentative placement, and
# `p5` was never tried again although n0 and n2 still had a GPU each (found by hypothesis,
# 2026-12-02). A retracted placement is offered what is left by the settle step.
RETRACTED_PLACEMENT_NOT_RETRIED = Snapshot(
    10_000.0,
    (
        Node("n0", 2, cpus=16.0, memory_gb=128.0, path=("spine0", "leaf0")),
        Node("n2", 3, cpus=16.0, memory_gb=128.0, path=("spine0", "leaf0")),
    ),
    Topology(levels=("spine", "leaf")),
    queues=(
        Queue("q0", weight=0.5),
        Queue("q2", guaranteed=2, weight=0.5),
        Queue("q4", guaranteed=2, weight=0.5),
    ),
    pending=(
        Job("p0", queue="q4", gpus=2, memory_gb=200.0, preemptible=False),
        Job("p5", queue="q2", gpus=2),
        Job("p6", queue="q2", gpus=1),
    ),
)

# The spare passes place the recovering `p0` on n1 (n0, the spare, is drained), then hand the
# profile's cycle a snapshot in which `p0` already runs, started now and of unknown length;
# `p2`, waiting long enough for a blind reservation, was reserved n1's GPU behind `p0`, a job
# this very decision starts (a blind reservation waits only for jobs running before it).
BLIND_BEHIND_RECOVERED = Snapshot(
    10_000.0,
    (
        Node("n0", 1, gpu_type="H100", schedulable=False, spare=True),
        Node("n1", 1, gpu_type="H100"),
    ),
    pending=(
        Job("p0", recovering=True, cpus=0.0, memory_gb=0.0),
        Job("p1", gpus=0, recovering=True, cpus=0.0, memory_gb=0.0),
        Job("p2", recovering=True, cpus=0.0, memory_gb=0.0),
    ),
)

# The spare passes place the recovering `rec` (1 GPU, much served) on n0 beside `r` (n0's
# spares are drained) and the profile's cycle held it there; `big` (6 GPUs, never served)
# then waited, and under `tiresias` preempted `rec` the cycle after it started (found by
# hypothesis, 2026-12-07). The profile's cycle may now preempt what the passes placed, and
# that placement is taken back in the same decision.
RECOVERED_THEN_PREEMPTED = Snapshot(
    10_000.0,
    (
        Node("n0", 7, cpus=16.0, memory_gb=128.0, path=("leaf0",)),
        Node("s0", 1, cpus=16.0, memory_gb=128.0, path=("leaf0",), schedulable=False, spare=True),
    ),
    LEAVES,
    running=(
        RunningJob(
            Job("r", preemptible=False, cpus=0.0, memory_gb=0.0), (NodeDevices("n0", (0,)),)
        ),
    ),
    pending=(
        Job("rec", recovering=True, attained_service=1e6, nodes=1, cpus=0.0, memory_gb=0.0),
        Job("big", gpus=6, cpus=0.0, memory_gb=0.0),
    ),
)

# A recovering 2-GPU job placed by the second spare pass on n0's GPU and one of the spare
# s0's, held there by the profile's cycle, and preempted the cycle after by `high`
# (priority 1, one GPU, one node: only n0 serves it) under `default` and `priority` (found
# by hypothesis, 2026-12-07).
SPARE_AND_ORDINARY_PREEMPTED = Snapshot(
    10_000.0,
    (
        Node("n0", 1, cpus=16.0, memory_gb=128.0, path=("leaf0",)),
        Node("s0", 3, cpus=16.0, memory_gb=128.0, path=("leaf0",), spare=True),
    ),
    LEAVES,
    running=(
        RunningJob(
            Job("r", gpus=2, preemptible=False, cpus=0.0, memory_gb=0.0),
            (NodeDevices("s0", (0, 1)),),
        ),
    ),
    pending=(
        Job("rec", gpus=2, recovering=True, cpus=0.0, memory_gb=0.0),
        Job("high", priority=1, nodes=1, cpus=0.0, memory_gb=0.0),
    ),
)

# The profile's cycle reserved devices (blind) for the recovering `p2`, and the second
# spare pass, run after `r1`'s eviction, then placed `p2`: the decision held a reservation
# for a job it starts (found by hypothesis, thorough profile, 2026-12-07; before the
# spare passes' take-back too). A job the second pass places keeps no reservation.
_SMALL = Elastic(batch=32, max_batch=32, samples=(StepSample(1, 1, 32, 0.11),))
RESERVED_THEN_RECOVERED = Snapshot(
    10000.0,
    (
        Node("n0", 6, gpu_type="H100", cpus=16.0, memory_gb=128.0, spare=True),
        Node("n1", 3, gpu_type="H100", cpus=16.0, memory_gb=128.0, schedulable=False, spare=True),
        Node("n2", 6, gpu_type="H100", cpus=16.0, memory_gb=128.0),
    ),
    running=(
        RunningJob(Job("r0", preemptible=False), (NodeDevices("n0", (0,)),)),
        RunningJob(
            Job(
                "r1",
                gpus=8,
                min_gpus=1,
                max_gpus=8,
                elastic=Elastic(batch=256, max_batch=256, samples=(StepSample(8, 2, 256, 0.11),)),
            ),
            (NodeDevices("n0", (1, 2, 3, 4, 5)), NodeDevices("n2", (0, 1, 2))),
        ),
        RunningJob(Job("r3", gpus=0, preemptible=False), (NodeDevices("n0", ()),)),
        RunningJob(
            Job("r6", preemptible=False, min_gpus=1, max_gpus=2, elastic=_SMALL),
            (NodeDevices("n2", (3,)),),
        ),
    ),
    pending=(
        Job("p0", preemptible=False, min_gpus=1, max_gpus=2, elastic=_SMALL, recovering=True),
        Job("p1", preemptible=False, min_gpus=1, max_gpus=2, elastic=_SMALL, recovering=True),
        Job("p2", gpus=3, preemptible=False, recovering=True, nodes=1),
        Job("p3", gpus=0, preemptible=False, recovering=True),
        Job("p4", priority=1, preemptible=False, nodes=1),
    ),
)

# The passes placed the recovering `p0` on n0 alone; `p1` (priority 1) preempted it, and the
# passes ran without it: `p0` then fits only with a spare beside the GPU the profile left
# free, which the spare passes after the profile's cycle must offer it even when that cycle
# evicted nothing (found by hypothesis, thorough profile, 2026-12-07).
LEFT_TO_THE_PROFILE_NEEDS_A_SPARE = Snapshot(
    10000.0,
    (
        Node("n0", 2, gpu_type="H100", cpus=16.0, memory_gb=128.0, path=("leaf0",)),
        Node("n1", 3, gpu_type="H100", cpus=16.0, memory_gb=128.0, path=("leaf0",), spare=True),
        Node(
            "n2",
            1,
            gpu_type="H100",
            cpus=16.0,
            memory_gb=128.0,
            path=("leaf0",),
            schedulable=False,
            spare=True,
        ),
    ),
    topology=Topology(levels=("leaf",), bandwidth_gbps=(("leaf", 100.0),)),
    queues=(Queue("q0", weight=0.5), Queue("q1", weight=0.5)),
    running=(
        RunningJob(Job("r0", queue="q0", gpus=2, preemptible=False), (NodeDevices("n1", (0, 1)),)),
        RunningJob(Job("r1", queue="q0", gpus=0, preemptible=False), (NodeDevices("n0", ()),)),
        RunningJob(Job("r2", queue="q0", gpus=0, preemptible=False), (NodeDevices("n0", ()),)),
        RunningJob(Job("r3", queue="q0", gpus=0, preemptible=False), (NodeDevices("n0", ()),)),
    ),
    pending=(
        Job("p1", queue="q0", priority=1, nodes=1),
        Job("p0", queue="q0", gpus=2, recovering=True),
    ),
)

# No spare involved: the profile places the recovering `p4` first in line, `p3` (priority
# 2) retracts that placement, and `p4` (priority 1), passed over by the preempt action by
# then, preempted `r0` (priority 0) only a cycle later (found by hypothesis, thorough
# profile, 2026-12-07). An evicting action now offers a job it retracted the same chance.
RETRACTED_THEN_PREEMPTS = Snapshot(
    10000.0,
    (
        Node("n0", 5, gpu_type="H100", cpus=16.0, memory_gb=128.0),
        Node("n1", 1, gpu_type="H100", cpus=16.0, memory_gb=128.0, schedulable=False, spare=True),
        Node("n2", 1, gpu_type="H100", cpus=16.0, memory_gb=128.0, schedulable=False, spare=True),
        Node("n3", 1, gpu_type="H100", cpus=16.0, memory_gb=128.0, schedulable=False, spare=True),
        Node("n4", 2, gpu_type="H100", cpus=16.0, memory_gb=128.0),
    ),
    running=(
        RunningJob(Job("r0"), (NodeDevices("n0", (0,)),)),
        RunningJob(Job("r1", gpus=0, preemptible=False), (NodeDevices("n0", ()),)),
    ),
    pending=(
        Job("p0", gpus=0, preemptible=False, recovering=True),
        Job("p1", gpus=0, preemptible=False, recovering=True),
        Job("p2", preemptible=False, recovering=True, nodes=1),
        Job("p3", gpus=2, priority=2, preemptible=False),
        Job("p4", gpus=4, priority=1, recovering=True),
    ),
)
