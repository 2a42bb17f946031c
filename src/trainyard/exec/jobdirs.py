"""A job's directory under the executor's root, and who owns what in it.

`<root>/jobs/<job id>/` (0711: a job's uid may pass through to its own directories only):
`attempt-<n>/` and `logs/` (0700, the server's), `checkpoints/`, `home/`, `tmp/` (0700,
the job's uid when it runs as one: `exec/identity.py`), `uid` (0600, the server's).
"""

from __future__ import annotations

import os
import pwd
import re
import stat
from pathlib import Path

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


def server_user() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())
