"""Per-action state (`Cycle.state_of`): one instance per cycle and state class, created on
first use, so `Cycle` carries only what the actions share."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainyard.core import Job, Node, RunningJob, Snapshot, get_profile
from trainyard.core.actions.backfill import BackfillState
from trainyard.core.actions.victims import VictimsState
from trainyard.core.cycle import Cycle, run_actions
from trainyard.core.types import NodeDevices


@dataclass(slots=True)
class _Counter:
    seen: list[str] = field(default_factory=list)


def _snapshot() -> Snapshot:
    running = (
        RunningJob(
            Job("r0", queue="default", gpus=4, expected_duration=600.0),
            (NodeDevices("n0", (0, 1, 2, 3)),),
            started_at=0.0,
        ),
    )
    pending = (Job("big", queue="default", gpus=8), Job("small", queue="default", gpus=1))
    return Snapshot(100.0, (Node("n0", 8),), running=running, pending=pending)


def test_state_of_creates_one_instance_per_cycle_and_class() -> None:
    first = Cycle(_snapshot(), get_profile("drf"))
    mine = first.state_of(_Counter)
    mine.seen.append("x")
    assert first.state_of(_Counter) is mine
    other = Cycle(_snapshot(), get_profile("drf"))
    assert other.state_of(_Counter).seen == []


def test_the_actions_keep_their_caches_in_their_own_states() -> None:
    cycle = Cycle(_snapshot(), get_profile("drf"))
    run_actions(cycle)
    assert cycle.holds  # "big" waits for r0 with a reservation
    st = cycle.state_of(BackfillState)
    assert st.estimates is True and st.running_ends == [(600.0, "r0")]
    pool = cycle.state_of(VictimsState).by_queue  # listed once, by reclaim
    assert pool is not None and [a.job.id for a in pool[0]] == ["r0"]
