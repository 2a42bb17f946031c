"""Property tests (hypothesis) of one scheduling cycle: every built-in profile keeps the
invariants the core promises (see `checks.check_decision`), also with jobs on drained nodes
or failed devices; decisions are deterministic; work conservation (no waiting job fits into
what is left, except under strict FIFO); reservations honoured.
"""

from __future__ import annotations

from checks import check_decision, check_reservations_honoured, check_work_conserving
from counterexamples import (
    BLIND_BEHIND_RECOVERED,
    GANG_NEEDS_TWO_LEAVES,
    RESERVED_MEMORY,
    RESERVED_THEN_RECOVERED,
    RETRACTED_PLACEMENT_NOT_RETRIED,
    SPENT_RESERVATION_HELD,
)
from hypothesis import example, given, settings
from strategies import PROFILE_NAMES, SETTINGS, contested_snapshots, snapshots

from trainyard.core import Snapshot, run_cycle
from trainyard.core.audit import booking_conflicts


@SETTINGS
@given(snapshots())
@example(RESERVED_THEN_RECOVERED)
def test_every_profile_keeps_the_invariants(snapshot: Snapshot) -> None:
    for name in PROFILE_NAMES:
        decision = run_cycle(snapshot, name)
        check_decision(snapshot, decision, name)


@SETTINGS
@given(snapshots(drained=True))
def test_jobs_on_drained_devices_do_not_corrupt_the_cycle(snapshot: Snapshot) -> None:
    for name in PROFILE_NAMES:
        decision = run_cycle(snapshot, name)
        check_decision(snapshot, decision, name)


@SETTINGS
@given(snapshots())
def test_decisions_are_deterministic(snapshot: Snapshot) -> None:
    for name in PROFILE_NAMES:
        assert run_cycle(snapshot, name) == run_cycle(snapshot, name)


@SETTINGS
@given(snapshots())
@example(GANG_NEEDS_TWO_LEAVES)
@example(SPENT_RESERVATION_HELD)
@example(RETRACTED_PLACEMENT_NOT_RETRIED)
def test_no_job_that_fits_is_left_waiting(snapshot: Snapshot) -> None:
    for name in PROFILE_NAMES:
        check_work_conserving(snapshot, run_cycle(snapshot, name), name)


@SETTINGS
@given(snapshots())
@example(RESERVED_MEMORY)
@example(BLIND_BEHIND_RECOVERED)
def test_reservations_are_honoured(snapshot: Snapshot) -> None:
    for name in PROFILE_NAMES:
        check_reservations_honoured(snapshot, run_cycle(snapshot, name))


@settings(max_examples=300)
@given(contested_snapshots())
def test_no_device_or_node_serves_two_live_jobs(snapshot: Snapshot) -> None:
    """Evicted jobs hold what they have until they stop: a placement on their devices (or on
    CPU and memory only they free) must wait for them (`core.audit`). Before the fix that
    derives `after_evictions` from what a placement uses, this found a leftover device of a
    victim given to a second job that did not wait, typically within 20 examples."""
    for name in PROFILE_NAMES:
        decision = run_cycle(snapshot, name)
        conflicts = booking_conflicts(snapshot, decision)
        assert not conflicts, f"{name}: {conflicts}"
        check_decision(snapshot, decision, name)
