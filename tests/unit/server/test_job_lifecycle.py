"""The job state machine on both databases: every legal edge, illegal ones, restarts with
back-off, node loss, preemption, event order, rollback and the optimistic lock."""

from __future__ import annotations

import itertools

import pytest
from server_factories import PLACEMENT, World
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session
from sqlalchemy.orm.exc import StaleDataError

from trainyard.server.db import Job, JobEvent, JobState, make_session_factory
from trainyard.server.lifecycle import (
    EDGES,
    IllegalTransition,
    RetryPolicy,
    restarts_left,
    transition,
)

S = JobState
LEGAL = sorted((a, b) for a, targets in EDGES.items() for b in targets)
ILLEGAL = sorted((a, b) for a in S for b in S if b not in EDGES[a])


def _events(session: Session, job: Job) -> list[tuple[JobState | None, JobState, str]]:
    rows = session.scalars(select(JobEvent).where(JobEvent.job_id == job.id).order_by(JobEvent.id))
    return [(e.from_state, e.to_state, e.reason) for e in rows]


def test_the_graph_is_the_documented_one() -> None:
    assert len(LEGAL) == 21  # RESIZING -> SUCCEEDED: it finished before its resize stopped it
    assert EDGES[S.SUCCEEDED] == EDGES[S.CANCELLED] == frozenset()
    assert EDGES[S.PENDING] == {S.STARTING, S.CANCELLED}
    assert EDGES[S.FAILED] == {S.PENDING}


@pytest.mark.parametrize(("src", "dst"), LEGAL, ids=lambda s: s.value)
def test_every_legal_transition(session: Session, world: World, src: S, dst: S) -> None:
    job = world.job_in(session, src, now=1000.0)
    if dst == S.STARTING and src == S.PENDING:
        job.placement = list(PLACEMENT)
    event = transition(session, job, dst, reason="test", now=1100.0, details={"k": 1})
    session.commit()
    session.expire_all()
    assert job.state is dst
    assert job.state_changed_at == 1100.0
    assert (event.from_state, event.to_state, event.time, event.details["k"]) == (
        src, dst, 1100.0, 1,
    )  # fmt: skip
    assert _events(session, job)[-1] == (src, dst, "test")
    if dst in (S.SUCCEEDED, S.FAILED, S.CANCELLED):
        assert job.finished_at == 1100.0
    if dst == S.PENDING:
        assert job.placement is None and job.finished_at is None
    if dst == S.STARTING:
        assert job.attempt == (2 if src == S.RESIZING else 1)


def test_every_illegal_transition_raises_naming_both_states(session: Session, world: World) -> None:
    for src, dst in ILLEGAL:
        job = world.job_in(session, src)
        job.placement = list(PLACEMENT)
        with pytest.raises(IllegalTransition) as info:
            transition(session, job, dst, reason="test", now=2000.0)
        assert f"{src.value} -> {dst.value}" in str(info.value)
        assert (info.value.from_state, info.value.to_state) == (src, dst)
        assert job.state is src
    session.commit()
    assert session.scalar(select(func.count()).select_from(JobEvent).where(
        JobEvent.reason == "test")) == 0  # fmt: skip


@pytest.mark.parametrize(
    ("src", "dst", "message"),
    [
        (S.PENDING, S.RUNNING, "from PENDING the job may go to CANCELLED, STARTING"),
        (S.SUCCEEDED, S.RUNNING, "may go to nothing"),
        (S.CANCELLED, S.PENDING, "may go to nothing"),
        (S.RUNNING, S.STARTING, "illegal transition RUNNING -> STARTING"),
    ],
)
def test_illegal_messages(session: Session, world: World, src: S, dst: S, message: str) -> None:
    job = world.job_in(session, src)
    with pytest.raises(IllegalTransition, match=message):
        transition(session, job, dst, reason="x", now=1.0)


def test_start_needs_a_placement_and_a_reason(session: Session, world: World) -> None:
    job = world.job(session)
    with pytest.raises(IllegalTransition, match="placement"):
        transition(session, job, S.STARTING, reason="scheduled", now=1.0)
    job.placement = list(PLACEMENT)
    with pytest.raises(IllegalTransition, match="reason"):
        transition(session, job, S.STARTING, reason="", now=1.0)


def test_a_successful_run(session: Session, world: World) -> None:
    job = world.job(session, now=1000.0, gpus=4)
    job.placement = list(PLACEMENT)
    transition(session, job, S.STARTING, reason="scheduled", now=1001.0)
    transition(session, job, S.RUNNING, reason="workers started", now=1003.0)
    transition(session, job, S.SUCCEEDED, reason="exited", now=1103.0, details={"exit_code": 0})
    session.commit()
    assert (job.attempt, job.started_at, job.finished_at, job.exit_code) == (1, 1003.0, 1103.0, 0)
    assert job.attained_service == pytest.approx(400.0)  # 4 GPUs x 100 s
    assert _events(session, job) == [
        (None, S.PENDING, "submitted"),
        (S.PENDING, S.STARTING, "scheduled"),
        (S.STARTING, S.RUNNING, "workers started"),
        (S.RUNNING, S.SUCCEEDED, "exited"),
    ]


