"""The smallest inputs that broke the scheduling core's properties, pinned as plain tests:
regressions that pass now, then open core bugs, each test stating the correct behaviour.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from checks import (
    check_decision,
    check_reservations_honoured,
    check_work_conserving,
    cycles_until_quiet,
)
from counterexamples import (
    BLIND_BEHIND_RECOVERED,
    CPU_JOB_BLOCKS_PREEMPTION,
    EVICTION_FREES_QUOTA,
    GANG_NEEDS_TWO_LEAVES,
    OWN_RESERVATION_BLOCKS_SETTLE,
    RECOVERED_THEN_PREEMPTED,
    RESERVED_MEMORY,
    RESERVED_QUOTA,
    RESERVED_THEN_RECOVERED,
    RETRACTED_PLACEMENT_NOT_RETRIED,
    SPARE_AND_ORDINARY_PREEMPTED,
    SPENT_RESERVATION_HELD,
)
from strategies import NOW, PROFILE_NAMES

from trainyard.core import (
    Decision,
    Job,
    Node,
    NodeDevices,
    Queue,
    RunningJob,
    Snapshot,
    apply_decision,
    run_cycle,
)

# -- regressions --------------------------------------------------------------------------


def placed(decision: Decision) -> dict[str, tuple[NodeDevices, ...]]:
    return {p.job_id: p.nodes for p in decision.placements}


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_a_gang_spans_nodes_of_a_cluster_without_topology(profile: str) -> None:
    snap = Snapshot(NOW, (Node("n0", 4), Node("n1", 4)), pending=(Job("a", gpus=8),))
    decision = run_cycle(snap, profile)
    check_decision(snap, decision, profile)
    assert placed(decision) == {
        "a": (NodeDevices("n0", (0, 1, 2, 3)), NodeDevices("n1", (0, 1, 2, 3)))
    }


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_a_job_on_a_failed_device_is_neither_double_counted_nor_freed(profile: str) -> None:
    """A GPU fails (unavailable) under a running job: the three others are free, and evicting
    that job must not make the failed device usable."""
    snap = Snapshot(
        NOW,
        (Node("n0", 4, unavailable=(0,)),),
        running=(RunningJob(Job("r"), (NodeDevices("n0", (0,)),)),),
        pending=(Job("p", gpus=3, priority=9), Job("q", priority=8)),
    )
    decision = run_cycle(snap, profile)
    check_decision(snap, decision, profile)
    assert placed(decision)["p"] == (NodeDevices("n0", (1, 2, 3)),)
    assert not decision.evictions
    assert decision.pending["q"].code in ("capacity", "order")


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_jobs_on_a_drained_node_do_not_shrink_the_rest_of_the_cluster(profile: str) -> None:
    snap = Snapshot(
        NOW,
        (Node("n0", 4, schedulable=False), Node("n1", 4)),
        running=(RunningJob(Job("r"), (NodeDevices("n0", (0,)),)),),
        pending=(Job("p", gpus=4, priority=9),),
    )
    decision = run_cycle(snap, profile)
    check_decision(snap, decision, profile)
    assert placed(decision) == {"p": (NodeDevices("n1", (0, 1, 2, 3)),)}
    assert not decision.evictions


@pytest.mark.parametrize("profile", [p for p in PROFILE_NAMES if p != "fifo"])
def test_a_job_too_hungry_for_cpus_does_not_hide_a_modest_one(profile: str) -> None:
    """Failed fits are cached per job shape; the CPU demand is part of the shape."""
    snap = Snapshot(
        NOW,
        (Node("n0", 8, cpus=64.0),),
        pending=(Job("hungry", gpus=4, cpus=100.0, priority=5), Job("modest", gpus=4, cpus=1.0)),
    )
    decision = run_cycle(snap, profile)
    check_decision(snap, decision, profile)
    assert set(placed(decision)) == {"modest"}
    assert decision.pending["hungry"].code == "resources"


def test_a_reservation_does_not_keep_its_own_job_from_preempting() -> None:
    snap = Snapshot(
        1000.0,
        (Node("n0", 4),),
        running=(
            RunningJob(Job("low", gpus=2, expected_duration=3600.0), (NodeDevices("n0", (0, 1)),)),
            RunningJob(
                Job("other", priority=5, expected_duration=7200.0), (NodeDevices("n0", (2,)),)
            ),
        ),
        pending=(Job("high", gpus=3, priority=1),),
    )
    decision = run_cycle(snap, "default")
    check_decision(snap, decision, "default")
    assert placed(decision) == {"high": (NodeDevices("n0", (0, 1, 3)),)}
    assert [e.job_id for e in decision.evictions] == ["low"]


def test_strict_stability_fails_legitimately_when_a_victim_fits_elsewhere() -> None:
    """Why stability is stated modulo victims: `big` needs a GPU of node a (node b has CPUs
    for only three of its GPUs) and evicts `low` for it; `low` itself needs no CPUs and fits
    in b's last GPU, so the next cycle starts it there; the one after changes nothing."""
    snap = replace(CPU_JOB_BLOCKS_PREEMPTION, pending=CPU_JOB_BLOCKS_PREEMPTION.pending[:1])
    decisions = cycles_until_quiet(snap, "priority", 5)
    assert [sorted(placed(d)) for d in decisions] == [["big"], ["low"], []]
    assert [[e.job_id for e in d.evictions] for d in decisions] == [["low"], [], []]
    assert placed(decisions[1])["low"] == (NodeDevices("b", (3,)),)


