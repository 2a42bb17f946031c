"""How the platform launches a STARTING job, on both databases (found by outside review 6):
the job's token is committed before the executor is called, so no write lock of the
database is held while the executor works (a Ray launch may wait up to a minute for a node;
with SQLite every other writer, the API's included, failed with "database is locked"
meanwhile). A launch the executor refuses drops the token it was given, and the job waits
in STARTING, tried again every step.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from server_factories import World, read_job
from sqlalchemy import Engine, select, text, update
from sqlalchemy.orm import Session, sessionmaker

from trainyard.exec.base import LaunchSpec, NodeInfo, RunHandle
from trainyard.exec.fake import FakeExecutor
from trainyard.exec.run import DeviceBusy
from trainyard.server.db import ApiToken, Job, JobState, Tenant, make_session_factory
from trainyard.server.db.session import BUSY_TIMEOUT_MS
from trainyard.server.loop.platform import Platform

S = JobState


class _Watching(FakeExecutor):
    """Looks at the database from other sessions while it launches, as a slow executor's
    call would let the API do; refuses launches while `busy` holds a holder."""

    def __init__(self, root: Path, factory: sessionmaker[Session]) -> None:
        super().__init__(root_dir=root)
        self.factory = factory
        self.seen_tokens: list[int] = []
        self.busy: dict[int, tuple[str, int]] = {}

    def launch(self, spec: LaunchSpec) -> RunHandle:
        with self.factory() as s:  # the job's token: already committed?
            tokens = s.scalars(select(ApiToken).where(ApiToken.job_id == spec.job_id)).all()
            self.seen_tokens.append(len(tokens))
        with self.factory() as s:  # another writer (an API request) is not locked out
            sqlite = s.get_bind().dialect.name == "sqlite"
            if sqlite:  # fail in 1 s, not after the usual wait for the lock
                s.execute(text("PRAGMA busy_timeout = 1000"))
            try:
                s.execute(update(Tenant).values(name=Tenant.name))
                s.commit()
            finally:
                if sqlite:
                    s.execute(text(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}"))
        if self.busy:
            raise DeviceBusy(spec.job_id, self.busy)
        return super().launch(spec)


@pytest.fixture
def factory(engine: Engine, world: World) -> sessionmaker[Session]:
    return make_session_factory(engine)


def _executor(tmp_path: Path, factory: sessionmaker[Session]) -> _Watching:
    ex = _Watching(tmp_path, factory)
    ex.set_nodes([NodeInfo("n1", "10.0.0.1", 16.0, 64.0, 4, "H100", 80.0, False, True, ())])
    return ex


def _job(session: Session, world: World, now: float) -> str:
    spec = {"name": "a", "command": ["python", "train.py"], "gpus": 4, "workers": 4}
    job = world.job(session, now=now, gpus=4, spec=spec)
    session.commit()
    return job.id


def test_the_token_is_committed_and_the_database_free_while_the_executor_launches(
    factory: sessionmaker[Session], tmp_path: Path, session: Session, world: World
) -> None:
    ex = _executor(tmp_path, factory)
    platform = Platform(factory, ex, nodes_every_s=0)
    t0 = time.time()
    a = _job(session, world, t0)
    platform.step(now=t0)
    assert ex.seen_tokens == [1]  # visible to another session before the ranks start
    assert read_job(factory, a).state == S.RUNNING
    with factory() as s:
        (token,) = s.scalars(select(ApiToken).where(ApiToken.job_id == a)).all()
        assert token.revoked_at is None


def test_a_refused_launch_drops_its_token_and_the_job_waits_in_starting(
    factory: sessionmaker[Session], tmp_path: Path, session: Session, world: World
) -> None:
    ex = _executor(tmp_path, factory)
    ex.busy = {0: ("j-other", 0)}
    platform = Platform(factory, ex, nodes_every_s=0)
    t0 = time.time()
    a = _job(session, world, t0)
    platform.step(now=t0)
    platform.step(now=t0 + 1)
    job = read_job(factory, a)
    assert job.state == S.STARTING
    assert "waiting for devices still held by live runs" in (job.pending_reason or "")
    with factory() as s:  # each try's token is gone: none piles up while it waits
        assert s.scalars(select(ApiToken).where(ApiToken.job_id == a)).all() == []
    ex.busy = {}
    platform.step(now=t0 + 2)
    assert read_job(factory, a).state == S.RUNNING
    assert ex.seen_tokens == [1, 1, 1]
    with factory() as s:
        (token,) = s.scalars(select(ApiToken).where(ApiToken.job_id == a)).all()
        assert token.revoked_at is None
    with factory() as s:
        row = s.get(Job, a)
        assert row is not None and row.attempt == 1
