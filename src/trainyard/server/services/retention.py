"""Retention: what `trainyard admin gc` removes, and nothing else.

- **Runs** of jobs that ended (SUCCEEDED, CANCELLED, or FAILED with no restart left) more than
  `runs_age_s` ago: their run records and per-rank logs (`<runs>/jobs/<id>/attempt-*`,
  `logs/`) and the job's home and temporary directories. `<runs>/collected/<job id>` records
  when, and the logs API says so instead of answering an empty log.
- **Checkpoints** of such jobs, once they ended more than `checkpoints_age_s` ago.
- **Tokens**: job tokens of jobs that ended (they stopped working then) and personal tokens
  revoked or expired more than `tokens_age_s` ago (console sessions included), and the
  console's login codes that expired that long ago (counted with the tokens).

The job rows, their events, the accounting and the audit trail are history and stay. A live
job (pending, starting, running, preempted, or failed with restarts left) is never touched.
`dry_run` reports what would go. The caller records the run in the audit trail.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import delete, or_, select
from sqlalchemy.orm import Session

from trainyard.exec.jobdirs import mark_collected
from trainyard.server.db import ApiToken, Job, JobState, LoginCode

S = JobState


@dataclass
class GcReport:
    runs: list[str] = field(default_factory=list)  # jobs whose runs and logs went
    checkpoints: list[str] = field(default_factory=list)  # jobs whose checkpoints went
    tokens: int = 0
    bytes_freed: int = 0


def _size(path: Path) -> int:
    if not path.exists():
        return 0
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _remove(path: Path, dry_run: bool) -> int:
    size = _size(path)
    if not dry_run and path.exists():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    return size


def collect(
    session: Session,
    runs_dir: Path,
    *,
    now: float,
    runs_age_s: float,
    checkpoints_age_s: float,
    tokens_age_s: float,
    dry_run: bool = False,
) -> GcReport:
    report = GcReport()
    ended = or_(
        Job.state.in_((S.SUCCEEDED, S.CANCELLED)),
        (Job.state == S.FAILED) & (Job.restart_count >= Job.max_restarts),
    )
    oldest = now - min(runs_age_s, checkpoints_age_s)
    rows = session.execute(select(Job.id, Job.finished_at).where(ended, Job.finished_at < oldest))
    for job_id, finished in rows:
        job_dir = runs_dir / "jobs" / job_id
        if finished is None or not job_dir.is_dir():
            continue
        if finished < now - runs_age_s:
            kept = ("logs", "home", "tmp", "notice")  # notice: why its last run was stopped
            parts = [*job_dir.glob("attempt-*"), *(job_dir / n for n in kept)]
            present = [p for p in parts if p.exists()]
            if present:
                report.runs.append(job_id)
                report.bytes_freed += sum(_remove(p, dry_run) for p in present)
                if not dry_run:
                    mark_collected(runs_dir, job_id, now)  # `logs` then says why none
        if finished < now - checkpoints_age_s and (job_dir / "checkpoints").exists():
            report.bytes_freed += _remove(job_dir / "checkpoints", dry_run)
            report.checkpoints.append(job_id)
        if (
            not dry_run and job_dir.is_dir() and not any(p.name != "uid" for p in job_dir.iterdir())
        ):  # nothing left but the uid record: the directory goes (the uid is never reused)
            shutil.rmtree(job_dir)
    finished_jobs = select(Job.id).where(ended)
    stale = or_(
        ApiToken.job_id.in_(finished_jobs),
        ApiToken.revoked_at < now - tokens_age_s,
        ApiToken.expires_at < now - tokens_age_s,
    )
    ids = list(session.scalars(select(ApiToken.id).where(stale)))
    codes = list(
        session.scalars(select(LoginCode.id).where(LoginCode.expires_at < now - tokens_age_s))
    )
    report.tokens = len(ids) + len(codes)
    if ids and not dry_run:
        session.execute(delete(ApiToken).where(ApiToken.id.in_(ids)))
    if codes and not dry_run:
        session.execute(delete(LoginCode).where(LoginCode.id.in_(codes)))
    return report