# -- open core bugs (each test states the correct behaviour) -------------------------------


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_a_gang_spans_leaves_when_the_fullest_leaf_lacks_memory(profile: str) -> None:
    """placement._fill picks domains by free GPUs alone; when the chosen leaf lacks memory it
    gives up instead of combining leaves, so a job that fits stays pending ("resources")."""
    decision = run_cycle(GANG_NEEDS_TWO_LEAVES, profile)
    check_decision(GANG_NEEDS_TWO_LEAVES, decision, profile)
    assert placed(decision) == {
        "gang": (NodeDevices("n1", (0,)), NodeDevices("n0", (0,)))
    } or placed(decision) == {"gang": (NodeDevices("n0", (0,)), NodeDevices("n1", (0,)))}


def test_a_cpu_only_job_placed_this_cycle_does_not_block_preemption() -> None:
    """Without `cpu`, `big` preempts `low` at once. With it, the victim search at cluster
    level (shortfall 0 GPUs) picks `cpu`, a 0-GPU job placed this cycle, as the cheapest
    victim, the plan fails, and `big` waits a cycle (then `cpu` is running, has class -1 and
    is no longer a candidate)."""
    decision = run_cycle(CPU_JOB_BLOCKS_PREEMPTION, "default")
    check_decision(CPU_JOB_BLOCKS_PREEMPTION, decision, "default")
    assert set(placed(decision)) == {"big", "cpu"}
    assert [e.job_id for e in decision.evictions] == ["low"]


def test_evictions_that_free_quota_let_waiting_jobs_start_in_the_same_cycle() -> None:
    """cycle._settle skips jobs whose status is "quota", although the evictions of the cycle
    lowered their queue's usage: `p2` only starts one cycle later."""
    decision = run_cycle(EVICTION_FREES_QUOTA, "priority")
    check_decision(EVICTION_FREES_QUOTA, decision, "priority")
    assert [e.job_id for e in decision.evictions] == ["r1"]
    assert set(placed(decision)) == {"p0", "p2"}


def test_a_blind_reservation_does_not_wait_behind_a_job_recovering_now() -> None:
    """The recovering job the spare passes placed runs in the snapshot the profile's cycle
    sees, started now; a blind reservation behind it would hold a device this decision
    gives away (found by the property test of reservations)."""
    decision = run_cycle(BLIND_BEHIND_RECOVERED, "default")
    check_decision(BLIND_BEHIND_RECOVERED, decision, "default")
    assert [p.job_id for p in decision.placements] == ["p0", "p1"]
    assert not decision.reservations
    check_reservations_honoured(BLIND_BEHIND_RECOVERED, decision)


@pytest.mark.parametrize(
    ("snapshot", "profile", "winner"),
    [
        (RECOVERED_THEN_PREEMPTED, "tiresias", "big"),
        (SPARE_AND_ORDINARY_PREEMPTED, "default", "high"),
        (SPARE_AND_ORDINARY_PREEMPTED, "priority", "high"),
    ],
)
def test_a_recovering_job_the_profile_preempts_is_not_started(
    snapshot: Snapshot, profile: str, winner: str
) -> None:
    """The spare passes placed `rec`; the profile's cycle held it, and the cycle after
    preempted it for `winner` (found by the stability property). The profile's cycle may
    now preempt it, and the passes then run without it: `winner` starts, nothing is
    evicted, `rec` waits with its reason, and the next cycle changes nothing."""
    decision = run_cycle(snapshot, profile)
    check_decision(snapshot, decision, profile)
    assert [p.job_id for p in decision.placements] == [winner]
    assert not decision.evictions
    assert decision.pending["rec"].code == "capacity"
    assert run_cycle(apply_decision(snapshot, decision), profile).is_empty


