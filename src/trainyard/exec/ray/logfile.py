"""Relaying a Ray run's output to its ranks' log files on the server, with the local
executor's cap.

`relay(ray, run, cap)` moves each rank's new output from its actor to its log: one read in
flight per rank (calls to a threaded actor may overlap, so never two); a rank that ended
gets one last read of what it buffered before `wait` returned. Reads are acknowledged: each
asks for the output from the stream offset the log has reached (`RayRun.acked`), and only
then does the actor drop what is before it, so a server that dies with a read in flight
loses none of it; the next server reads from what the actor still keeps (a line may then
appear twice, never be missing).

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
                    _write(run, rank, logs[rank], ray.get(ref, timeout=5.0), cap)
                last = ray.get(_read(actor, run.acked.get(rank, -1)), timeout=5.0)
                _write(run, rank, logs[rank], last, cap)
            run.drained.add(rank)
            continue
        if ref is not None:
            ready, _ = ray.wait([ref], timeout=0)
            if not ready:
                continue
            with contextlib.suppress(ray.exceptions.RayError):
                _write(run, rank, logs[rank], ray.get(ref), cap)
        run.reads[rank] = _read(actor, run.acked.get(rank, -1))


def _read(actor: Any, since: int) -> Any:
    """A read of what the rank wrote from `since` on (an actor of a server before acknowledged
    reads has only `read`, which empties its buffer)."""
    fresh = getattr(actor, "read_from", None)
    return fresh.remote(since) if fresh is not None else actor.read.remote()


def _write(run: RayRun, rank: int, path: Path, got: Any, cap: int) -> None:
    """Append what a read returned, less what the log already has (a read taken again after
    a restart starts where the last acknowledged one ended)."""
    if isinstance(got, bytes):  # `read` of an older actor
        append_capped(path, got, cap)
        return
    start, data = int(got["from"]), bytes(got["data"])
    done = run.acked.get(rank, -1)
    append_capped(path, bytes(got["note"]) + (data[done - start :] if done > start else data), cap)
    run.acked[rank] = max(done, start + len(data))


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
