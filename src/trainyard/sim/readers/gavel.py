"""Job generator for Gavel's throughput file (`gavel/simulation_throughputs.json`).

Gavel ships measured throughputs, not a job trace; its simulator generates jobs. This module
implements the rule described in Gavel's code (stanford-futuredata/gavel,
``scheduler/utils.py``: ``generate_job``, ``_generate_scale_factor``, ``_generate_duration``)
and paper (Narayanan et al., "Heterogeneity-Aware Cluster Scheduling Policies for Deep
Learning Workloads", OSDI'20, section 7.1), written from that description:

1. scale factor (GPUs): with ``r ~ U(0,1)``: 1 if r < 0.7, 2 if r < 0.8, 4 if r < 0.95, else 8
   (Gavel's Philly-derived mix); option ``multi_gpu=false`` makes every job 1 GPU;
2. run time on the reference type (V100) at that scale: with probability 0.8,
   ``60 * 10**U(1.5, 3)`` s, else ``60 * 10**U(3, 4)`` s (10^x minutes);
3. job type: uniform over the file's models (``'<model> (batch size B)'`` keys) that have a
   V100 throughput at that scale factor (Gavel re-draws until a distributed type is found,
   which is the same distribution);
4. arrivals: Poisson, exponential gaps with mean ``3600 / rate_per_hour`` s, the first job at
   0; gaps are divided by `load`.

A job is `SimJob(id="gavel-I", gpus=scale factor, application=model key, batch_size=B (when
the key names one), duration=run time in seconds on V100 at that scale factor)`. As in Gavel
(``num_steps = run_time * throughput[v100][(model, sf)]``) the job's work is ``duration x`` its
V100 isolated throughput in steps; the Gavel speed model turns that into run time on other
types.

Options: ``limit`` (jobs, default 500), ``rate_per_hour`` (default 2.0, see `DEFAULT_RATE`),
``multi_gpu`` (true/false, default true). One `random.Random(seed)` draws, per job and in
this order, the scale factor (not with ``multi_gpu=false``), the duration, the job type and
(after the first job) the gap.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Mapping
from pathlib import Path

from trainyard.sim.readers._common import check_options, positive_int_option
from trainyard.sim.workload import SimJob, Workload, WorkloadError
from trainyard.textfile import TextFileError, read_text

__all__ = ["DEFAULT_RATE", "OPTIONS", "REFERENCE", "job_types", "read_gavel"]

OPTIONS = ("limit", "rate_per_hour", "multi_gpu")
REFERENCE = "v100"
# Offered load of the default mix on Gavel's 8x4:k80+8x4:p100+8x4:v100-type cluster (measured
# on 20,000 generated jobs): a job needs E[sf x run time] ~ 32.7 V100 GPU-hours; for that job
# mix the 96 GPUs are worth ~74 V100s (32 x 2.32: V100 1 plus the P100 and K80 isolated
# throughputs over V100's at the job's scale), so ~2.3 jobs/hour saturate them and 2.0 jobs/hour
# keeps the cluster busy (~88% offered load) without an ever-growing queue.
DEFAULT_RATE = 2.0
# jobs per hour: below a job in 1,000 hours the arrival times outgrow the clock's rounds
MIN_RATE, MAX_RATE = 1e-3, 1e6
_KEY = re.compile(r"^\('(.+)', (\d+)\)$")
_BATCH = re.compile(r"\(batch size (\d+)\)$")


def _where(name: str, text: str, key: str) -> str:
    """``file:line:key`` with the line of the key's first appearance in the file (else 1)."""
    at = text.find(json.dumps(key))
    line = text.count("\n", 0, at) + 1 if at >= 0 else 1
    return f"{name}:{line}:{key}"


def job_types(path: Path) -> dict[int, list[str]]:
    """Scale factor -> the model keys with a positive V100 isolated throughput at that scale,
    in file order. Malformed JSON or structure raises a `WorkloadError` at ``file:line:col``."""
    name = str(path)
    try:
        text = read_text(path)
    except TextFileError as exc:
        raise WorkloadError(f"{name}:0:0", f"the file {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WorkloadError(
            f"{name}:{exc.lineno}:{exc.colno}", f"not valid JSON: {exc.msg}"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get(REFERENCE), dict):
        raise WorkloadError(
            _where(name, text, REFERENCE),
            f"needs an object {REFERENCE!r} (worker type -> job key -> throughputs)",
        )
    types: dict[int, list[str]] = {}
    for key, entry in data[REFERENCE].items():
        match = _KEY.match(key)
        if match is None:
            raise WorkloadError(
                _where(name, text, key),
                f"job key {key!r} is not \"('<model>', <scale factor>)\"",
            )
        tput = entry.get("null") if isinstance(entry, dict) else None
        if (
            not isinstance(tput, int | float)
            or isinstance(tput, bool)
            or not math.isfinite(tput)
            or tput <= 0
        ):
            raise WorkloadError(
                _where(name, text, key),
                f'{key!r} needs a positive isolated throughput under "null", got {tput!r}',
            )
        types.setdefault(int(match.group(2)), []).append(match.group(1))
    if not types.get(1):
        raise WorkloadError(
            _where(name, text, REFERENCE), "no single-GPU job type (scale factor 1)"
        )
    return types


def _scale_factor(rng: random.Random) -> int:
    r = rng.random()
    return 1 if r < 0.7 else 2 if r < 0.8 else 4 if r < 0.95 else 8


def _run_time(rng: random.Random) -> float:
    if rng.random() >= 0.8:
        return 60.0 * 10 ** rng.uniform(3.0, 4.0)
    return 60.0 * 10 ** rng.uniform(1.5, 3.0)


def _options(options: Mapping[str, str]) -> tuple[int, float, bool]:
    check_options("gavel", options, OPTIONS)
    limit = positive_int_option(options, "limit", 500)
    raw = options.get("rate_per_hour")
    rate = DEFAULT_RATE
    if raw is not None:
        try:
            rate = float(raw)
        except ValueError:
            rate = -1.0
        if not MIN_RATE <= rate <= MAX_RATE:  # NaN too
            raise WorkloadError(
                "rate_per_hour",
                f"must be {MIN_RATE:g} to {MAX_RATE:g} jobs per hour, got {raw!r}",
            )
    flag = options.get("multi_gpu", "true").strip().lower()
    if flag not in ("true", "false", "1", "0", "yes", "no"):
        raise WorkloadError("multi_gpu", f"must be true or false, got {options['multi_gpu']!r}")
    return limit, rate, flag in ("true", "1", "yes")


def read_gavel(
    path: Path, *, seed: int, load: float, options: Mapping[str, str], source: str
) -> Workload:
    """Generate a workload from `path` (see the module docstring for the rules)."""
    limit, rate, multi_gpu = _options(options)
    types = job_types(path)
    rng = random.Random(seed)
    mean_gap = 3600.0 / rate
    now = 0.0
    jobs: list[SimJob] = []
    for i in range(limit):
        sf = _scale_factor(rng) if multi_gpu else 1
        if not types.get(sf):
            sf = 1
        run_time = _run_time(rng)
        model = rng.choice(types[sf])
        if i:
            now += rng.expovariate(1.0 / mean_gap) / load
        batch = _BATCH.search(model)
        jobs.append(
            SimJob(
                id=f"gavel-{i}",
                submit_time=now,
                gpus=sf,
                duration=run_time,
                application=model,
                batch_size=int(batch.group(1)) if batch else None,
            )
        )
    return Workload(kind="gavel", source=source, jobs=tuple(jobs))
