"""A job's directory under the executor's root, and who owns what in it.

`<root>/jobs/<job id>/` (0711: a job's uid may pass through to its own directories only):
`attempt-<n>/` and `logs/` (0700, the server's), `checkpoints/`, `home/`, `tmp/` (0700,
the job's uid when it runs as one: `exec/identity.py`), `uid` (0600, the server's),
`notice` (0644, the server's: why the run is being stopped, `TRAINYARD_NOTICE_FILE`).

- `attempt-<n>/run.json`: pids, process start times, pgid, port, log paths (atomic writes);
  `attempt-<n>/rank-<r>.exit.json` / `rank-<r>.pid.json`: written by each rank's wrapper
  (`rankwrap.py`): the exit code, and the pid + start time of the rank's command;
  `attempt-<n>/stop.json`: written when the run was stopped on purpose.
- `logs/attempt-<n>/rank-<r>.log`: the rank's stdout and stderr.
- `checkpoints/`: `TRAINYARD_CHECKPOINT_DIR`, the same for every attempt; at a job's first
  launch it is a copy of an earlier job's when the spec says `resume_from` (`seed`).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import stat
from pathlib import Path

from trainyard.exec import procfs
from trainyard.exec.identity import Identity

JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def job_dir(root_dir: Path, job_id: str) -> Path:
    """`<root>/jobs/<job id>` (a ValueError for an id that is not a safe file name)."""
    if not JOB_ID.match(job_id):
        raise ValueError(f"job_id: {job_id!r} is not a valid job id ([A-Za-z0-9._-])")
    return Path(root_dir) / "jobs" / job_id


def private_dir(path: Path, mode: int) -> None:
    """Create `path` (and its parents) if needed and give it `mode` (the server owns it)."""
    path.mkdir(parents=True, exist_ok=True)
    if stat.S_IMODE(path.stat().st_mode) != mode:
        path.chmod(mode)


def owned_dir(path: Path, who: Identity) -> None:
    """A directory the job writes (checkpoints, home, tmp): 0700 and, for a job of its own
    uid, owned by it; what an earlier attempt left there under another owner is handed over
    too (a job directory from before `--job-user dynamic`)."""
    private_dir(path, 0o700)
    if who.uid is None or who.gid is None:
        return
    if path.stat().st_uid != who.uid:
        os.chown(path, who.uid, who.gid)
        for parent, dirs, files in os.walk(path):
            for name in (*dirs, *files):
                os.chown(os.path.join(parent, name), who.uid, who.gid, follow_symlinks=False)


def seed(checkpoints: Path, source: Path | str | None) -> None:
    """Before a job's first launch: its checkpoint directory as a copy of `source`'s (the
    job directory of an ended job of the same user, `resume_from`, checked at submit), so
    that it resumes that job's work; links are copied as links, never followed. Nothing when
    the directory exists already (a later attempt, or a relaunch) or `source` has none."""
    if not source or checkpoints.exists():
        return
    old = Path(source) / "checkpoints"
    if old.is_dir() and not old.is_symlink():
        shutil.copytree(old, checkpoints, symlinks=True)


def server_user() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


NOTICES = ("preempt", "resize", "stop")  # what a job is told before SIGTERM


def notice_path(job_dir: Path) -> Path:
    """`<job dir>/notice`: why the run is being stopped (`TRAINYARD_NOTICE_FILE`)."""
    return job_dir / "notice"


def write_notice(job_dir: Path, reason: str) -> None:
    """Tell the job why it is stopped (`preempt`, `resize`; anything else: `stop`), before
    its SIGTERM, so that the SDK checkpoints for the right cause. The file is the server's
    (0644, replaced atomically) in the server's directory: the job reads it, never writes."""
    word = next((n for n in NOTICES if reason.startswith(n)), "stop")  # "preempted": preempt
    path = notice_path(job_dir)
    if not job_dir.is_dir():
        return
    tmp = path.with_name(f".notice.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, f"{word}\n".encode())
        os.fchmod(fd, 0o644)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def collected_path(root_dir: Path, job_id: str) -> Path:
    """`<root>/collected/<job id>`: when retention (`admin gc`) removed the job's runs and
    logs. Kept out of `jobs/`, whose folders the server walks at every start."""
    return root_dir / "collected" / job_id


def mark_collected(root_dir: Path, job_id: str, when: float) -> None:
    """Record that retention removed the job's runs and logs at `when` (epoch seconds), so
    that an empty log is not mistaken for a job that printed nothing (the server's file)."""
    path = collected_path(root_dir, job_id)
    path.parent.mkdir(mode=0o700, exist_ok=True)
    tmp = path.with_name(f".{job_id}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, f"{when:.0f}\n".encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def collected_at(root_dir: Path, job_id: str) -> float | None:
    """When retention removed the job's runs and logs, or None."""
    try:
        return float(collected_path(root_dir, job_id).read_text().strip())
    except (OSError, ValueError):
        return None


def clear_notice(job_dir: Path) -> None:
    """Remove an earlier run's notice (at launch)."""
    with contextlib.suppress(FileNotFoundError):
        notice_path(job_dir).unlink()


def known_jobs(root_dir: Path) -> list[str]:
    """The ids of the jobs with a directory under `root_dir`."""
    jobs = root_dir / "jobs"
    return sorted(p.name for p in jobs.iterdir() if p.is_dir()) if jobs.is_dir() else []


def attempts(base: Path) -> list[int]:
    """The attempt numbers that have a folder under `base` (`attempt-<N>`), ascending."""
    names = (p.name.split("-", 1)[1] for p in base.glob("attempt-*")) if base.is_dir() else ()
    return sorted(int(n) for n in names if n.isdigit())


def attempt_dir(base: Path, attempt: int | None) -> Path | None:
    """`base/attempt-<attempt>`, or the highest-numbered one when `attempt` is None (None:
    there is none)."""
    if attempt is not None:
        d = base / f"attempt-{attempt}"
        return d if d.is_dir() else None
    found = attempts(base)
    return base / f"attempt-{found[-1]}" if found else None


STOP_FILE = "stop.json"


def record_stop(run_dir: Path, reason: str, now: float) -> None:
    """Write `attempt-<n>/stop.json` (the run is being stopped on purpose) unless it exists:
    the first stop's time counts for the grace period, also after a server restart."""
    path = run_dir / STOP_FILE
    if not path.exists():
        procfs.write_json_atomic(path, {"at": now, "reason": reason})


def stop_record(run_dir: Path) -> tuple[float, str] | None:
    """(when, why) of the run's `stop.json`, or None when it was not stopped on purpose."""
    data = procfs.read_json(run_dir / STOP_FILE)
    return (float(data["at"]), str(data.get("reason", ""))) if isinstance(data, dict) else None
