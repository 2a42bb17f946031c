"""A RUNNING job whose run is ending keeps its devices until no process of the run is left,
on both databases and with the in-memory executor (`exec/fake.py`): a job stopped as hung
(no progress report for `progress_timeout_s`) while it checkpoints on its stop notice, and a
job one of whose ranks failed while the others are being stopped. Only then does it fail
(as hung: with that reason, also after a server restart) and the waiting job get its GPUs.
A job cancelled while its run stops holds its GPUs likewise, also when the cancel lands
between the step's sweep and its scheduling round.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from server_factories import World, read_job
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from trainyard.exec.base import NodeInfo
from trainyard.exec.fake import FakeExecutor
from trainyard.server.db import (
    Job,
    JobEvent,
    JobProgress,
    JobState,
    UsageRecord,
    make_session_factory,
)
from trainyard.server.lifecycle import transition
from trainyard.server.loop.platform import Platform

S = JobState
TIMEOUT_S = 60.0


@pytest.fixture
def factory(engine: Engine, world: World) -> sessionmaker[Session]:
    return make_session_factory(engine)


@pytest.fixture
def fake(tmp_path: Path) -> FakeExecutor:
    ex = FakeExecutor(root_dir=tmp_path)  # a real folder: stops go into stop.json
    ex.set_nodes([NodeInfo("n1", "10.0.0.1", 16.0, 64.0, 4, "H100", 80.0, False, True, ())])
    return ex


def _platform(factory: sessionmaker[Session], fake: FakeExecutor) -> Platform:
    return Platform(factory, fake, nodes_every_s=0, progress_timeout_s=TIMEOUT_S)


def _job(session: Session, world: World, name: str, now: float, restarts: int = 2) -> str:
    spec = {"name": name, "command": ["python", "train.py"], "gpus": 4, "workers": 4}
    job = world.job(session, now=now, gpus=4, spec=spec, max_restarts=restarts)
    session.commit()
    return job.id


def _reported(factory: sessionmaker[Session], job_id: str, at: float) -> None:
    """The job's first attempt reported progress at `at` (as the SDK's reports do)."""
    with factory() as s:
        s.add(JobProgress(job_id=job_id, attempt=0, world_size=4, step=10, samples=640,
                          loss=1.0, grad_sqr=None, grad_var=None, updated_at=at))  # fmt: skip
        s.commit()


def _failure(factory: sessionmaker[Session], job_id: str) -> JobEvent:
    with factory() as s:
        event = s.scalars(
            select(JobEvent).where(JobEvent.job_id == job_id, JobEvent.to_state == S.FAILED)
        ).one()
        s.expunge(event)
        return event


def test_a_hung_job_keeps_its_gpus_until_its_run_has_stopped_then_fails_as_hung(
    factory: sessionmaker[Session], fake: FakeExecutor, session: Session, world: World
) -> None:
    t0 = time.time()
    platform = _platform(factory, fake)
    a = _job(session, world, "a", t0)
    platform.step(now=t0)
    assert read_job(factory, a).state == S.RUNNING
    _reported(factory, a, t0 + 1)
    b = _job(session, world, "b", t0 + 2)
    fake.slow.add(a)  # it checkpoints on its notice: its stop takes a while
    report = platform.step(now=t0 + 1 + TIMEOUT_S + 5)
    assert a in report.stopped
    (_job_id, _attempt, reason) = fake.stopped[-1]
    assert reason.startswith("hung: no progress reported for 65 s")
    # the run still has processes: a holds its 4 GPUs, b waits, nothing is launched on them
    assert read_job(factory, a).state == S.RUNNING
    assert read_job(factory, b).state == S.PENDING
    assert len(fake.launched) == 1
    platform.step(now=t0 + 80)
    assert read_job(factory, a).state == S.RUNNING  # no second stop, still holding
    assert [s for s in fake.stopped if s[0] == a] == [fake.stopped[-1]]
    fake.finish(a, {0: 85, 1: 85, 2: 85, 3: 85})  # checkpointed and exited on the notice
    platform.step(now=t0 + 90)
    event = _failure(factory, a)
    assert event.reason.startswith("hung: no progress reported for 65 s")
    assert (event.details or {}).get("infra") is False  # its own failure: it uses a restart
    assert read_job(factory, a).restart_count == 1
    # only now are its GPUs given again: to a's restart (at once, the first after a
    # healthy run; a was submitted before b)
    assert [spec.job_id for spec in fake.launched] == [a, a]
    assert read_job(factory, b).state == S.PENDING


def test_a_hung_stop_sent_before_a_server_restart_still_ends_as_hung(
    factory: sessionmaker[Session], fake: FakeExecutor, session: Session, world: World
) -> None:
    t0 = time.time()
    a = _job(session, world, "a", t0)
    first = _platform(factory, fake)
    first.step(now=t0)
    _reported(factory, a, t0 + 1)
    fake.slow.add(a)
    first.step(now=t0 + 1 + TIMEOUT_S + 5)
    assert read_job(factory, a).state == S.RUNNING
    # a new server: it knows of the hung stop only from the run's stop.json
    second = _platform(factory, fake)
    second.recover(now=t0 + 70)
    assert read_job(factory, a).state == S.RUNNING
    fake.finish(a, {0: 0, 1: 0, 2: 0, 3: 0})  # a clean exit on the notice is no success
    second.step(now=t0 + 75)
    assert _failure(factory, a).reason.startswith("hung: no progress reported")
    assert read_job(factory, a).state != S.SUCCEEDED


def test_a_failed_rank_keeps_the_gpus_booked_while_the_other_ranks_stop(
    factory: sessionmaker[Session], fake: FakeExecutor, session: Session, world: World
) -> None:
    t0 = time.time()
    platform = _platform(factory, fake)
    a = _job(session, world, "a", t0, restarts=0)
    platform.step(now=t0)
    b = _job(session, world, "b", t0 + 1)
    fake.finish(a, {0: 1, 1: None, 2: None, 3: None}, settled=False)
    platform.step(now=t0 + 2)
    assert read_job(factory, a).state == S.RUNNING
    assert read_job(factory, b).state == S.PENDING
    fake.finish(a, {0: 1, 1: -15, 2: -15, 3: -15})
    platform.step(now=t0 + 3)
    assert _failure(factory, a).reason == "rank 0 exited with code 1"
    assert read_job(factory, b).state in (S.STARTING, S.RUNNING)  # a has no restart left
    assert [spec.job_id for spec in fake.launched] == [a, b]


def test_a_cancelled_job_keeps_its_gpus_booked_until_its_run_has_stopped(
    factory: sessionmaker[Session], fake: FakeExecutor, session: Session, world: World
) -> None:
    """Found by an outside review: a cancel moved RUNNING to CANCELLED, which holds nothing,
    so the next round placed a job on GPUs whose ranks were still in their grace period
    (the executor's ledger refused it, as a bug signal)."""
    t0 = time.time()
    platform = _platform(factory, fake)
    a = _job(session, world, "a", t0)
    platform.step(now=t0)
    fake.slow.add(a)  # its ranks take their grace period to go
    with factory() as s:
        row = s.get(Job, a)
        assert row is not None
        transition(s, row, S.CANCELLED, reason="cancelled by its user", now=t0 + 1)
        s.commit()
    b = _job(session, world, "b", t0 + 1)
    report = platform.step(now=t0 + 2)
    assert a in report.stopped
    assert read_job(factory, b).state == S.PENDING  # a's run still holds the 4 GPUs
    assert [spec.job_id for spec in fake.launched] == [a]
    platform.step(now=t0 + 3)
    assert read_job(factory, b).state == S.PENDING
    fake.finish(a, {0: -15, 1: -15, 2: -15, 3: -15})  # gone
    platform.step(now=t0 + 4)
    assert read_job(factory, b).state in (S.STARTING, S.RUNNING)
    assert [spec.job_id for spec in fake.launched] == [a, b]
    assert b not in platform._blocked  # never placed on a's GPUs, so never refused there
    # and its run is billed until it stopped, not until the cancel (the review's M4)
    with factory() as s:
        (record,) = s.scalars(select(UsageRecord).where(UsageRecord.job_id == a)).all()
        assert (record.started_at, record.ended_at) == (t0, t0 + 4)


def test_a_job_cancelled_between_the_sweep_and_the_round_keeps_its_gpus_booked(
    factory: sessionmaker[Session],
    fake: FakeExecutor,
    session: Session,
    world: World,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The cancel lands after the step looked at the runs and before its scheduling round
    read the jobs (an API request served meanwhile): the round itself asks whether the run
    still has processes, so the waiting job is not placed on GPUs still in use."""
    t0 = time.time()
    platform = _platform(factory, fake)
    a = _job(session, world, "a", t0)
    platform.step(now=t0)
    fake.slow.add(a)
    b = _job(session, world, "b", t0 + 1)
    sweep = platform._sweep

    def sweep_then_cancel(report: object, now: float) -> None:
        sweep(report, now)  # type: ignore[arg-type]
        with factory() as s:
            row = s.get(Job, a)
            assert row is not None
            if row.state == S.RUNNING:
                transition(s, row, S.CANCELLED, reason="cancelled by its user", now=now)
                s.commit()

    monkeypatch.setattr(platform, "_sweep", sweep_then_cancel)
    platform.step(now=t0 + 2)
    assert read_job(factory, a).state == S.CANCELLED
    assert read_job(factory, b).state == S.PENDING  # a's ranks still hold the 4 GPUs
    assert b not in platform._blocked
    platform.step(now=t0 + 3)  # the sweep stops a's run now; it takes its grace period
    assert read_job(factory, b).state == S.PENDING
    fake.finish(a, {0: -15, 1: -15, 2: -15, 3: -15})
    platform.step(now=t0 + 4)
    assert read_job(factory, b).state in (S.STARTING, S.RUNNING)
    assert [spec.job_id for spec in fake.launched] == [a, b]
    assert b not in platform._blocked  # never placed on a's GPUs, so never refused there


def test_a_run_that_ended_by_itself_is_billed_to_its_end_only(
    factory: sessionmaker[Session], fake: FakeExecutor, session: Session, world: World
) -> None:
    """Only a run stopped on request goes on past its job's state change; one that ended by
    itself (the Ray executor gives no end time) is not billed to when a server next looked."""
    t0 = time.time()
    platform = _platform(factory, fake)
    a = _job(session, world, "a", t0, restarts=0)
    platform.step(now=t0)
    fake.finish(a, {0: 0, 1: 0, 2: 0, 3: 0})
    platform.step(now=t0 + 5)  # SUCCEEDED at t0 + 5
    platform.step(now=t0 + 20)  # the sweep forgets its settled run
    with factory() as s:
        (record,) = s.scalars(select(UsageRecord).where(UsageRecord.job_id == a)).all()
        assert (record.started_at, record.ended_at) == (t0, t0 + 5)
