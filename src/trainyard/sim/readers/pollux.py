"""Reader for Pollux workload files (`pollux/workloads*/workload-N.csv`: columns
``name,time,application,num_replicas,batch_size``).

Rules: one `SimJob` per row with id = ``name`` (unique), submit_time = ``time`` / `load`,
gpus = ``num_replicas``, `application`, `batch_size`, queue ``default`` and no duration (the
Pollux speed model derives run time from the application's profiles). The ``-0.5``/``-1.5``/
``-2.0`` workload sets already encode Pollux's relative job loads; `load` applies on top.
Takes no options.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from trainyard.sim.readers._common import check_options, csv_rows, parse_float, parse_int
from trainyard.sim.workload import SimJob, Workload, WorkloadError

__all__ = ["APPLICATIONS", "read_pollux"]

APPLICATIONS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
_COLUMNS = ("name", "time", "application", "num_replicas", "batch_size")


def read_pollux(path: Path, *, load: float, options: Mapping[str, str], source: str) -> Workload:
    """Read `path` (see the module docstring for the rules)."""
    check_options("pollux", options, ())
    name = str(path)
    jobs: list[SimJob] = []
    ids: set[str] = set()
    for line, row, (i_name, i_time, i_app, i_rep, i_bsz) in csv_rows(path, _COLUMNS):
        job_id = row[i_name].strip()
        if not job_id or job_id in ids:
            what = "empty" if not job_id else f"{job_id!r} is used twice"
            raise WorkloadError(
                f"{name}:{line}:name", f"job name {what}; give each job a unique name"
            )
        ids.add(job_id)
        time = parse_float(row[i_time], f"{name}:{line}:time", "time", minimum=None)
        if time < 0:
            raise WorkloadError(f"{name}:{line}:time", f"time must be >= 0 s, got {row[i_time]!r}")
        app = row[i_app].strip()
        if app not in APPLICATIONS:
            raise WorkloadError(
                f"{name}:{line}:application",
                f"unknown application {app!r}; the known ones: {', '.join(APPLICATIONS)}",
            )
        jobs.append(
            SimJob(
                id=job_id,
                submit_time=time / load,
                gpus=parse_int(row[i_rep], f"{name}:{line}:num_replicas", "num_replicas"),
                application=app,
                batch_size=parse_int(row[i_bsz], f"{name}:{line}:batch_size", "batch_size"),
            )
        )
    if not jobs:
        raise WorkloadError(source, "the file has no jobs")
    return Workload(kind="pollux", source=source, jobs=tuple(jobs))
