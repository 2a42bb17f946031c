"""Helpers shared by the workload readers: option checking, number parsing with
``file:line:column`` errors, and CSV header handling."""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from trainyard.sim.workload import WorkloadError
from trainyard.textfile import TextFileError, text_stream

__all__ = ["check_options", "csv_rows", "parse_float", "parse_int", "positive_int_option"]


def check_options(kind: str, options: Mapping[str, str], known: Sequence[str]) -> None:
    """Raise on an option this kind does not take, naming the ones it does."""
    for name in options:
        if name not in known:
            listed = ", ".join(known) if known else "none"
            raise WorkloadError(
                name, f"unknown option for {kind} workloads; the options it takes: {listed}"
            )


def positive_int_option(options: Mapping[str, str], name: str, default: int) -> int:
    """An integer option >= 1 (e.g. ``limit=500``)."""
    raw = options.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise WorkloadError(name, f"must be a whole number >= 1, got {raw!r}")
    return value


# the longest time a trace's row may give (about 31.7 years): beyond it a job's GPU-seconds
# overflow to infinity in the sums a simulation makes (a queue's share of the demand)
MAX_SECONDS = 1e9


def parse_float(text: str, where: str, what: str, *, minimum: float | None = None) -> float:
    """A finite number of seconds up to `MAX_SECONDS`, optionally > `minimum` (exclusive),
    else a WorkloadError at `where`."""
    try:
        value = float(text)
    except ValueError:
        raise WorkloadError(
            where, f"{what} {text!r} is not a number; write it in seconds, e.g. 60.0"
        ) from None
    if not math.isfinite(value):
        raise WorkloadError(where, f"{what} {text!r} is not finite; write a number of seconds")
    if minimum is not None and value <= minimum:
        raise WorkloadError(
            where, f"{what} must be > {minimum:g}, got {text!r}; fix or drop the row"
        )
    if abs(value) > MAX_SECONDS:
        raise WorkloadError(
            where, f"{what} must be at most {MAX_SECONDS:g} s (about 31 years), got {text!r}; "
            "fix or drop the row",
        )  # fmt: skip
    return value


def parse_int(text: str, where: str, what: str, *, minimum: int = 1) -> int:
    """A whole number >= `minimum`, else a WorkloadError at `where`."""
    try:
        value = int(text)
    except ValueError:
        raise WorkloadError(
            where, f"{what} {text!r} is not a whole number; write e.g. 1, 4 or 8"
        ) from None
    if value < minimum:
        raise WorkloadError(
            where, f"{what} must be >= {minimum}, got {text!r}; fix or drop the row"
        )
    return value


def csv_rows(path: Path, columns: Sequence[str]) -> Iterator[tuple[int, list[str], list[int]]]:
    """Yield (line, row, index of each wanted column) for each non-blank data row of `path`.
    A header without a wanted column raises at ``file:1:column``; a row too short to hold a
    wanted column raises at ``file:line:column``."""
    try:
        stream = text_stream(path)
    except TextFileError as exc:
        raise WorkloadError(f"{path}:0:0", f"the file {exc}") from None
    with stream as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            raise WorkloadError(
                f"{path}:1:{columns[0]}",
                f"the file is empty; it needs a header {','.join(columns)}",
            )
        names = [h.strip() for h in header]
        for col in columns:
            if col not in names:
                raise WorkloadError(
                    f"{path}:1:{col}",
                    f"the header has no column {col!r}; it needs {','.join(columns)}",
                )
        idx = [names.index(c) for c in columns]
        need = max(idx) + 1
        for row in reader:
            if not row:
                continue
            if len(row) < need:
                missing = next(c for c, i in zip(columns, idx, strict=True) if i >= len(row))
                raise WorkloadError(
                    f"{path}:{reader.line_num}:{missing}",
                    f"the row has {len(row)} fields and no {missing!r}; every row needs "
                    f"{len(names)} fields ({','.join(names)})",
                )
            yield reader.line_num, row, idx
