"""Concurrent sessions: simple writes from several threads all land, nothing locks up, and
on SQLite (WAL) a reader is not blocked by an open write transaction."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from server_factories import PLACEMENT, World
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from trainyard.server.db import Job, JobEvent, JobState, make_session_factory
from trainyard.server.lifecycle import submit, transition

THREADS = 6
JOBS_PER_THREAD = 15


def test_concurrent_writers_do_not_lock_up(engine: Engine, world: World) -> None:
    factory = make_session_factory(engine)
    start = threading.Barrier(THREADS)

    def writer(worker: int) -> int:
        start.wait()
        done = 0
        for i in range(JOBS_PER_THREAD):
            with factory() as session:
                job = Job(tenant_id=world.tenant.id, queue_id=world.queue.id,
                          name=f"w{worker}-{i}", gpus=1)  # fmt: skip
                submit(session, job, now=float(i))
                session.commit()
                job.placement = list(PLACEMENT)
                transition(session, job, JobState.STARTING, reason="scheduled", now=i + 0.5)
                session.commit()
                done += 1
        return done

    began = time.monotonic()
    with ThreadPoolExecutor(THREADS) as pool:
        results = list(pool.map(writer, range(THREADS), timeout=60))
    assert results == [JOBS_PER_THREAD] * THREADS
    assert time.monotonic() - began < 60
    with factory() as session:
        total = THREADS * JOBS_PER_THREAD
        assert session.scalar(select(func.count()).select_from(Job)) == total
        assert session.scalar(select(func.count()).select_from(JobEvent)) == 2 * total
        starting = select(func.count()).select_from(Job).where(Job.state == JobState.STARTING)
        assert session.scalar(starting) == total


def test_a_reader_is_not_blocked_by_an_open_write(engine: Engine, world: World) -> None:
    factory = make_session_factory(engine)
    with factory() as writer, factory() as reader:
        job = Job(tenant_id=world.tenant.id, queue_id=world.queue.id, gpus=1)
        submit(writer, job, now=1.0)  # flushed: the write transaction is open
        began = time.monotonic()
        assert reader.scalar(select(func.count()).select_from(Job)) == 0
        assert time.monotonic() - began < 2.0
        writer.commit()
        reader.rollback()  # end the reader's snapshot
        assert reader.scalar(select(func.count()).select_from(Job)) == 1


def test_sessions_see_committed_changes(engine: Engine, session: Session, world: World) -> None:
    job = world.job(session)
    session.commit()
    with make_session_factory(engine)() as other:
        mine = other.get(Job, job.id)
        assert mine is not None
        transition(other, mine, JobState.CANCELLED, reason="cancelled by user", now=2.0)
        other.commit()
    session.refresh(job)
    assert job.state is JobState.CANCELLED and job.version == 2
