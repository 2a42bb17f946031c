"""The ``after:`` and ``array:`` fields of a job spec: dependencies and job arrays.

This module owns `Dependency`, `ArraySpec` and their parsing; the format, in the
`trainyard.jobspec` package docstring::

    after:                      # start only once these jobs are done
      - job: j-4f2a9c           # a job id, or an array id (a-...: every member of it)
        condition: ok           # ok (default): it must succeed; any: it must just end
      - j-77b1d0:any            # the same, short
    array: 0-9%4                # ten jobs, indexes 0..9, at most 4 running at once

A dependency on `ok` that can no longer be met (the job failed or was cancelled) cancels
the waiting job, with the reason in its events, as Slurm does with `kill_invalid_depend`;
a job whose dependencies are not yet met stays PENDING with the reason `dependency: ...`.
An array is stored as one job per index, all with the spec, each told its index in
`TRAINYARD_ARRAY_INDEX` (and the array's id in `TRAINYARD_ARRAY_ID`); the `%N` throttle is
kept by the scheduler loop (members beyond it wait with the reason `array: ...`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from trainyard.jobspec.errors import JobSpecError
from trainyard.jobspec.fields import describe, text

__all__ = ["CONDITIONS", "ArraySpec", "Dependency", "parse_after", "parse_array"]

CONDITIONS: Final = ("ok", "any")
MAX_AFTER: Final = 64
_ID = re.compile(r"[A-Za-z0-9_-]{1,32}")
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?(?::(\d+))?$")


@dataclass(frozen=True, slots=True)
class Dependency:
    """Start only after job (or array) `job` has succeeded (`ok`) or ended (`any`)."""

    job: str
    condition: str = "ok"

    def to_dict(self) -> dict[str, str]:
        return {"job": self.job, "condition": self.condition}


@dataclass(frozen=True, slots=True)
class ArraySpec:
    """A job array: the indexes to run and at most how many at once (None: no limit)."""

    text: str
    indexes: tuple[int, ...]
    limit: int | None = None


def _dependency(raw: object, where: str) -> Dependency:
    if isinstance(raw, str):
        job, _, condition = raw.strip().partition(":")
        condition = condition or "ok"
    elif isinstance(raw, dict):
        unknown = sorted(set(raw) - {"job", "condition"})
        if unknown:
            raise JobSpecError(f"{where}.{unknown[0]}", "is not a field here: use job, condition")
        if "job" not in raw:
            raise JobSpecError(f"{where}.job", "is required (the id of the job to wait for)")
        job = text(raw["job"], f"{where}.job").strip()
        condition = text(raw.get("condition", "ok"), f"{where}.condition").strip()
    else:
        raise JobSpecError(
            where, f"must be a job id (JOB or JOB:ok / JOB:any) or {{job, condition}}, "
            f"got {describe(raw)}"
        )  # fmt: skip
    if not _ID.fullmatch(job):
        raise JobSpecError(f"{where}.job", f"{job!r} is not a job id (e.g. j-4f2a9c)")
    condition = condition.lower().removeprefix("after")
    if condition not in CONDITIONS:
        raise JobSpecError(
            f"{where}.condition",
            f"{condition!r} is not a condition: ok (the job must succeed) or any (it must end)",
        )
    return Dependency(job, condition)


def parse_after(raw: object, where: str = "after") -> tuple[Dependency, ...]:
    """The ``after:`` list (a single entry may be given without the list)."""
    items: list[Any] = list(raw) if isinstance(raw, list | tuple) else [raw]
    if len(items) > MAX_AFTER:
        raise JobSpecError(where, f"lists {len(items)} jobs; at most {MAX_AFTER} allowed")
    out: list[Dependency] = []
    for k, item in enumerate(items):
        dep = _dependency(item, f"{where}[{k}]" if isinstance(raw, list | tuple) else where)
        if dep not in out:
            out.append(dep)
    return tuple(out)


def parse_array(raw: object, where: str, max_size: int | None) -> ArraySpec:
    """``array:``: `0-9`, `1,3,5`, `0-99:2` (a step), any of them with `%N` (at most N at
    once); the indexes in order, without repeats (as Slurm, a repeated index is one job)."""
    if isinstance(raw, bool) or not isinstance(raw, str | int):
        raise JobSpecError(where, f"must be a range like 0-9 or 0-99%8, got {describe(raw)}")
    spec = str(raw).replace(" ", "")
    body, pct, throttle = spec.partition("%")
    limit: int | None = None
    if pct:
        if not throttle.isdigit() or int(throttle) < 1:
            raise JobSpecError(where, f"{spec!r}: after % give how many may run at once, e.g. %4")
        limit = int(throttle)
    indexes: list[int] = []
    seen: set[int] = set()
    for part in body.split(","):
        match = _RANGE.fullmatch(part)
        named = f"{part!r}" if part == spec else f"{spec!r}: {part!r}"  # the value once
        if match is None:
            raise JobSpecError(
                where, f"{named} is not an index or range; give e.g. 0-9, 1,3,5, "
                "0-99:2 or 0-99%8"
            )  # fmt: skip
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) else first
        step = int(match.group(3)) if match.group(3) else 1
        if step < 1:
            raise JobSpecError(where, f"{named} steps by 0; give a step >= 1 (0-9:2)")
        if last < first:
            raise JobSpecError(where, f"{named} must count up (e.g. 0-9)")
        if last > 2**31 - 1:
            raise JobSpecError(where, f"{spec!r}: indexes must be below 2147483648")
        count = (last - first) // step + 1
        if max_size is not None and len(indexes) + count > max_size:
            raise JobSpecError(
                where,
                f"{spec!r} makes more than {max_size} jobs (limit max_array_size); split it",
            )
        for index in range(first, last + 1, step):
            if index not in seen:
                seen.add(index)
                indexes.append(index)
    return ArraySpec(text=spec, indexes=tuple(indexes), limit=limit)