def test_back_off_arithmetic() -> None:
    policy = RetryPolicy(base_s=10.0, cap_s=600.0)
    assert [policy.delay(n) for n in range(8)] == [10, 20, 40, 80, 160, 320, 600, 600]
    assert policy.delay(10_000) == 600.0
    assert RetryPolicy(base_s=1.5, cap_s=1e9).delay(3) == 12.0


def test_failures_restart_at_once_then_with_back_off_until_restarts_run_out(
    session: Session, world: World
) -> None:
    policy = RetryPolicy(base_s=10.0, cap_s=25.0)
    job = world.job(session, now=0.0, max_restarts=4)
    now = 0.0
    for restart, delay in enumerate([0.0, 10.0, 20.0, 25.0], start=1):
        job.placement = list(PLACEMENT)
        transition(session, job, S.STARTING, reason="scheduled", now=now)
        assert job.recover_first is False
        transition(session, job, S.RUNNING, reason="started", now=now + 1)
        transition(session, job, S.FAILED, reason="exit", now=now + 5,
                   details={"exit_code": 3, "message": "boom"})  # fmt: skip
        assert (job.exit_code, job.exit_message, job.finished_at) == (3, "boom", now + 5)
        event = transition(session, job, S.PENDING, reason="retry", now=now + 6, retry=policy)
        assert job.restart_count == restart and restarts_left(job) == 4 - restart
        assert job.failure_streak == restart and job.recover_first is True
        retry_at = now + 6 + delay if delay else None
        assert job.next_retry_at == retry_at == job.estimated_start
        assert event.details == {"restart": restart, "next_retry_at": retry_at,
                                 "failure_streak": restart}  # fmt: skip
        assert job.pending_reason is not None and f"restart {restart} of 4" in job.pending_reason
        job.placement = list(PLACEMENT)
        if delay:
            with pytest.raises(IllegalTransition, match="back-off"):
                transition(session, job, S.STARTING, reason="scheduled",
                           now=now + 6 + delay - 0.5)  # fmt: skip
        now = now + 6 + delay
    session.commit()
    transition(session, job, S.STARTING, reason="scheduled", now=now)
    assert job.next_retry_at is None and job.attempt == 5 and job.exit_code is None
    transition(session, job, S.RUNNING, reason="started", now=now)
    transition(session, job, S.FAILED, reason="exit", now=now + 1)
    with pytest.raises(IllegalTransition, match="no restarts left"):
        transition(session, job, S.PENDING, reason="retry", now=now + 2)
    session.commit()
    assert job.state is S.FAILED and job.restart_count == 4


def test_a_healthy_run_resets_the_streak(session: Session, world: World) -> None:
    policy = RetryPolicy(base_s=10.0, cap_s=600.0, healthy_s=100.0)
    job = world.job(session, now=0.0, max_restarts=9)
    # (ran for, reported progress) -> the back-off after that failure
    for ran, healthy, delay in [(5, False, 0.0), (5, False, 10.0), (150, False, 0.0),
                                (5, False, 10.0), (5, True, 0.0)]:  # fmt: skip
        job.placement = list(PLACEMENT)
        now = max(job.next_retry_at or 0.0, job.state_changed_at)
        transition(session, job, S.STARTING, reason="scheduled", now=now)
        transition(session, job, S.RUNNING, reason="started", now=now)
        transition(session, job, S.FAILED, reason="exit", now=now + ran,
                   details={"exit_code": 1, "healthy": healthy}, retry=policy)  # fmt: skip
        transition(session, job, S.PENDING, reason="retry", now=now + ran, retry=policy)
        assert (job.next_retry_at or now + ran) - (now + ran) == delay, (ran, healthy)
    session.commit()


