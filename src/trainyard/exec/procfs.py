"""Process identity and small file helpers shared by the executor and the rank wrapper.

A pid alone does not identify a process across a server restart (pids are reused), so the
executor records `(pid, start_time)` where the start time is field 22 of `/proc/<pid>/stat`
(clock ticks since boot). `alive` only says yes when both match and the process is not a
zombie.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
from pathlib import Path
from typing import Any


def stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (index 0 is field 3, the state)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # the command name is in parentheses and may itself contain spaces or parentheses
    return raw[raw.rfind(")") + 2 :].split()


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot, or None when it does not exist."""
    fields = stat_fields(pid)
    return int(fields[19]) if fields is not None else None


def alive(pid: int, started: int | None) -> bool:
    """True when `pid` runs, is not a zombie, and (if given) started at `started`."""
    fields = stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return False
    return started is None or int(fields[19]) == started


def pids_of_uid(uid: int) -> list[int]:
    """The live (not zombie) processes whose /proc entry `uid` owns (their effective uid)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            owner = entry.stat(follow_symlinks=False).st_uid
        except OSError:  # gone meanwhile
            continue
        if owner == uid and alive(int(entry.name), None):
            found.append(int(entry.name))
    return found


def process_group(pid: int) -> int | None:
    fields = stat_fields(pid)
    return int(fields[2]) if fields is not None else None


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to a temporary file in the same folder, then rename it over `path`."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json(path: Path) -> Any | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now (the OS picks it; a small race remains)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
