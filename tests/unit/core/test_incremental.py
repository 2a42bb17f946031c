"""The incremental arrival path must decide exactly what a full cycle decides."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from trainyard.benchmarks.scheduler import _job, snapshot
from trainyard.core import Decision, Snapshot, apply_decision, run_cycle
from trainyard.core.incremental import Scheduler


def _steady(snap: Snapshot, profile: str) -> Snapshot:
    for _ in range(6):
        decision = run_cycle(snap, profile)
        if decision.is_empty:
            return snap
        snap = apply_decision(snap, decision)
    raise AssertionError("no fixed point within 6 cycles")


def _changes(decision: Decision) -> tuple[object, ...]:
    return (
        sorted((p.job_id, p.nodes, p.action) for p in decision.placements),
        sorted((e.job_id, e.for_job) for e in decision.evictions),
    )


@pytest.mark.parametrize("profile", ["default", "drf", "priority", "las", "fifo"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_arrival_matches_full_cycle(profile: str, seed: int) -> None:
    steady = _steady(snapshot(256, 120, seed=seed), profile)
    sched = Scheduler(steady, profile)
    assert sched.steady
    rng = random.Random(seed)
    for k in range(25):
        queue = rng.choice(("research", "product", "vision", "speech"))
        job = replace(_job(rng, 900_000 + k, queue, steady.now), submit_time=steady.now)
        if k % 5 == 0:
            job = replace(job, priority=2)  # ranks ahead of everything: full-cycle path
        fast = sched.decide_arrival(job)
        full = run_cycle(replace(steady, pending=(*steady.pending, job)), profile)
        assert _changes(fast) == _changes(full), job
        if job.id in full.pending:
            assert fast.pending[job.id].code == full.pending[job.id].code
        sched.forget(job.id)
    # forgetting restores the steady state exactly: a last arrival still agrees
    assert _changes(Scheduler(steady, profile).decision) == ([], [])
