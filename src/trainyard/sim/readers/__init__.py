"""Workload readers: turn a workload SPEC into a `trainyard.sim.workload.Workload`.

This package owns the SPEC grammar and dispatch; each kind lives in its own module:

* ``philly:PATH``   the Philly trace CSV shipped with Pollux (`readers.philly`);
* ``pollux:PATH``   a Pollux workload CSV (`readers.pollux`);
* ``gavel:PATH``    jobs generated from Gavel's throughput JSON (`readers.gavel`);
* ``synthetic`` / ``synthetic:N``  N (default 1000) Philly-like jobs, no file (`readers.synthetic`).

`load` > 0 scales every inter-arrival time by ``1 / load`` (2.0 = jobs arrive twice as fast).
A relative PATH that does not exist is also looked up under `shared` and ``shared/traces``
(the ``../shared`` data folder; `trainyard.datafiles.locate_data_file`). Errors are
`WorkloadError`s naming the spec, option or ``file:line:column`` and saying how to fix it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

from trainyard.datafiles import DataFileNotFoundError, locate_data_file
from trainyard.sim.readers.gavel import read_gavel
from trainyard.sim.readers.philly import read_philly
from trainyard.sim.readers.pollux import read_pollux
from trainyard.sim.readers.synthetic import DEFAULT_JOBS, synthetic
from trainyard.sim.workload import Workload, WorkloadError

__all__ = ["KINDS", "WORKLOAD_FOLDERS", "read_workload"]

KINDS = ("philly", "pollux", "gavel", "synthetic")
MAX_SYNTHETIC_JOBS = 1_000_000  # ten times Philly's trace
LOADS = (1e-3, 1e3)  # the arrival-rate multipliers `load` may be
WORKLOAD_FOLDERS = ("", "traces")  # where under `shared` a relative workload PATH is tried
_USAGE = "write KIND:PATH (philly, pollux, gavel) or synthetic[:N]"


def _locate(spec: str, raw: str, shared: Path | None) -> Path:
    try:
        return locate_data_file(raw, shared, WORKLOAD_FOLDERS)
    except DataFileNotFoundError as exc:
        tried = ", ".join(str(c) for c in exc.tried)
        raise WorkloadError(
            spec, f"no such file (tried {tried}); give an existing file's path"
        ) from None


def read_workload(
    spec: str,
    *,
    seed: int = 0,
    load: float = 1.0,
    options: Mapping[str, str] | None = None,
    shared: Path | None = None,
) -> Workload:
    """The workload SPEC names (see the module docstring)."""
    opts = dict(options or {})
    if not (isinstance(load, int | float) and math.isfinite(load) and LOADS[0] <= load <= LOADS[1]):
        raise WorkloadError(
            "load",
            f"must be a number from {LOADS[0]:g} to {LOADS[1]:g} (1.0 = as recorded), got "
            f"{load!r}: beyond them arrival times swamp the run times in floating point",
        )
    kind, sep, rest = spec.strip().partition(":")
    kind = kind.strip().lower()
    if kind == "synthetic":
        n = DEFAULT_JOBS
        if sep:
            try:
                n = int(rest)
            except ValueError:
                n = 0
            if not 1 <= n <= MAX_SYNTHETIC_JOBS:
                raise WorkloadError(
                    spec,
                    f"N in synthetic:N must be a whole number from 1 to {MAX_SYNTHETIC_JOBS:,}; "
                    f"{_USAGE}",
                )
        return synthetic(n, seed=seed, load=load, options=opts, source=spec)
    if kind not in KINDS:
        raise WorkloadError(spec, f"unknown workload kind {kind!r}; {_USAGE}")
    if not rest.strip():
        raise WorkloadError(spec, f"{kind} needs a file; write {kind}:PATH")
    path = _locate(spec, rest.strip(), shared)
    if kind == "philly":
        return read_philly(path, load=load, options=opts, source=spec)
    if kind == "pollux":
        return read_pollux(path, load=load, options=opts, source=spec)
    return read_gavel(path, seed=seed, load=load, options=opts, source=spec)
