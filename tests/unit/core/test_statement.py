"""Unit tests of statement.Statement, the undo log: checkpoints and (nested) rollbacks restore
the cluster state and the decision records exactly."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from state_fixtures import aggregates, make_state, recomputed

from trainyard.core import Job
from trainyard.core.resources import bits, mask_of
from trainyard.core.state import Alloc, ClusterState
from trainyard.core.statement import Statement

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


def test_a_job_resized_again_restarts_once_and_rolls_back_exactly() -> None:
    """`resize` of a job resized earlier in the cycle moves it once more; its record keeps
    what it held before the cycle and joins the reasons, and rollbacks restore each step."""
    stmt = Statement(make_state())
    state = stmt.state
    start = capture(stmt)
    held = state.allocs["gang"]
    stmt.resize("gang", "shrunk 6 -> 4: job w needs the GPUs")
    stmt.allocate(new_alloc(state, "gang", 0, (0, 1, 4, 5)), "resize")
    middle = capture(stmt)
    cp = stmt.checkpoint()
    old = stmt.resize("gang", "shrunk 4 -> 2: rebalanced to near")
    assert old.gpus == 4 and "gang" not in state.allocs
    stmt.allocate(new_alloc(state, "gang", 0, (0, 1)), "resize")
    assert aggregates(state) == recomputed(state)
    record = stmt.resized["gang"]
    assert record.alloc is held  # it restarts from what it held before the cycle
    assert record.reason == (
        "shrunk 6 -> 4: job w needs the GPUs; then shrunk 4 -> 2: rebalanced to near"
    )
    assert stmt.placed["gang"].alloc.gpus == 2
    stmt.rollback(cp)
    assert capture(stmt) == middle
    assert stmt.resized["gang"].reason == "shrunk 6 -> 4: job w needs the GPUs"
    assert stmt.placed["gang"].alloc.gpus == 4
    stmt.rollback(0)
    assert capture(stmt) == start
    assert not stmt.resized and state.allocs["gang"] is held
