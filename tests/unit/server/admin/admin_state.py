"""Helpers of the admin tests: the whole database as comparable rows, and jobs in any state."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from trainyard.server.db import Base, Job, JobState, Queue, User, make_session_factory
from trainyard.server.lifecycle import submit


def db_state(session: Session) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, sorted: equal states mean nothing was written."""
    return {
        table.name: sorted((tuple(row) for row in session.execute(select(table))), key=repr)
        for table in Base.metadata.sorted_tables
    }


def row_counts(engine: Engine) -> dict[str, int]:
    """The number of rows in every table, read through a fresh session."""
    with make_session_factory(engine)() as session:
        return {
            table.name: session.scalar(select(func.count()).select_from(table)) or 0
            for table in Base.metadata.sorted_tables
        }


def add_job(
    session: Session,
    queue: str,
    user: str,
    state: JobState = JobState.PENDING,
    *,
    restart_count: int = 0,
    max_restarts: int = 0,
) -> Job:
    """A job of `user` in `queue`, put straight into `state` (as if it got there), flushed."""
    owner = session.scalars(select(User).where(User.name == user)).one()
    row = session.scalars(select(Queue).where(Queue.name == queue)).one()
    job = Job(
        tenant_id=owner.tenant_id,
        user=owner,
        queue=row,
        gpus=1,
        max_restarts=max_restarts,
        restart_count=restart_count,
    )
    submit(session, job, now=1000.0)
    job.state = state
    if state not in (JobState.PENDING, JobState.CANCELLED, JobState.SUCCEEDED, JobState.FAILED):
        job.placement = [{"node": "n0", "devices": [0]}]
    session.flush()
    return job
