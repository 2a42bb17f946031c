"""Reader for the Philly trace as shipped with Pollux (`pollux/philly.csv`: columns
``timestamp,duration,num_gpus,gpu_time,cluster``).

Rules:

* one `SimJob` per row, id ``philly-LINE`` (the row's 1-based line in the file), queue = the
  virtual-cluster hash, gpus = ``num_gpus``, duration = ``duration`` (s);
* rows are not in time order in the file: selected rows are sorted by timestamp, and
  ``submit_time`` = seconds since the earliest *selected* row, divided by `load`;
* options: ``clusters`` (comma-separated hashes to keep), ``start``/``end`` (ISO datetimes on
  the trace's clock; ``start`` inclusive, ``end`` exclusive), ``limit`` (keep the earliest N
  selected jobs);
* a row with a non-numeric, non-finite, non-positive or over 1e9 s ``duration``, a
  ``num_gpus`` that is not a whole number >= 1, a bad ``timestamp`` or an empty ``cluster``
  is an error (`WorkloadError` at ``file:line:column``), never silently dropped. The shipped
  file has none: its shortest run time is 1 s. ``gpu_time`` is not read (it is duration x num_gpus).
"""

from __future__ import annotations

import datetime as dt
import gc
import math
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from trainyard.sim.readers._common import (
    MAX_SECONDS,
    check_options,
    csv_rows,
    parse_float,
    parse_int,
    positive_int_option,
)
from trainyard.sim.workload import SimJob, Workload, WorkloadError

__all__ = ["OPTIONS", "read_philly"]

OPTIONS = ("clusters", "start", "end", "limit")
_COLUMNS = ("timestamp", "duration", "num_gpus", "cluster")
_DAY = 86_400


class _Clock:
    """``YYYY-MM-DD HH:MM:SS`` -> seconds since 0001-01-01. The date-and-hour prefix is parsed
    and checked once and cached (the trace has ~2,500 distinct ones), so a row costs a dict
    look-up, a few slices and two int() calls."""

    def __init__(self) -> None:
        self._hours: dict[str, int] = {}

    def _hour(self, prefix: str) -> int:
        base = -1
        hh = prefix[11:13]
        if len(prefix) == 13 and prefix[10] in " T" and hh.isdigit() and int(hh) < 24:
            try:
                base = dt.date.fromisoformat(prefix[:10]).toordinal() * _DAY + int(hh) * 3600
            except ValueError:
                base = -1
        self._hours[prefix] = base
        return base

    def seconds(self, stamp: str) -> int:
        """The stamp's seconds, or -1 when it is not a valid ``YYYY-MM-DD HH:MM:SS``."""
        prefix = stamp[:13]
        base = self._hours.get(prefix)
        if base is None:
            base = self._hour(prefix)
        mm, ss = stamp[14:16], stamp[17:19]
        if (
            base < 0
            or len(stamp) != 19
            or stamp[13] != ":"
            or stamp[16] != ":"
            or not (mm + ss).isdigit()
            or mm > "59"
            or ss > "59"
        ):
            return -1
        return base + int(mm) * 60 + int(ss)


def _bound(options: Mapping[str, str], name: str) -> int | None:
    raw = options.get(name)
    if raw is None:
        return None
    try:
        moment = dt.datetime.fromisoformat(raw.strip())
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is not None:
        raise WorkloadError(
            name,
            f"{raw!r} is not a timezone-free ISO datetime on the trace's clock; "
            "write e.g. 2017-10-01 or 2017-10-01T08:00:00",
        )
    return moment.toordinal() * _DAY + moment.hour * 3600 + moment.minute * 60 + moment.second


def read_philly(path: Path, *, load: float, options: Mapping[str, str], source: str) -> Workload:
    """Read `path` (see the module docstring for the rules)."""
    check_options("philly", options, OPTIONS)
    wanted: set[str] | None = None
    if "clusters" in options:
        wanted = {c.strip() for c in options["clusters"].split(",") if c.strip()}
        if not wanted:
            raise WorkloadError(
                "clusters", "give one or more virtual-cluster hashes, comma-separated"
            )
    start, end = _bound(options, "start"), _bound(options, "end")
    if start is not None and end is not None and end <= start:
        raise WorkloadError("end", "must be later than start")
    limit = positive_int_option(options, "limit", 0) if "limit" in options else None

    clock = _Clock()
    seen: Counter[str] = Counter()
    picked: list[tuple[int, int, float, int, str]] = []
    name = str(path)
    enabled = gc.isenabled()
    gc.disable()  # a bulk load that makes no reference cycles; GC passes only cost time
    try:
        for line, row, (i_ts, i_dur, i_gpu, i_cl) in csv_rows(path, _COLUMNS):
            t = clock.seconds(row[i_ts])
            if t < 0:
                raise WorkloadError(
                    f"{name}:{line}:timestamp",
                    f"timestamp {row[i_ts]!r} is not a valid 'YYYY-MM-DD HH:MM:SS' "
                    "(e.g. 2017-10-09 07:01:55)",
                )
            text = row[i_dur]
            try:
                duration = float(text)
            except ValueError:
                duration = math.nan
            if not (0.0 < duration <= MAX_SECONDS):
                duration = parse_float(text, f"{name}:{line}:duration", "duration", minimum=0.0)
            text = row[i_gpu]
            gpus = int(text) if text.isdigit() else 0
            if gpus < 1:
                gpus = parse_int(text, f"{name}:{line}:num_gpus", "num_gpus")
            cluster = row[i_cl].strip()
            if not cluster:
                raise WorkloadError(
                    f"{name}:{line}:cluster", "cluster is empty; give the virtual-cluster hash"
                )
            seen[cluster] += 1
            if wanted is not None and cluster not in wanted:
                continue
            if (start is not None and t < start) or (end is not None and t >= end):
                continue
            picked.append((t, line, duration, gpus, cluster))
        return _build(picked, seen, wanted, name=name, source=source, limit=limit, load=load)
    finally:
        if enabled:
            gc.enable()


def _build(
    picked: list[tuple[int, int, float, int, str]],
    seen: Counter[str],
    wanted: set[str] | None,
    *,
    name: str,
    source: str,
    limit: int | None,
    load: float,
) -> Workload:
    if wanted is not None:
        unknown = sorted(wanted - set(seen))
        if unknown:
            raise WorkloadError(
                "clusters",
                f"{', '.join(unknown)} not in {name}; its clusters: {', '.join(sorted(seen))}",
            )
    if not picked:
        raise WorkloadError(source, "no job is selected; widen start/end or add clusters")
    picked.sort()
    if limit is not None:
        picked = picked[:limit]
    t0 = picked[0][0]
    jobs = tuple(
        SimJob(
            id=f"philly-{line}",
            submit_time=(t - t0) / load,
            gpus=gpus,
            queue=cluster,
            duration=duration,
        )
        for t, line, duration, gpus, cluster in picked
    )
    return Workload(kind="philly", source=source, jobs=jobs)