def test_an_infrastructure_failure_costs_nothing(session: Session, world: World) -> None:
    job = world.job(session, now=0.0, max_restarts=0)
    for attempt in range(3):
        job.placement = list(PLACEMENT)
        transition(session, job, S.STARTING, reason="scheduled", now=10.0 * attempt)
        transition(session, job, S.RUNNING, reason="started", now=10.0 * attempt + 1)
        transition(session, job, S.FAILED, reason="rank 1 lost", now=10.0 * attempt + 2,
                   details={"infra": True})  # fmt: skip
        assert job.recover_first is True
        event = transition(session, job, S.PENDING, reason="requeued", now=10.0 * attempt + 3,
                           details={"infra": True})  # fmt: skip
        assert (job.restart_count, job.failure_streak, job.next_retry_at) == (0, 0, None)
        assert job.recover_first is True and event.details["infra"] is True
        assert "infrastructure failure" in (job.pending_reason or "")
    session.commit()
    # its own failure still needs a restart left
    job.placement = list(PLACEMENT)
    transition(session, job, S.STARTING, reason="scheduled", now=100.0)
    assert job.recover_first is False
    transition(session, job, S.RUNNING, reason="started", now=101.0)
    transition(session, job, S.FAILED, reason="exit", now=102.0, details={"exit_code": 1})
    assert job.recover_first is False
    with pytest.raises(IllegalTransition, match="no restarts left"):
        transition(session, job, S.PENDING, reason="retry", now=103.0)


def test_node_loss_requeues_with_a_restart(session: Session, world: World) -> None:
    job = world.job_in(session, S.RUNNING, now=100.0)
    transition(session, job, S.PENDING, reason="node_lost", now=160.0,
               details={"node": "n0"})  # fmt: skip
    assert (job.restart_count, job.next_retry_at, job.placement) == (1, None, None)
    assert job.attained_service == pytest.approx(2 * 60.0)
    job.max_restarts = 1
    job.placement = list(PLACEMENT)
    transition(session, job, S.STARTING, reason="scheduled", now=170.0)
    with pytest.raises(IllegalTransition, match="move it to FAILED"):
        transition(session, job, S.PENDING, reason="node_lost", now=171.0)
    transition(session, job, S.FAILED, reason="node_lost", now=171.0)
    session.commit()
    assert [e[1] for e in _events(session, job)][-3:] == [S.PENDING, S.STARTING, S.FAILED]


def test_preemption_is_not_a_restart(session: Session, world: World) -> None:
    job = world.job_in(session, S.RUNNING, now=0.0)
    transition(session, job, S.PREEMPTED, reason="preempted", now=30.0,
               details={"for_job": "j-other"})  # fmt: skip
    transition(session, job, S.PENDING, reason="stopped", now=35.0)
    session.commit()
    assert (job.restart_count, job.next_retry_at, job.placement) == (0, None, None)
    assert job.attained_service == pytest.approx(60.0)


def test_events_chain_in_order(session: Session, world: World) -> None:
    job = world.job(session, now=0.0)
    path = [S.STARTING, S.RUNNING, S.PREEMPTED, S.PENDING, S.STARTING, S.RUNNING,
            S.RESIZING, S.STARTING, S.RUNNING, S.CANCELLED]  # fmt: skip
    for i, state in enumerate(path, start=1):
        if state == S.STARTING:
            job.placement = list(PLACEMENT)
        transition(session, job, state, reason=f"step{i}", now=float(i))
        session.commit()
    events = session.scalars(select(JobEvent).where(JobEvent.job_id == job.id)
                             .order_by(JobEvent.id)).all()  # fmt: skip
    assert [e.to_state for e in events] == [S.PENDING, *path]
    assert [e.time for e in events] == [0.0, *map(float, range(1, len(path) + 1))]
    for before, after in itertools.pairwise(events):
        assert after.from_state == before.to_state
    assert [e.to_state for e in job.events] == [S.PENDING, *path]


def test_rollback_after_an_illegal_transition_leaves_the_db_unchanged(
    engine: Engine, session: Session, world: World
) -> None:
    job = world.job(session, now=0.0)
    session.commit()
    job.placement = list(PLACEMENT)
    transition(session, job, S.STARTING, reason="scheduled", now=1.0)  # legal, same transaction
    with pytest.raises(IllegalTransition):
        transition(session, job, S.SUCCEEDED, reason="nope", now=2.0)
    session.rollback()
    with make_session_factory(engine)() as other:
        fresh = other.get(Job, job.id)
        assert fresh is not None
        assert (fresh.state, fresh.attempt, fresh.placement) == (S.PENDING, 0, None)
        assert _events(other, fresh) == [(None, S.PENDING, "submitted")]


def test_a_stale_job_cannot_be_moved(engine: Engine, session: Session, world: World) -> None:
    job = world.job(session, now=0.0)
    session.commit()
    with make_session_factory(engine)() as api:
        mine = api.get(Job, job.id)
        assert mine is not None
        transition(api, mine, S.CANCELLED, reason="cancelled by user", now=1.0)
        api.commit()
    job.placement = list(PLACEMENT)
    with pytest.raises(StaleDataError):
        transition(session, job, S.STARTING, reason="scheduled", now=1.5)
    session.rollback()
    session.refresh(job)
    assert job.state is S.CANCELLED
    assert [e[1] for e in _events(session, job)] == [S.PENDING, S.CANCELLED]
