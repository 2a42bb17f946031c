"""Property tests (hypothesis) of repeated scheduling cycles: stability of the applied
decision (only victims move), repeated cycles reach a fixed point with no job evicted twice,
and no preemption ping-pong over 100 cycles.
"""

from __future__ import annotations

from collections import Counter

from checks import check_decision, cycles_until_quiet
from counterexamples import (
    CPU_JOB_BLOCKS_PREEMPTION,
    EVICTION_FREES_QUOTA,
    LEFT_TO_THE_PROFILE_NEEDS_A_SPARE,
    RECOVERED_THEN_PREEMPTED,
    RETRACTED_THEN_PREEMPTS,
    SPARE_AND_ORDINARY_PREEMPTED,
)
from hypothesis import example, given, settings
from strategies import PROFILE_NAMES, SETTINGS, snapshots

from trainyard.core import Snapshot, apply_decision, run_cycle


@SETTINGS
@given(snapshots(elastic=False))  # elastic jobs: a second cycle may place more (open)
@example(CPU_JOB_BLOCKS_PREEMPTION)
@example(EVICTION_FREES_QUOTA)
@example(RECOVERED_THEN_PREEMPTED)
@example(SPARE_AND_ORDINARY_PREEMPTED)
@example(LEFT_TO_THE_PROFILE_NEEDS_A_SPARE)
@example(RETRACTED_THEN_PREEMPTS)
def test_a_cycle_on_its_applied_decision_only_moves_victims(snapshot: Snapshot) -> None:
    """Stability. Strictly "the next cycle changes nothing" cannot hold: a victim evicted for
    a gang may fit elsewhere (the preemptor needed a particular node or domain), and a victim
    may itself reclaim or preempt (strictly lower priority or quota, so chains end). What must
    hold: after a decision without evictions the next cycle is empty, and after one with
    evictions the next cycle only places those victims, unless it evicts again. Reservations
    are left out: a job started this cycle moves the next reservation legitimately."""
    for name in PROFILE_NAMES:
        first = run_cycle(snapshot, name)
        applied = apply_decision(snapshot, first)
        second = run_cycle(applied, name)
        check_decision(applied, second, name)
        if first.reservations:
            continue
        victims = {e.job_id for e in first.evictions}
        if not victims:
            assert second.is_empty, (
                f"{name}: second cycle not empty: placed {[p.job_id for p in second.placements]}"
                f", evicted {[e.job_id for e in second.evictions]}"
            )
        elif not second.evictions:
            moved = {p.job_id for p in second.placements} - victims
            assert not moved, f"{name}: second cycle placed non-victims {sorted(moved)}"


@SETTINGS
@given(snapshots())
def test_cycles_reach_a_fixed_point_without_double_eviction(snapshot: Snapshot) -> None:
    """With time standing still, repeated cycles on the applied decisions stop changing
    anything, and no job is evicted twice on the way. (Each non-empty cycle places or evicts;
    with at most one eviction per job and one placement per pending spell, 3 cycles per job
    bound the way to the fixed point.)"""
    jobs = len(snapshot.running) + len(snapshot.pending)
    limit = 3 * jobs + 2
    for name in PROFILE_NAMES:
        decisions = cycles_until_quiet(snapshot, name, limit)
        assert decisions[-1].is_empty, f"{name}: no fixed point after {limit} cycles"
        evicted = Counter(e.job_id for d in decisions for e in d.evictions)
        twice = sorted(j for j, k in evicted.items() if k > 1)
        assert not twice, f"{name}: evicted more than once: {twice}"


@settings(
    deadline=None,
    report_multiple_bugs=False,
    max_examples=max(10, settings.default.max_examples // 2),
)
@given(snapshots())
def test_no_preemption_ping_pong_over_100_cycles(snapshot: Snapshot) -> None:
    """100 cycles, each on the applied previous decision, ten minutes apart, no new jobs: no
    job is evicted twice (unless a job whose `min_runtime` ended meanwhile made a new plan
    possible: found by hypothesis, on the code before wave 2 too), and never is a job
    evicted for one that it was itself evicted for.

    Shortcut: once every running job is past its `min_runtime` (nothing becomes evictable any
    more) and three cycles in a row changed nothing, the remaining cycles would too."""
    for name in PROFILE_NAMES:
        state = snapshot
        evicted: Counter[str] = Counter()
        pairs: set[tuple[str, str]] = set()
        quiet = 0
        first_at: dict[str, float] = {}
        for _ in range(100):
            decision = run_cycle(state, name)
            check_decision(state, decision, name)
            ends = {r.job.id: r.started_at + r.job.min_runtime for r in state.running}
            for e in decision.evictions:
                assert (e.for_job, e.job_id) not in pairs, (
                    f"{name}: ping-pong: {e.job_id} evicted for {e.for_job} and vice versa"
                )
                pairs.add((e.job_id, e.for_job))
                evicted[e.job_id] += 1
                if evicted[e.job_id] > 1:
                    # Allowed only when the world changed: a victim of the same plan became
                    # evictable (its min_runtime ended) after this job's first eviction.
                    plan = [v.job_id for v in decision.evictions if v.for_job == e.for_job]
                    newly = [v for v in plan if first_at[e.job_id] < ends[v] <= state.now]
                    assert newly, f"{name}: {e.job_id} evicted twice"
                first_at.setdefault(e.job_id, state.now)
            state = apply_decision(state, decision, now=state.now + 600.0)
            quiet = quiet + 1 if decision.is_empty else 0
            settled = all(state.now - r.started_at >= r.job.min_runtime for r in state.running)
            if quiet >= 3 and settled:
                break
