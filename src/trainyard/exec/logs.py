"""Reading a job's per-rank log files, once (`read_lines`, the last lines only: `tail_lines`)
or following them (`follow_lines`).

Logs live in `<root>/jobs/<id>/logs/attempt-<n>/rank-<r>.log`, with the older part of a rank's
output in `rank-<r>.log.1` once the log was rotated (`rankwrap.py` keeps the newest
`--log-cap` bytes: both files together). With several ranks every line is prefixed with
`[rank r] `; following yields complete lines as they are written and, once the run has ended,
whatever is left (a last line without a newline included).

Memory stays bounded whatever a job writes: files are read `READ_CHUNK` bytes at a time, and a
line longer than `MAX_LINE` bytes is served as several lines of at most that many bytes.
"""

from __future__ import annotations

import codecs
import collections
import time
from collections.abc import Callable, Iterator
from pathlib import Path

MAX_LINE = 64 * 1024
READ_CHUNK = 1024 * 1024


def rotated(path: Path) -> Path:
    """Where the older part of `path` goes when the log is rotated."""
    return path.with_name(path.name + ".1")


def read_lines(paths: dict[int, Path], prefix: bool) -> Iterator[str]:
    for rank, path in sorted(paths.items()):
        for part in (rotated(path), path):
            yield from _read_file(rank, part, prefix)


def tail_lines(paths: dict[int, Path], prefix: bool, count: int) -> Iterator[str]:
    """The last `count` lines of each rank's output (its rotated part too where the newest
    file holds fewer), rank by rank as `read_lines` gives them. Only the end of each file is
    read: at most `count` x `MAX_LINE` bytes of it."""
    for rank, path in sorted(paths.items()):
        start, found = last_lines_start(path, count)
        last: collections.deque[str] = collections.deque(maxlen=count)
        if found < count:
            older, _ = last_lines_start(rotated(path), count - found)
            last.extend(_read_file(rank, rotated(path), prefix, older))
        last.extend(_read_file(rank, path, prefix, start))
        yield from last


def last_lines_start(path: Path, count: int) -> tuple[int, int]:
    """Where the last `count` lines of `path` start, and how many lines that is (fewer when
    the file has fewer; a last line without a newline counts). Reads back from the end in
    blocks, never more than `count` x `MAX_LINE` bytes: a line longer than that is served
    in pieces of `MAX_LINE`, so its last `count` x `MAX_LINE` bytes make `count` lines."""
    try:
        f = path.open("rb")
    except FileNotFoundError:
        return 0, 0
    with f:
        size = f.seek(0, 2)
        if count <= 0:
            return size, 0
        bound = max(0, size - count * MAX_LINE)
        end, lines = size, 0
        while end > bound and lines <= count:
            begin = max(bound, end - READ_CHUNK)
            f.seek(begin)
            block = f.read(end - begin)
            if end == size and block.endswith(b"\n"):
                block = block[:-1]  # the last line's own newline ends no line after it
            newlines = block.count(b"\n")
            if lines + newlines >= count:
                cut = len(block)
                for _ in range(count - lines):
                    cut = block.rindex(b"\n", 0, cut)
                return begin + cut + 1, count
            lines += newlines
            end = begin
        # the whole file, or as far back as `count` pieces of a long line can reach
        return bound, (lines + (size > 0) if bound == 0 else count)


def _read_file(rank: int, path: Path, prefix: bool, start: int = 0) -> Iterator[str]:
    try:
        f = path.open("rb")
    except FileNotFoundError:
        return
    decode = codecs.getincrementaldecoder("utf-8")(errors="replace").decode
    with f:
        f.seek(start)
        while True:
            line = f.readline(MAX_LINE)
            if not line:
                break
            yield _format(rank, decode(line), prefix)


def _tail(
    rank: int, path: Path, offsets: dict[int, int], partial: dict[int, bytes], prefix: bool
) -> Iterator[str]:
    """The complete lines of `path` after `offsets[rank]` (the rest kept in `partial`)."""
    try:
        f = path.open("rb")
    except FileNotFoundError:
        return
    with f:
        f.seek(offsets[rank])
        while chunk := f.read(READ_CHUNK):
            offsets[rank] += len(chunk)
            *complete, rest = (partial[rank] + chunk).split(b"\n")
            while len(rest) > MAX_LINE:
                complete.append(rest[:MAX_LINE])
                rest = rest[MAX_LINE:]
            partial[rank] = rest
            for line in complete:
                for i in range(0, max(len(line), 1), MAX_LINE):
                    yield _format(rank, line[i : i + MAX_LINE].decode(errors="replace"), prefix)


def _format(rank: int, line: str, prefix: bool) -> str:
    line = line.rstrip("\n")
    return f"[rank {rank}] {line}" if prefix else line


def _tail_start(path: Path, tail_bytes: int | None) -> int:
    """Where reading the last `tail_bytes` of `path` starts: after a newline (0: all)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0
    if tail_bytes is None or size <= tail_bytes:
        return 0
    with path.open("rb") as f:
        f.seek(size - tail_bytes)
        chunk = f.read(tail_bytes)
    newline = chunk.find(b"\n")
    return size - tail_bytes + newline + 1 if newline >= 0 else size


def follow_lines(
    paths: dict[int, Path] | Callable[[], dict[int, Path]],
    prefix: bool,
    ended: Callable[[], bool],
    interval_s: float = 0.1,
    tail_bytes: int | None = None,
    tail_count: int | None = None,
) -> Iterator[str]:
    """Yield lines of every file as they appear until `ended()` is true and all is read.
    `paths` may be a function, asked again before every read: files that appear later (a
    run not launched yet, ranks started one by one) are followed too. `tail_bytes`: of a
    file already there, start with its last complete lines within that many bytes;
    `tail_count`: with its last that many lines (`tail -n N -f`)."""
    offsets: dict[int, int] = {}
    partial: dict[int, bytes] = {}
    while True:
        done = ended()  # decided before reading, so nothing written before the end is lost
        for rank, path in sorted((paths() if callable(paths) else paths).items()):
            if rank not in offsets:
                offsets[rank] = (
                    _tail_start(path, tail_bytes)
                    if tail_count is None
                    else last_lines_start(path, tail_count)[0]
                )
            partial.setdefault(rank, b"")
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                continue
            if size < offsets[rank]:  # rotated: finish the old part, then start afresh
                yield from _tail(rank, rotated(path), offsets, partial, prefix)
                offsets[rank] = 0
            yield from _tail(rank, path, offsets, partial, prefix)
        if done:
            for rank, rest in sorted(partial.items()):
                if rest:
                    yield _format(rank, rest.decode(errors="replace"), prefix)
            return
        time.sleep(interval_s)
