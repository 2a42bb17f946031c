"""Unit tests of the core's building blocks: bit helpers, the layout, the cluster state and
its undo log, queue quotas, registries, profiles and snapshot validation."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainyard.core import (
    PROFILES,
    Job,
    Node,
    NodeDevices,
    Profile,
    Queue,
    RunningJob,
    Snapshot,
    SnapshotError,
    Topology,
    UnknownNameError,
    build_layout,
    get_profile,
    run_cycle,
    validate,
)
from trainyard.core.framework import Registry
from trainyard.core.queues import QueueIndex
from trainyard.core.resources import bits, full_mask, lowest, lowest_n, mask_of
from trainyard.core.state import Alloc, ClusterState
from trainyard.core.statement import Statement
from trainyard.core.topology import Layout

# -- resources ----------------------------------------------------------------------------


def test_bit_helpers_on_known_values() -> None:
    assert mask_of([]) == 0
    assert mask_of([0, 3, 5]) == 0b101001
    assert mask_of([2, 2]) == 0b100
    assert list(bits(0)) == []
    assert list(bits(0b101001)) == [0, 3, 5]
    assert lowest(0b101000) == 3
    assert lowest(1) == 0
    assert lowest_n(0b101101, 0) == 0
    assert lowest_n(0b101101, 2) == 0b101
    assert lowest_n(0b101101, 4) == 0b101101
    assert full_mask(0) == 0
    assert full_mask(1) == 1
    assert full_mask(8) == 0xFF


@settings(deadline=None)
@given(st.sets(st.integers(0, 70)), st.data())
def test_bit_helpers_agree_with_sets(indices: set[int], data: st.DataObject) -> None:
    mask = mask_of(indices)
    assert list(bits(mask)) == sorted(indices)
    assert mask.bit_count() == len(indices)
    if indices:
        assert lowest(mask) == min(indices)
    n = data.draw(st.integers(0, len(indices)))
    assert list(bits(lowest_n(mask, n))) == sorted(indices)[:n]
    size = data.draw(st.integers(0, 70))
    assert list(bits(full_mask(size))) == list(range(size))


# -- topology.build_layout ----------------------------------------------------------------

TWO_LEVELS = Topology(levels=("spine", "leaf"))
LAYOUT_NODES = (
    Node("n0", 8, "H100", 80.0, path=("s0", "l0"), island_size=4),
    Node("n1", 8, "H100", 80.0, path=("s0", "l0"), unavailable=(1,)),
    Node("n2", 4, "A100", 40.0, path=("s0", "l1"), schedulable=False),
    Node("n3", 4, "H100", 80.0, path=("s1", "l0"), island_size=2),  # not the same l0
    Node("n4", 0, path=("s1", "l2")),  # a CPU-only node
)


def test_layout_indexes_nodes_and_device_classes() -> None:
    layout = build_layout(LAYOUT_NODES, TWO_LEVELS)
    assert layout.depth == 2
    assert layout.node_index == {"n0": 0, "n1": 1, "n2": 2, "n3": 3, "n4": 4}
    assert layout.classes == [("H100", 80.0), ("A100", 40.0)]
    assert layout.class_of_node == [0, 0, 1, 0, -1]
    # unschedulable nodes and unavailable devices are not usable
    assert layout.usable_mask == [0xFF, 0xFD, 0, 0xF, 0]
    assert layout.class_capacity == [8 + 7 + 4, 0]
    assert layout.class_node_max == [8, 0]


def test_layout_islands() -> None:
    layout = build_layout(LAYOUT_NODES, TWO_LEVELS)
    assert layout.islands[0] == (0x0F, 0xF0)
    assert layout.islands[1] == (0xFF,)  # island_size 0: the node is one island
    assert layout.islands[2] == (0xF,)
    assert layout.islands[3] == (0b0011, 0b1100)


def test_layout_domains_children_and_capacities() -> None:
    layout = build_layout(LAYOUT_NODES, TWO_LEVELS)
    assert layout.domain_names == [["s0", "s1"], ["s0/l0", "s0/l1", "s1/l0", "s1/l2"]]
    assert layout.domain_of == [[0, 0, 0, 1, 1], [0, 0, 1, 2, 3]]
    assert layout.children == [[[0, 1], [2, 3]], [[0, 1], [2], [3], [4]]]
    assert layout.top == [0, 1]
    # [level][class][domain] -> usable GPUs
    assert layout.domain_capacity == [
        [[15, 4], [0, 0]],
        [[15, 0, 4, 0], [0, 0, 0, 0]],
    ]


def test_layout_level_names_and_acceptable_classes() -> None:
    layout = build_layout(LAYOUT_NODES, TWO_LEVELS)
    assert layout.level_index("spine") == 0
    assert layout.level_index("leaf") == 1
    assert layout.level_index("node") == 2
    assert layout.level_index("island") == 2
    assert layout.level_index("cluster") == -1
    assert layout.level_index("rack") is None
    assert layout.classes_for((), 0.0) == (0, 1)
    assert layout.classes_for(("A100",), 0.0) == (1,)
    assert layout.classes_for(("A100", "H100"), 0.0) == (1, 0)  # the job's preference order
    assert layout.classes_for((), 50.0) == (0,)
    assert layout.classes_for(("A100",), 50.0) == ()
    assert layout.classes_for(("V100",), 0.0) == ()


def test_layout_without_topology_levels() -> None:
    nodes = (Node("a", 2), Node("b", 4, gpu_type="L40"), Node("c", 2))
    layout = build_layout(nodes, Topology())
    assert layout.depth == 0
    assert layout.top == [0, 1, 2]
    assert layout.domain_of == []
    assert layout.children == []
    assert layout.domain_capacity == []
    assert layout.class_of_node == [0, 1, 0]
    assert layout.class_capacity == [4, 4]
    assert layout.class_node_max == [2, 4]


# -- state.ClusterState -------------------------------------------------------------------

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


def test_state_loaded_from_a_snapshot_matches_a_recomputation() -> None:
    state = make_state()
    assert aggregates(state) == recomputed(state)
    assert set(state.allocs) == {"gang", "small", "cpu", "drained", "failed"}
    assert state.free_mask[0] == 0x0F
    assert state.free_mask[1] == 0b01111100  # 0, 1 held; 7 failed
    assert state.free_mask[4] == 0  # drained
    assert state.class_free == [4 + 5 + 4, 3]
    assert state.free_cpu[3] == 32.0 - 8.0
    # queue counters include descendants
    q = state.queues.index
    assert state.queues.gpus[q["team"]] == 7
    assert state.queues.gpus[q["root"]] == 7
    assert state.queues.gpus[q["other"]] == 3


def test_take_and_give_keep_every_aggregate_exact() -> None:
    state = make_state()
    q = state.queues.index
    gang = Alloc(
        Job("new", "team", gpus=5, cpus=10.0, memory_gb=50.0),
        q["team"],
        0,
        [(0, 0b0111, 6.0, 30.0), (3, 0b0011, 4.0, 20.0)],
        0.0,
        True,
    )
    assert gang.gpus == 5
    state.take(gang)
    assert aggregates(state) == recomputed(state)
    assert state.free_mask[0] == 0b1000
    assert state.queues.gpus[q["root"]] == 12
    for job_id in ("gang", "drained", "failed", "new"):
        alloc = state.give(job_id)
        assert alloc.job.id == job_id
        assert job_id not in state.allocs
        assert aggregates(state) == recomputed(state)
    # a device that failed under a running job does not come back when the job leaves
    assert not state.free_mask[1] >> 7 & 1
    assert state.free_mask[4] == 0


@settings(deadline=None, max_examples=60)
@given(st.data())
def test_random_takes_and_gives_keep_every_aggregate_exact(data: st.DataObject) -> None:
    state = make_state()
    layout = state.layout
    nqueues = len(state.queues.queues)
    for step in range(data.draw(st.integers(1, 25))):
        if state.allocs and data.draw(st.booleans()):
            state.give(data.draw(st.sampled_from(sorted(state.allocs))))
        else:
            c = data.draw(st.sampled_from([0, 1]))
            nodes = [i for i in range(len(layout.nodes)) if layout.class_of_node[i] == c]
            parts = []
            for i in data.draw(st.lists(st.sampled_from(nodes), unique=True, max_size=3)):
                free = list(bits(state.free_mask[i]))
                chosen = data.draw(st.lists(st.sampled_from(free), unique=True)) if free else []
                parts.append((i, mask_of(chosen), float(len(chosen)), 2.0 * len(chosen)))
            job = Job(f"j{step}", gpus=sum(m.bit_count() for _i, m, _c, _m in parts))
            queue = data.draw(st.integers(-1, nqueues - 1))  # -1: a reservation hold
            state.take(Alloc(job, queue, c, parts, 0.0, True))
        assert aggregates(state) == recomputed(state)


# -- statement.Statement ------------------------------------------------------------------


def capture(stmt: Statement) -> dict[str, Any]:
    """Everything a rollback must restore (the capacity epoch only ever grows)."""
    state = stmt.state
    return {
        **aggregates(state),
        "allocs": {jid: id(a) for jid, a in state.allocs.items()},
        "placed": {
            jid: (id(p.alloc), p.action, p.after_evictions) for jid, p in stmt.placed.items()
        },
        "evicted": {
            jid: (id(e.alloc), e.action, e.for_job, e.reason) for jid, e in stmt.evicted.items()
        },
    }


def new_alloc(state: ClusterState, job_id: str, node: int, devices: tuple[int, ...]) -> Alloc:
    job = Job(job_id, "team", gpus=len(devices), cpus=2.0 * len(devices))
    return Alloc(
        job, state.queues.index["team"], 0, [(node, mask_of(devices), job.cpus, 0.0)], 0.0, True
    )


def test_rollback_restores_state_and_decision_records_exactly() -> None:
    stmt = Statement(make_state())
    state = stmt.state
    start = capture(stmt)
    cp0 = stmt.checkpoint()
    stmt.evict("gang", "preempt", "a", "needs room")
    stmt.allocate(new_alloc(state, "a", 0, (0, 1, 4, 5)), "preempt", ("gang",))
    stmt.allocate(new_alloc(state, "hold", 3, (0,)), None)  # a reservation hold
    assert set(stmt.placed) == {"a"}
    assert set(stmt.evicted) == {"gang"}
    assert aggregates(state) == recomputed(state)
    middle = capture(stmt)

    cp1 = stmt.checkpoint()  # nested
    stmt.release("a")  # a tentative placement taken back
    stmt.release("hold")
    stmt.evict("small", "reclaim", "b", "quota")
    stmt.allocate(new_alloc(state, "b", 0, (0, 1)), "reclaim", ("small",))
    assert "a" not in stmt.placed
    assert set(stmt.placed) == {"b"}
    assert aggregates(state) == recomputed(state)

    stmt.rollback(cp1)
    assert capture(stmt) == middle
    assert stmt.placed["a"].after_evictions == ("gang",)
    stmt.rollback(cp1)  # rolling back to the same point again changes nothing
    assert capture(stmt) == middle
    stmt.rollback(cp0)
    assert capture(stmt) == start
    assert not stmt.placed and not stmt.evicted
    assert stmt.checkpoint() == cp0


@settings(deadline=None, max_examples=60)
@given(st.data())
def test_random_nested_checkpoints_roll_back_exactly(data: st.DataObject) -> None:
    stmt = Statement(make_state())
    state = stmt.state
    stack = [(stmt.checkpoint(), capture(stmt))]
    for step in range(data.draw(st.integers(1, 30))):
        op = data.draw(st.sampled_from(["checkpoint", "rollback", "allocate", "give"]))
        if op == "checkpoint":
            stack.append((stmt.checkpoint(), capture(stmt)))
        elif op == "rollback":
            cp, expected = stack.pop() if len(stack) > 1 else stack[0]
            stmt.rollback(cp)
            assert capture(stmt) == expected
        elif op == "allocate":
            node = data.draw(st.sampled_from([0, 1, 3]))
            free = list(bits(state.free_mask[node]))
            if not free:
                continue
            devices = tuple(data.draw(st.lists(st.sampled_from(free), min_size=1, unique=True)))
            action = data.draw(st.sampled_from([None, "allocate", "backfill", "preempt"]))
            stmt.allocate(new_alloc(state, f"j{step}", node, devices), action)
        elif state.allocs:
            jid = data.draw(st.sampled_from(sorted(state.allocs)))
            if data.draw(st.booleans()):
                stmt.evict(jid, "preempt", "someone", "test")
            else:
                stmt.release(jid)
        assert aggregates(state) == recomputed(state)
    stmt.rollback(stack[0][0])
    assert capture(stmt) == stack[0][1]


# -- queues.QueueIndex --------------------------------------------------------------------


def queue_index(*queues: Queue, gpus: int = 100, usage_weight: float = 0.5) -> QueueIndex:
    return QueueIndex(tuple(queues), gpus, 1000.0, 10_000.0, usage_weight)


def test_queue_paths_and_counters_include_ancestors() -> None:
    qi = queue_index(
        Queue("root", guaranteed=8, limit=10),
        Queue("team", parent="root", guaranteed=4),
        Queue("leaf", parent="team", guaranteed=2, limit=3),
        Queue("other"),
    )
    root, team, leaf, other = (qi.index[n] for n in ("root", "team", "leaf", "other"))
    assert qi.path[leaf] == (leaf, team, root)
    assert qi.path[other] == (other,)
    assert qi.roots == [root, other]
    assert qi.children[root] == [team]
    qi.add(leaf, 2, 4.0, 8.0)
    assert qi.gpus == [2, 2, 2, 0]
    assert qi.cpus[root] == 4.0 and qi.mem[team] == 8.0
    qi.add(team, 5, 0.0, 0.0)
    assert qi.gpus == [7, 7, 2, 0]


def test_queue_quota_checks_name_the_blocking_queue() -> None:
    qi = queue_index(
        Queue("root", guaranteed=8, limit=10),
        Queue("team", parent="root", guaranteed=4),
        Queue("leaf", parent="team", guaranteed=2, limit=3),
        Queue("other"),
    )
    root, team, leaf, other = (qi.index[n] for n in ("root", "team", "leaf", "other"))
    assert qi.within_limit(leaf, 3) == -1
    assert qi.within_limit(leaf, 4) == leaf  # the queue itself is checked first
    qi.add(team, 7, 0.0, 0.0)
    assert qi.within_limit(leaf, 3) == -1  # root: 7 + 3 <= 10
    assert qi.within_limit(leaf, 4) == leaf
    assert qi.within_limit(team, 3) == -1
    assert qi.within_limit(team, 4) == root
    assert qi.within_limit(other, 1000) == -1  # no limit anywhere on its path
    # guaranteed: non-preemptible jobs must stay inside it on the whole path
    assert qi.within_guaranteed(leaf, 2) == team  # leaf 0 + 2 <= 2, team 7 + 2 > 4
    assert qi.within_guaranteed(root, 1) == -1
    assert qi.within_guaranteed(root, 2) == root
    assert qi.within_guaranteed(other, 1) == other
    # GPUs a queue could lose with every queue on its path staying >= guaranteed
    assert qi.over_guaranteed(root) == 7 - 8
    assert qi.over_guaranteed(team) == min(7 - 4, 7 - 8)
    qi.add(root, 3, 0.0, 0.0)
    assert qi.over_guaranteed(team) == min(7 - 4, 10 - 8)
    assert qi.over_guaranteed(root) == 2


def test_share_key_serves_queues_below_guaranteed_first_by_fill() -> None:
    qi = queue_index(Queue("a", guaranteed=10), Queue("b", guaranteed=4), Queue("c"))
    a, b, c = qi.index["a"], qi.index["b"], qi.index["c"]
    qi.add(a, 5, 0.0, 0.0)
    qi.add(b, 1, 0.0, 0.0)
    assert qi.share_key(a) == (0, 0.5)
    assert qi.share_key(b) == (0, 0.25)
    assert qi.share_key(c)[0] == 1  # guaranteed 0: never below it
    assert sorted([a, b, c], key=qi.share_key) == [b, a, c]
    qi.add(b, 3, 0.0, 0.0)  # b reaches its guarantee: now ordered by share
    assert qi.share_key(b)[0] == 1
    assert sorted([a, b, c], key=qi.share_key) == [a, c, b]


def test_share_key_weights_dominant_share_and_usage() -> None:
    qi = queue_index(
        Queue("heavy", weight=2.0),
        Queue("light"),
        Queue("cpu"),
        Queue("old", usage=0.4),
        usage_weight=0.5,
    )
    heavy, light, cpu, old = (qi.index[n] for n in ("heavy", "light", "cpu", "old"))
    qi.add(heavy, 16, 0.0, 0.0)
    qi.add(light, 10, 0.0, 0.0)
    qi.add(cpu, 0, 300.0, 0.0)  # 30% of the CPUs: CPU is its dominant resource
    assert qi.share_key(heavy) == pytest.approx((1, 0.16 / 2.0))
    assert qi.share_key(light) == pytest.approx((1, 0.1))
    assert qi.share_key(cpu) == pytest.approx((1, 0.3))
    assert qi.share_key(old) == pytest.approx((1, 0.5 * 0.4))
    assert sorted([heavy, light, cpu, old], key=qi.share_key) == [heavy, light, old, cpu]


# -- framework registries and profiles ----------------------------------------------------


def test_registry_error_suggests_the_close_name_and_lists_known_names() -> None:
    reg: Registry[int] = Registry("widget")
    reg.register("alpha", 1)
    reg.register("beta", 2)
    assert reg.get("beta") == 2
    assert "alpha" in reg and "gamma" not in reg
    assert reg.names() == ["alpha", "beta"]
    with pytest.raises(UnknownNameError) as err:
        reg.get("alpah")
    message = str(err.value)
    assert "unknown widget 'alpah'" in message
    assert "did you mean 'alpha'?" in message
    assert "known: alpha, beta" in message
    assert isinstance(err.value, KeyError)
    with pytest.raises(UnknownNameError) as far:
        reg.get("zzz")
    assert "did you mean" not in str(far.value)
    assert "known: alpha, beta" in str(far.value)
    with pytest.raises(ValueError, match="registered twice"):
        reg.register("alpha", 3)


def test_profile_lookup_suggests_the_close_profile() -> None:
    with pytest.raises(UnknownNameError, match="did you mean 'default'") as err:
        get_profile("defualt")
    for name in PROFILES.names():
        assert name in str(err.value)
    with pytest.raises(UnknownNameError):
        run_cycle(Snapshot(0.0, (Node("n", 1),)), "no-such-profile")


def test_builtin_profiles_validate() -> None:
    assert {"default", "drf", "fifo", "las", "priority"} <= set(PROFILES.names())
    for name in PROFILES.names():
        get_profile(name).validate()


@pytest.mark.parametrize(
    ("changes", "error", "match"),
    [
        ({"actions": ("allocate", "bakfill")}, UnknownNameError, "did you mean 'backfill'"),
        ({"job_order": "lifo"}, UnknownNameError, "unknown job order 'lifo'"),
        ({"queue_order": "drff"}, UnknownNameError, "did you mean 'drf'"),
        ({"scorers": (("topologgy", 1.0),)}, UnknownNameError, "did you mean 'topology'"),
        ({"scorers": (("binpack", -1.0),)}, ValueError, "binpack weight must be >= 0"),
        ({"max_reservations": -1}, ValueError, "max_reservations must be >= 0"),
        ({"las_thresholds": (10.0, 5.0)}, ValueError, "las_thresholds must be increasing"),
    ],
)
def test_profile_validate_rejects_bad_names_and_knobs(
    changes: dict[str, Any], error: type[Exception], match: str
) -> None:
    profile = Profile(name="custom")
    profile.validate()
    with pytest.raises(error, match=match):
        profile.with_overrides(**changes)
    bad = Profile(name="custom", **changes)
    with pytest.raises(error, match=match):
        bad.validate()
    with pytest.raises(error, match=match):
        run_cycle(Snapshot(0.0, (Node("n", 1),)), bad)


# -- snapshot.validate --------------------------------------------------------------------


def snapshot_error(snap: Snapshot) -> SnapshotError:
    with pytest.raises(SnapshotError) as err:
        validate(snap)
    return err.value


def expect_error(snap: Snapshot, field: str, *words: str) -> None:
    """`validate` and `run_cycle` both reject `snap`, naming `field` and saying `words`."""
    for check in (validate, lambda s: run_cycle(s, "default")):
        with pytest.raises(SnapshotError) as err:
            check(snap)
        assert err.value.field == field, str(err.value)
        assert str(err.value).startswith(f"{field}: ")
        for word in words:
            assert word in err.value.message, err.value.message


def test_validate_accepts_a_consistent_snapshot() -> None:
    validate(Snapshot(0.0, STATE_NODES, TWO_LEVELS, STATE_QUEUES, STATE_RUNNING))


def test_validate_names_a_duplicate_node() -> None:
    expect_error(Snapshot(0.0, (Node("a", 1), Node("a", 2))), "nodes[1].name", "duplicate", "a")


def test_validate_names_a_path_of_the_wrong_length() -> None:
    snap = Snapshot(0.0, (Node("a", 1, path=("s0",)),), TWO_LEVELS)
    expect_error(snap, "nodes[0].path", "spine", "leaf")
    expect_error(Snapshot(0.0, (Node("a", 1, path=("x",)),)), "nodes[0].path")


def test_validate_names_bad_node_fields() -> None:
    expect_error(Snapshot(0.0, (Node("a", 65),)), "nodes[0].gpus")
    expect_error(Snapshot(0.0, (Node("a", 6, island_size=4),)), "nodes[0].island_size")
    expect_error(Snapshot(0.0, (Node("a", 4, unavailable=(4,)),)), "nodes[0].unavailable")


def test_validate_names_double_booked_running_devices() -> None:
    running = (
        RunningJob(Job("r0", gpus=2), (NodeDevices("a", (0, 1)),)),
        RunningJob(Job("r1", gpus=2), (NodeDevices("b", (0,)), NodeDevices("a", (1,)))),
    )
    snap = Snapshot(0.0, (Node("a", 4), Node("b", 4)), running=running)
    expect_error(snap, "running[1].placement[1].devices", "a:1", "already held")


def test_validate_names_bad_running_placements() -> None:
    nodes = (Node("a", 4),)
    wrong_count = (RunningJob(Job("r", gpus=2), (NodeDevices("a", (0,)),)),)
    expect_error(Snapshot(0.0, nodes, running=wrong_count), "running[0].placement", "1", "2")
    off_node = (RunningJob(Job("r", gpus=1), (NodeDevices("a", (4,)),)),)
    expect_error(Snapshot(0.0, nodes, running=off_node), "running[0].placement[0].devices")
    unknown = (RunningJob(Job("r", gpus=1), (NodeDevices("z", (0,)),)),)
    expect_error(Snapshot(0.0, nodes, running=unknown), "running[0].placement[0].node", "z")


def test_validate_names_an_unknown_queue() -> None:
    queues = (Queue("research"), Queue("prod"))
    snap = Snapshot(0.0, (Node("a", 4),), queues=queues, pending=(Job("j", queue="resarch"),))
    expect_error(snap, "pending[0].queue", "resarch", "prod, research")
    running = (RunningJob(Job("r", queue="nope"), (NodeDevices("a", (0,)),)),)
    snap = Snapshot(0.0, (Node("a", 4),), queues=queues, running=running)
    expect_error(snap, "running[0].job.queue", "nope")
    # without queues, only the implicit `default` exists
    expect_error(Snapshot(0.0, (Node("a", 4),), pending=(Job("j", queue="x"),)), "pending[0].queue")


def test_validate_names_a_queue_cycle_and_an_unknown_parent() -> None:
    cycle = (Queue("a", parent="c"), Queue("b", parent="a"), Queue("c", parent="b"))
    expect_error(Snapshot(0.0, (Node("n", 1),), queues=cycle), "queues[0].parent", "cycle")
    selfish = (Queue("a", parent="a"),)
    expect_error(Snapshot(0.0, (Node("n", 1),), queues=selfish), "queues[0].parent", "cycle")
    orphan = (Queue("a"), Queue("b", parent="x"))
    expect_error(Snapshot(0.0, (Node("n", 1),), queues=orphan), "queues[1].parent", "'x'")


def test_validate_names_bad_queue_fields() -> None:
    def queues(*qs: Queue) -> Snapshot:
        return Snapshot(0.0, (Node("n", 1),), queues=qs)

    expect_error(queues(Queue("a"), Queue("a")), "queues[1].name", "duplicate")
    expect_error(queues(Queue("a", guaranteed=4, limit=2)), "queues[0].limit")
    expect_error(queues(Queue("a", weight=0.0)), "queues[0].weight")
    expect_error(queues(Queue("a", guaranteed=-1)), "queues[0].guaranteed")


def test_validate_names_a_bad_topology_level() -> None:
    snap = Snapshot(
        0.0, (Node("a", 4, path=("s", "l")),), TWO_LEVELS, pending=(Job("j", topology="rack"),)
    )
    expect_error(snap, "pending[0].topology", "rack", "spine", "leaf", "island", "cluster")
    for level in ("island", "node", "spine", "leaf", "cluster"):
        validate(replace_pending(snap, Job("j", topology=level)))


def replace_pending(snap: Snapshot, *jobs: Job) -> Snapshot:
    return Snapshot(snap.now, snap.nodes, snap.topology, snap.queues, snap.running, jobs)


def test_validate_names_bad_job_fields() -> None:
    nodes = (Node("a", 4),)
    expect_error(Snapshot(0.0, nodes, pending=(Job("j", gpus=-1),)), "pending[0].gpus")
    expect_error(Snapshot(0.0, nodes, pending=(Job(""),)), "pending[0].id")
    expect_error(Snapshot(0.0, nodes, pending=(Job("j", cpus=-1.0),)), "pending[0].cpus")
    running = (RunningJob(Job("j"), (NodeDevices("a", (0,)),)),)
    expect_error(
        Snapshot(0.0, nodes, running=running, pending=(Job("j"),)), "pending[0].id", "duplicate"
    )
