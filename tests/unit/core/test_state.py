"""Unit tests of state.ClusterState: loading from a snapshot, and take/give keeping every
aggregate equal to a recomputation from scratch."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from state_fixtures import aggregates, make_state, recomputed

from trainyard.core import Job
from trainyard.core.resources import bits, mask_of
from trainyard.core.state import Alloc

# -- state.ClusterState -------------------------------------------------------------------


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
