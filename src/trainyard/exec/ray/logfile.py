"""Appending relayed output to a rank's log file with the local executor's cap.

`append_capped(path, data, cap)` keeps the newest `cap` bytes in `path` and `path.1`
together, as `exec/rankwrap.py` does for local ranks: when `path` would pass half the cap it
becomes `path.1` (after the last newline of the new data, so lines stay whole) and a new
`path` starts. A cap of 0 keeps everything.
"""

from __future__ import annotations

import os
from pathlib import Path


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
