"""The order of pending jobs across queues tied on fair share (`Profile.queue_tie_break`):
declared order, or the queue whose next job asks for fewer GPUs first."""

from __future__ import annotations

import pytest

from trainyard.core import Job, Node, Queue, Snapshot, get_profile, run_cycle
from trainyard.core.cycle import Cycle

QUEUES = (Queue("a", guaranteed=4), Queue("b", guaranteed=4), Queue("c", guaranteed=4))
PENDING = (
    Job("a-big", queue="a", gpus=8, submit_time=1.0),
    Job("a-small", queue="a", gpus=1, submit_time=2.0),
    Job("b-mid", queue="b", gpus=2, submit_time=3.0),
    Job("c-one", queue="c", gpus=1, submit_time=4.0),
)


def _order(tie: str) -> list[str]:
    profile = get_profile("drf").with_overrides(queue_tie_break=tie)
    snap = Snapshot(100.0, (Node("n0", 16),), queues=QUEUES, pending=PENDING)
    cycle = Cycle(snap, profile)
    return [job.id for job in cycle.order]  # nothing allocated: every key stays tied


def test_declared_order_serves_the_queue_listed_first() -> None:
    assert _order("declared") == ["a-big", "a-small", "b-mid", "c-one"]


def test_smaller_serves_the_queue_whose_next_job_is_smaller() -> None:
    # c's next job (1 GPU) before b's (2) before a's (8); once a-big is taken, a's next is 1
    assert _order("smaller") == ["c-one", "b-mid", "a-big", "a-small"]


@pytest.mark.parametrize("tie", ["declared", "smaller"])
def test_the_tie_break_never_overrides_fair_share(tie: str) -> None:
    """A queue below its guarantee is served before a tied pair of satisfied queues."""
    profile = get_profile("drf").with_overrides(queue_tie_break=tie)
    queues = (Queue("a"), Queue("b"), Queue("owed", guaranteed=8))
    pending = (
        Job("a1", queue="a", gpus=1),
        Job("b1", queue="b", gpus=1),
        Job("owed8", queue="owed", gpus=8),
    )
    decision = run_cycle(Snapshot(0.0, (Node("n0", 8),), queues=queues, pending=pending), profile)
    assert [p.job_id for p in decision.placements] == ["owed8"]
