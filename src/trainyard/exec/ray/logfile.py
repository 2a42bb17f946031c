"""Relaying a Ray run's output to its ranks' log files on the server, with the local
executor's cap.

`relay(ray, run, cap)` moves each rank's new output from its actor to its log: one read in
flight per rank (calls to a threaded actor may overlap, so never two); a rank that ended
gets one last read of what it buffered before `wait` returned.

`append_capped(path, data, cap)` keeps the newest `cap` bytes in `path` and `path.1`
together, as `exec/rankwrap.py` does for local ranks: when `path` would pass half the cap it
becomes `path.1` (after the last newline of the new data, so lines stay whole) and a new
`path` starts. A cap of 0 keeps everything.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from trainyard.exec.ray.runs import RayRun


def relay(ray: Any, run: RayRun, cap: int) -> None:
    """Append each rank's new output to its log on the server (module docstring)."""
    logs = {r.rank: r.log for r in run.handle.ranks}
    for rank, actor in run.actors.items():
        if rank in run.lost or rank in run.drained or run.released:
            continue
        ref = run.reads.get(rank)
        if rank in run.codes:
            run.reads.pop(rank, None)
            with contextlib.suppress(ray.exceptions.RayError, TimeoutError):
                if ref is not None:
                    append_capped(logs[rank], ray.get(ref, timeout=5.0), cap)
                append_capped(logs[rank], ray.get(actor.read.remote(), timeout=5.0), cap)
            run.drained.add(rank)
            continue
        if ref is not None:
            ready, _ = ray.wait([ref], timeout=0)
            if not ready:
                continue
            with contextlib.suppress(ray.exceptions.RayError):
                append_capped(logs[rank], ray.get(ref), cap)
        run.reads[rank] = actor.read.remote()


def append_capped(path: Path, data: bytes, cap: int) -> None:
    if not data:
        return
    half = max(cap // 2, 1) if cap else 0
    size = path.stat().st_size if path.exists() else 0
    if half and size and size + len(data) > half:
        cut = data.rfind(b"\n") + 1
        with path.open("ab") as out:
            out.write(data[:cut])
        os.replace(path, path.with_name(path.name + ".1"))
        data = data[cut:]
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
