"""The scheduling round's plain-row snapshot on SQLite and PostgreSQL: pending jobs read as
rows with their versions kept in `session.info`, concurrent changes between load and apply,
and pending reasons written only when they changed, in one statement."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from server_factories import World
from sqlalchemy import Engine, event, select
from sqlalchemy.orm import Session, sessionmaker

from trainyard import core
from trainyard.server.db import Device, Job, JobEvent, JobState, Node, make_session_factory
from trainyard.server.lifecycle import transition
from trainyard.server.loop.scheduling import load_snapshot, run_once, write_decision
from trainyard.server.metrics import platform_metrics

S = JobState
NOW = 2000.0
TOO_BIG = 64  # more GPUs than the cluster has: stays pending with a reason


@pytest.fixture
def factory(engine: Engine, session: Session, world: World) -> sessionmaker[Session]:
    node = Node(name="n0", cpus=64.0, memory_gb=512.0, registered_at=1000.0)
    node.devices = [Device(index=i, gpu_type="A100", memory_gb=80.0) for i in range(4)]
    session.add(node)
    session.commit()
    return make_session_factory(engine)


def _submit(session: Session, world: World, gpus: int) -> str:
    job = world.job(session, now=1500.0, gpus=gpus)
    session.commit()
    return job.id


def _row(factory: sessionmaker[Session], job_id: str) -> Job:
    with factory() as s:
        job = s.get(Job, job_id)
        assert job is not None
        s.expunge(job)
        return job


def _events(factory: sessionmaker[Session], job_id: str) -> list[S]:
    with factory() as s:
        rows = s.scalars(select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.id))
        return [S(e.to_state) for e in rows]


@contextmanager
def _job_updates(engine: Engine) -> Iterator[list[tuple[str, int]]]:
    """Every UPDATE of the jobs table sent to the database: (statement, parameter sets)."""
    seen: list[tuple[str, int]] = []

    def record(
        _conn: Any, _cursor: Any, statement: str, parameters: Any, _ctx: Any, many: bool
    ) -> None:
        if statement.lstrip().upper().startswith("UPDATE JOBS"):
            seen.append((statement, len(parameters) if many else 1))

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def _round(session: Session, now: float = NOW) -> core.Decision:
    snapshot = load_snapshot(session, now)
    return core.run_cycle(snapshot, "default")


def test_the_snapshot_reads_pending_jobs_as_rows_and_remembers_versions(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    small = _submit(session, world, 1)
    big = _submit(session, world, TOO_BIG)
    with factory() as s:
        snapshot = load_snapshot(s, NOW)
        assert {j.id for j in snapshot.pending} == {small, big}
        assert not any(isinstance(o, Job) for o in s.identity_map.values())  # no ORM objects
        seen = s.info["trainyard.scheduling.seen"]
        assert seen == {small: (1, None, None), big: (1, None, None)}


def test_a_job_cancelled_between_load_and_apply_keeps_its_state_and_reason(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    placed = _submit(session, world, 2)
    stays = _submit(session, world, TOO_BIG)
    cancelled = _submit(session, world, TOO_BIG)
    with factory() as s:
        decision = _round(s)
        assert {p.job_id for p in decision.placements} == {placed}
        assert {stays, cancelled} <= set(decision.pending)
        with factory() as other:  # the API cancels it meanwhile
            job = other.get(Job, cancelled)
            assert job is not None
            transition(other, job, S.CANCELLED, reason="cancelled by ada", now=NOW)
            other.commit()
        applied = write_decision(s, decision, NOW)
    assert not applied.retry, applied.error
    assert [launch.job_id for launch in applied.launch] == [placed]
    assert _row(factory, placed).state is S.STARTING
    gone = _row(factory, cancelled)
    assert (gone.state, gone.pending_reason, gone.estimated_start) == (S.CANCELLED, None, None)
    assert _events(factory, cancelled) == [S.PENDING, S.CANCELLED]
    waiting = _row(factory, stays)
    assert waiting.state is S.PENDING and waiting.pending_reason
    assert waiting.pending_reason.split(": ", 1)[0].isidentifier()


def test_a_placed_job_changed_concurrently_makes_the_round_retry(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    placed = _submit(session, world, 2)
    other_job = _submit(session, world, TOO_BIG)
    with factory() as s:
        decision = _round(s)
        assert [p.job_id for p in decision.placements] == [placed]
        with factory() as other:  # still PENDING, but changed: its version moves on
            job = other.get(Job, placed)
            assert job is not None
            job.priority = 5
            other.commit()
            assert job.version == 2
        applied = write_decision(s, decision, NOW)
    assert applied.retry and placed in applied.error
    row = _row(factory, placed)
    assert (row.state, row.placement, row.priority) == (S.PENDING, None, 5)
    assert _events(factory, placed) == [S.PENDING]
    assert _row(factory, other_job).pending_reason is None  # nothing of the round written
    again = run_once(factory, now=NOW + 1, metrics=platform_metrics())
    assert not again.retry and [launch.job_id for launch in again.launch] == [placed]


def test_unchanged_reasons_are_not_rewritten(
    engine: Engine, factory: sessionmaker[Session], session: Session, world: World
) -> None:
    first = _submit(session, world, TOO_BIG)
    second = _submit(session, world, TOO_BIG)
    with _job_updates(engine) as updates:
        applied = run_once(factory, now=NOW, metrics=platform_metrics())
    assert applied.pending == 2 and not applied.retry
    assert len(updates) == 1 and updates[0][1] == 2  # both reasons, one statement
    reasons = {j: _row(factory, j).pending_reason for j in (first, second)}
    assert all(reasons.values())
    versions = {j: _row(factory, j).version for j in (first, second)}

    with _job_updates(engine) as updates:
        again = run_once(factory, now=NOW, metrics=platform_metrics())
    assert again.pending == 2 and not again.retry
    assert updates == []  # nothing changed, nothing written
    assert {j: _row(factory, j).pending_reason for j in (first, second)} == reasons
    assert {j: _row(factory, j).version for j in (first, second)} == versions

    third = _submit(session, world, TOO_BIG)
    with _job_updates(engine) as updates:
        third_round = run_once(factory, now=NOW, metrics=platform_metrics())
    assert third_round.pending == 3
    assert [count for _, count in updates] == [1]  # only the newcomer's reason
    assert _row(factory, third).pending_reason == reasons[first]


def test_reasons_skip_jobs_that_left_pending_even_when_they_changed(
    engine: Engine, factory: sessionmaker[Session], session: Session, world: World
) -> None:
    job_id = _submit(session, world, TOO_BIG)
    with factory() as s:
        decision = _round(s)
        assert job_id in decision.pending
        with factory() as other:
            job = other.get(Job, job_id)
            assert job is not None
            transition(other, job, S.CANCELLED, reason="cancelled", now=NOW)
            other.commit()
        with _job_updates(engine) as updates:
            applied = write_decision(s, decision, NOW)
    assert not applied.retry
    assert len(updates) == 1  # attempted, guarded by state = PENDING
    row = _row(factory, job_id)
    assert (row.state, row.pending_reason) == (S.CANCELLED, None)
