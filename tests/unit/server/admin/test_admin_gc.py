"""`trainyard admin gc` on SQLite and PostgreSQL: runs, logs and checkpoints of jobs that ended
long enough ago go (a dry run only reports), live jobs and recent ones are untouched, stale
tokens are deleted, the job rows stay, and the run is audited."""

from __future__ import annotations

import json
import time
from pathlib import Path

from sqlalchemy import func, select
from test_admin_cli import AdminCli, admin

from trainyard.server.db import ApiToken, Job, JobState, Queue, Tenant, User, make_session_factory
from trainyard.server.lifecycle import submit

__all__ = ["admin"]
DAY = 86_400.0


def _job(admin: AdminCli, state: JobState, finished_ago: float | None) -> str:
    now = time.time()
    with make_session_factory(admin.engine)() as s:
        user = s.scalars(select(User).where(User.name == "admin")).one()
        tenant = s.scalars(select(Tenant)).first()
        queue = s.scalars(select(Queue)).first()
        job = Job(tenant=tenant, user=user, queue=queue, gpus=0, max_restarts=0)
        submit(s, job, now=now - 100 * DAY)
        job.state = state
        job.finished_at = None if finished_ago is None else now - finished_ago
        s.add(ApiToken(token_id=f"t{job.id[-10:]}", secret_hash="x" * 64, user=user,
                       job_id=job.id, created_at=now - 100 * DAY))  # fmt: skip
        s.commit()
        job_dir = admin.home / "runs" / "jobs" / job.id
        for part in ("attempt-0", "logs/attempt-0", "checkpoints", "home"):
            (job_dir / part).mkdir(parents=True)
        (job_dir / "logs" / "attempt-0" / "rank-0.log").write_bytes(b"x" * 1000)
        (job_dir / "checkpoints" / "ckpt").write_bytes(b"y" * 5000)
        (job_dir / "notice").write_text("stop")  # a cancelled run was told why
        (job_dir / "uid").write_text("2000000001")
        return job.id


def test_gc_removes_what_the_policy_no_longer_keeps(admin: AdminCli) -> None:
    admin.ok("tenant", "list")  # bootstraps the database and its admin
    old = _job(admin, JobState.SUCCEEDED, finished_ago=40 * DAY)
    recent = _job(admin, JobState.CANCELLED, finished_ago=2 * DAY)
    live = _job(admin, JobState.PENDING, finished_ago=None)
    jobs = admin.home / "runs" / "jobs"
    dry = admin.ok("gc", "--dry-run")
    assert (
        dry.strip()
        == "would remove: runs and logs of 1 job(s), checkpoints of 1, 2 token(s); 0.0 MB"
    )
    assert (jobs / old / "checkpoints" / "ckpt").exists()
    out = admin.ok("gc", "--checkpoints", "1d")
    assert out.startswith("removed: runs and logs of 1 job(s), checkpoints of 2, 2 token(s)")
    assert not (jobs / old).exists()  # nothing of it is left
    assert (admin.home / "runs" / "collected" / old).is_file()  # but when it went (logs: 410)
    assert not (admin.home / "runs" / "collected" / recent).exists()
    assert (jobs / recent / "logs" / "attempt-0" / "rank-0.log").exists()  # kept 30 days
    assert not (jobs / recent / "checkpoints").exists()  # --checkpoints 1d
    assert (jobs / live / "checkpoints" / "ckpt").exists()  # a live job is never touched
    with make_session_factory(admin.engine)() as s:
        assert s.scalar(select(func.count()).select_from(Job)) == 3  # history stays
        left = list(s.scalars(select(ApiToken.job_id).where(ApiToken.job_id.is_not(None))))
    assert left == [live]
    trail = json.loads(admin.ok("audit", "--json"))["events"]
    assert [e["action"] for e in trail] == ["gc"]  # the dry run is not recorded
    assert Path(trail[0]["target"]) == admin.home / "runs"
