"""The job-logs service: check the caller may read the job, then hand back its lines."""

from __future__ import annotations

from collections.abc import Iterator

from sqlalchemy.orm import Session, sessionmaker

from trainyard.server.api.auth import Principal
from trainyard.server.api.errors import ApiError
from trainyard.server.api.services import own_job
from trainyard.server.db.base import JobState
from trainyard.server.db.jobs import Job
from trainyard.server.joblogs import JobLogs

MAX_RANK = 65_535
MAX_ATTEMPT = 1_000_000
_LIVE = (JobState.STARTING, JobState.RUNNING)


def open_logs(
    session: Session,
    who: Principal,
    source: JobLogs | None,
    sessions: sessionmaker[Session],
    job_id: str,
    *,
    rank: int | None,
    attempt: int | None,
    follow: bool,
) -> Iterator[str]:
    """The job's log lines, newline-terminated (a 404 for another tenant's job, a 422 for a
    rank the job does not have)."""
    job = own_job(session, who, job_id)
    if source is None:
        raise ApiError(404, "this server runs no executor, so it keeps no job logs", field=None)
    workers = int((job.spec or {}).get("workers", 1) or 1)
    if rank is not None and rank >= workers:
        raise ApiError(
            422, f"job {job.id} has ranks 0..{workers - 1}; rank {rank} does not exist",
            field="rank",
        )  # fmt: skip
    latest = max(0, job.attempt - 1)
    if attempt is not None and attempt > latest:
        raise ApiError(
            422, f"job {job.id} has attempts 0..{latest}; attempt {attempt} has not run",
            field="attempt",
        )  # fmt: skip
    followed = latest if attempt is None else attempt
    if not follow or followed != latest or job.state not in _LIVE:
        lines = source.read(job.id, rank, followed)
    else:
        job_key = job.id

        def ended() -> bool:
            with sessions() as s:
                row = s.get(Job, job_key)
                return row is None or row.state not in _LIVE or row.attempt - 1 != followed

        lines = source.follow(job.id, rank, followed, ended, ranks=workers)
    return (line + "\n" for line in lines)