def test_a_job_the_second_spare_pass_places_keeps_no_reservation() -> None:
    """The profile's cycle reserved devices for the recovering `p2`; the spare passes, run
    again after the cycle's eviction of `r1`, placed it (found by the invariants property
    with 1,000 examples)."""
    decision = run_cycle(RESERVED_THEN_RECOVERED, "default")
    check_decision(RESERVED_THEN_RECOVERED, decision, "default")
    assert "p2" in placed(decision)
    assert all(r.job_id != "p2" for r in decision.reservations)


def test_backfill_does_not_give_away_the_memory_a_reservation_needs() -> None:
    decision = run_cycle(RESERVED_MEMORY, "default")
    check_decision(RESERVED_MEMORY, decision, "default")
    assert [r.job_id for r in decision.reservations] == ["head"]
    check_reservations_honoured(RESERVED_MEMORY, decision)


def test_backfill_in_the_reserved_jobs_queue_does_not_cancel_its_reservation() -> None:
    """`small` (same queue as `head`) is backfilled outside the reservation: fine at t=1000,
    when `r` has ended. But it raises q to 3 GPUs now, so the next cycle finds `head`
    quota-blocked (3 + 4 > 6), gives it no reservation, and starts `small2` on a reserved
    device: backfill ended up delaying the reserved job."""
    first = run_cycle(RESERVED_QUOTA, "default")
    check_decision(RESERVED_QUOTA, first, "default")
    assert [r.job_id for r in first.reservations] == ["head"]
    check_reservations_honoured(RESERVED_QUOTA, first)
    applied = apply_decision(RESERVED_QUOTA, first)
    second = run_cycle(applied, "default")
    check_decision(applied, second, "default")
    assert [r.job_id for r in second.reservations] == ["head"]
    assert not second.placements, f"placed {sorted(placed(second))} on the reservation"


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_a_cpu_only_non_preemptible_job_is_not_held_by_the_gpu_guarantee(profile: str) -> None:
    """A non-preemptible job must fit in its queue's guaranteed GPUs because it could never
    be reclaimed; a job with 0 GPUs takes none, yet it waits while the queue borrows GPUs
    ("2/0 GPUs; job needs 0")."""
    snap = Snapshot(
        NOW,
        (Node("a", 4),),
        queues=(Queue("q"),),
        running=(RunningJob(Job("r", queue="q", gpus=2), (NodeDevices("a", (0, 1)),)),),
        pending=(Job("cpu", queue="q", gpus=0, preemptible=False),),
    )
    decision = run_cycle(snap, profile)
    check_decision(snap, decision, profile)
    assert placed(decision) == {"cpu": (NodeDevices("a", ()),)}


def test_a_job_is_not_kept_from_freed_room_by_its_own_reservation() -> None:
    decision = run_cycle(OWN_RESERVATION_BLOCKS_SETTLE, "default")
    check_decision(OWN_RESERVATION_BLOCKS_SETTLE, decision, "default")
    assert [e.job_id for e in decision.evictions] == ["r0"]
    assert {"p0", "p3"} <= set(placed(decision))


def test_a_placed_job_holds_no_reservation() -> None:
    """Whatever action places a job that has a reservation (here preempt, in the room its
    evictions left over), the reservation is spent: the devices it held go to others."""
    decision = run_cycle(SPENT_RESERVATION_HELD, "default")
    check_decision(SPENT_RESERVATION_HELD, decision, "default")
    check_work_conserving(SPENT_RESERVATION_HELD, decision, "default")
    assert {"p0", "p3", "p5"} <= set(placed(decision))
    assert not decision.reservations


def test_a_retracted_placement_is_tried_again() -> None:
    """A placement of this cycle that a later action takes back (reclaim for a guarantee) is
    offered what is left, as an evicted job's freed room is."""
    snap = RETRACTED_PLACEMENT_NOT_RETRIED
    for name in ("drf", "default"):
        decision = run_cycle(snap, name)
        check_decision(snap, decision, name)
        check_work_conserving(snap, decision, name)
    assert set(placed(run_cycle(snap, "drf"))) == {"p0", "p5", "p6"}
