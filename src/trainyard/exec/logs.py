"""Reading a job's per-rank log files, once (`read_lines`) or following them (`follow_lines`).

Logs live in `<root>/jobs/<id>/logs/attempt-<n>/rank-<r>.log`. With several ranks every line
is prefixed with `[rank r] `; following yields complete lines as they are written and, once
the run has ended, whatever is left (a last line without a newline included).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path


def read_lines(paths: dict[int, Path], prefix: bool) -> Iterator[str]:
    for rank, path in sorted(paths.items()):
        try:
            with path.open(errors="replace") as f:
                for line in f:
                    yield _format(rank, line, prefix)
        except FileNotFoundError:
            continue


def _format(rank: int, line: str, prefix: bool) -> str:
    line = line.rstrip("\n")
    return f"[rank {rank}] {line}" if prefix else line


def follow_lines(
    paths: dict[int, Path] | Callable[[], dict[int, Path]],
    prefix: bool,
    ended: Callable[[], bool],
    interval_s: float = 0.1,
) -> Iterator[str]:
    """Yield lines of every file as they appear until `ended()` is true and all is read.
    `paths` may be a function, asked again before every read: files that appear later (a
    run not launched yet, ranks started one by one) are followed too."""
    offsets: dict[int, int] = {}
    partial: dict[int, bytes] = {}
    while True:
        done = ended()  # decided before reading, so nothing written before the end is lost
        for rank, path in sorted((paths() if callable(paths) else paths).items()):
            offsets.setdefault(rank, 0)
            partial.setdefault(rank, b"")
            try:
                with path.open("rb") as f:
                    f.seek(offsets[rank])
                    chunk = f.read()
                    offsets[rank] = f.tell()
            except FileNotFoundError:
                continue
            text = partial[rank] + chunk
            *complete, partial[rank] = text.split(b"\n")
            for line in complete:
                yield _format(rank, line.decode(errors="replace"), prefix)
        if done:
            for rank, rest in sorted(partial.items()):
                if rest:
                    yield _format(rank, rest.decode(errors="replace"), prefix)
            return
        time.sleep(interval_s)
