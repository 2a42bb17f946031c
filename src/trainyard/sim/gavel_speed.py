"""Gavel's measured throughputs as a speed model: `GavelSpeed`.

This module owns reading Gavel's `simulation_throughputs.json` (worker type -> job key
``"('<job type>', <scale factor>)"`` -> {"null": isolated steps/s, "<other job key>":
[own, other] when co-located}) and turning it into work and rates for `SimJob`s whose
`application` is the job type (e.g. ``"ResNet-50 (batch size 64)"``) and `gpus` the scale
factor. A job's `duration` is its run time on the `reference` worker type, so its work is
``duration x throughput(reference)`` steps and its rate on a placement is the isolated
throughput of its type there; a placement over more than one node uses the
``<type>_unconsolidated`` entry when the file has one. Co-location (space sharing) entries are
read but not used. No restart cost: the data carries none and none is charged here.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from trainyard.sim.speed import restart_seconds
from trainyard.sim.workload import SimJob, WorkloadError
from trainyard.textfile import TextFileError, read_text

__all__ = ["GavelSpeed"]

_KEY = re.compile(r"^\('(?P<app>[^']+)', (?P<sf>\d+)\)$")
_UNCONSOLIDATED = "_unconsolidated"


def _line_of(text: str, needle: str) -> tuple[int, int]:
    """1-based (line, column) of the first occurrence of `needle` in `text`, else (0, 0)."""
    i = text.find(needle)
    if i < 0:
        return 0, 0
    line = text.count("\n", 0, i) + 1
    return line, i - (text.rfind("\n", 0, i) + 1) + 1


class GavelSpeed:
    """SpeedModel over Gavel's isolated throughputs (steps per second)."""

    name = "gavel"
    first_start_s = 0.0

    def __init__(
        self, throughputs_json: Path, reference: str = "v100", *, restart_s: float = 0.0
    ) -> None:
        self.restart_s = restart_seconds(restart_s)
        path = Path(throughputs_json)
        if not path.is_file():
            raise WorkloadError(f"{path}:0:0", "throughputs file is missing")
        try:
            text = read_text(path)
        except TextFileError as exc:
            raise WorkloadError(f"{path}:0:0", f"throughputs file {exc}") from None
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as e:
            raise WorkloadError(f"{path}:{e.lineno}:{e.colno}", f"invalid JSON: {e.msg}") from None
        if not isinstance(raw, dict):
            raise WorkloadError(f"{path}:1:1", "top level must map worker type to jobs")
        # worker type -> (job type, scale factor) -> steps/s (0 = does not fit)
        self.tputs: dict[str, dict[tuple[str, int], float]] = {}
        for worker, jobs in raw.items():
            if not isinstance(jobs, dict):
                line, col = _line_of(text, f'"{worker}"')
                raise WorkloadError(f"{path}:{line}:{col}", f"{worker!r} must map job keys")
            table: dict[tuple[str, int], float] = {}
            for key, entry in jobs.items():
                m = _KEY.match(key)
                line, col = _line_of(text, json.dumps(key))
                if m is None:
                    raise WorkloadError(
                        f"{path}:{line}:{col}",
                        f"job key {key!r} is not \"('<job type>', <scale factor>)\"",
                    )
                tput = entry.get("null") if isinstance(entry, dict) else None
                if (
                    isinstance(tput, bool)
                    or not isinstance(tput, int | float)
                    or not math.isfinite(tput)
                    or tput < 0
                ):
                    raise WorkloadError(
                        f"{path}:{line}:{col}",
                        f'{worker} {key}: "null" must be a throughput >= 0, got {tput!r}',
                    )
                table[(m["app"], int(m["sf"]))] = float(tput)
            self.tputs[worker] = table
        if reference not in self.tputs:
            raise WorkloadError("reference", f"unknown worker type {reference!r}")
        self.reference = reference

    def throughput(self, worker: str, job: SimJob) -> float:
        """Isolated steps/s of the job's type at its scale factor on `worker` (0 = cannot
        run there, e.g. too little GPU memory)."""
        table = self.tputs.get(worker)
        if table is None:
            raise WorkloadError(
                job.id,
                f"unknown worker type {worker!r}: Gavel's throughputs are for "
                f"{', '.join(sorted(self.tputs))}; give the cluster's GPU type, e.g. "
                f"--cluster 4x4:{self.reference}",
            )
        tput = table.get((job.application or "", job.gpus))
        if tput is None:
            raise WorkloadError(
                job.id,
                f"no throughput for ({job.application!r}, {job.gpus}) on {worker}; "
                "the application must be a Gavel job type and gpus a measured scale factor",
            )
        return tput

    def runs_on(self, job: SimJob, gpu_type: str) -> bool:
        """Whether the job can run on `gpu_type` GPUs (measured throughput > 0)."""
        return self.throughput(gpu_type, job) > 0

    def work(self, job: SimJob) -> float:
        if job.duration is None:
            raise WorkloadError(job.id, "a Gavel job needs a duration on the reference type")
        tput = self.throughput(self.reference, job)
        if tput <= 0:
            raise WorkloadError(job.id, f"cannot run on the reference type {self.reference}")
        return job.duration * tput

    def rate(self, job: SimJob, per_node: tuple[int, ...], gpu_type: str) -> float:
        worker = gpu_type
        spread = self.tputs.get(gpu_type + _UNCONSOLIDATED, {})
        if len(per_node) > 1 and spread.get((job.application or "", job.gpus), 0) > 0:
            worker = gpu_type + _UNCONSOLIDATED  # measured across nodes; else consolidated
        tput = self.throughput(worker, job)
        if tput <= 0:
            raise WorkloadError(job.id, f"{job.application} x{job.gpus} cannot run on {worker}")
        return tput

    def isolated_rate(self, job: SimJob) -> float:
        return self.rate(job, (job.gpus,), self.reference)
