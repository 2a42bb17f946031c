"""Factories for the database tests: a small committed world, jobs in any state, and the
helpers the platform tests share (a job running a Python snippet, a job row read back, a
job reported RUNNING as the executor reports it)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from trainyard.server.db import Job, JobState, Queue, Role, Tenant, User
from trainyard.server.lifecycle import submit, transition

PLACEMENT = [{"node": "n0", "devices": [0, 1]}]


@dataclass
class World:
    tenant: Tenant
    user: User
    root: Queue
    queue: Queue

    @classmethod
    def create(cls, session: Session, *, now: float) -> World:
        tenant = Tenant(name="acme", created_at=now)
        user = User(tenant=tenant, name="ada", role=Role.MEMBER, created_at=now)
        root = Queue(name="root", guaranteed=0, limit=None, weight=1.0, created_at=now)
        queue = Queue(
            name="research", tenant=tenant, parent=root, guaranteed=8, limit=16, weight=2.0,
            created_at=now,
        )  # fmt: skip
        session.add_all([tenant, user, root, queue])
        session.commit()
        return cls(tenant, user, root, queue)

    def job(self, session: Session, *, now: float = 1000.0, **fields: Any) -> Job:
        """A new job, submitted (PENDING, with its first event), flushed."""
        fields.setdefault("gpus", 2)
        fields.setdefault("max_restarts", 3)
        job = Job(tenant=self.tenant, user=self.user, queue=self.queue, **fields)
        submit(session, job, now=now)
        return job

    def job_in(self, session: Session, state: JobState, *, now: float = 1000.0) -> Job:
        """A job put directly into `state` (bypassing the lifecycle), as if it got there."""
        job = self.job(session, now=now)
        job.state = state
        if state in (JobState.STARTING, JobState.RUNNING, JobState.RESIZING, JobState.PREEMPTED):
            job.placement = list(PLACEMENT)
            job.attempt = 1
        if state in (JobState.RUNNING, JobState.RESIZING, JobState.PREEMPTED):
            job.started_at = now
        session.flush()
        return job


def submit_code(
    session: Session,
    world: World,
    code: str,
    *,
    gpus: int = 1,
    priority: int = 0,
    max_restarts: int = 0,
) -> str:
    """A committed job running `python -c code` with one worker per GPU; its id."""
    spec = {"name": "t", "command": [sys.executable, "-c", code], "gpus": gpus, "workers": gpus}
    job = world.job(
        session, now=time.time(), gpus=gpus, spec=spec, priority=priority,
        max_restarts=max_restarts,
    )  # fmt: skip
    session.commit()
    return job.id


def read_job(factory: sessionmaker[Session], job_id: str) -> Job:
    """The job row as stored now (detached)."""
    with factory() as s:
        job = s.get(Job, job_id)
        assert job is not None
        s.expunge(job)
        return job


def mark_running(factory: sessionmaker[Session], job_id: str, now: float) -> None:
    """The executor reports the job's processes up (STARTING -> RUNNING)."""
    with factory() as s:
        job = s.get(Job, job_id)
        assert job is not None
        transition(s, job, JobState.RUNNING, reason="started", now=now)
        s.commit()
