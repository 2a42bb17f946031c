"""Metrics of a simulation: one `SimResult` in, a flat JSON-able summary out.

This module owns the metric definitions (below), `summarize` (one run), `compare` (several
runs side by side) and `table_rows` with `TABLE_LEGEND` (the comparison table the CLI prints
and the report shows: one fixed unit per column, JCT and makespan in hours, waits in
minutes, shares in %). It only reads `trainyard.sim.records`; the plots and report files
belong to `trainyard.sim.report`.

Definitions (all times in seconds of simulated time):

- Window: [t0, t1] with t0 the first submission and t1 the last job end when every job
  finished, else `end_time` (the run was cut off). Time-weighted metrics integrate over it.
- Timeline: sample i holds from `samples[i].t` to `samples[i+1].t`, the last one until
  `end_time`; segments are clipped to the window; time no sample covers counts as idle
  (nothing allocated, nothing waiting).
- Waiting time: the part of the window where `pending_jobs > 0`.
- JCT = end - submit over finished jobs; queueing delay = first start - submit over jobs that
  started. Averages are arithmetic means, the median is the usual one (mean of the two middle
  values for an even count), and pN is `trainyard.stats.percentile` (numpy's
  ``inverted_cdf``, the nearest rank): the value of rank ceil(N/100 * n) (1-based) among the
  n sorted values (p99 of 3 values is the largest).
- makespan = last end - first submit (finished jobs; None when none finished).
- utilisation = ∫ allocated dt / ∫ total_gpus dt over the window; `utilisation_while_waiting`
  is the same over the waiting time only (None when nothing ever waited).
- fragmentation = ∫ fragmented_free dt / ∫ total_gpus dt over the waiting time: the share of
  the cluster's GPU-time left idle, while jobs wait, by free GPUs that some waiting job asks
  for no more of than are free yet cannot be placed for lack of a contiguous enough block.
  `fragmented_share_of_idle` = ∫ fragmented_free dt / ∫ (total_gpus - allocated) dt over
  the waiting time: the share of the idle GPU-time while waiting that fragmentation explains.
- Finish-time fairness (Themis, Mahajan et al., NSDI'20): N = time-averaged number of jobs in
  the system (submitted and not finished: running or pending) over the window; a job's fair
  share is total_gpus / N GPUs, so T_fair = isolated_time * max(1, gpus / (total_gpus / N))
  and rho = JCT / T_fair (finished jobs with isolated_time > 0). rho <= 1 means the job
  finished no later than on its fair share of a dedicated cluster. Reported: mean, max and
  the share of those jobs with rho <= 1.
- GPU-hours = sum of GPU-seconds held / 3600 (gpus * run_time for a rigid job; restart
  penalties included).

Floats are rounded to 4 decimals (`round(x, 4)`) so the JSON of a summary is byte-stable.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from trainyard.sim.records import JobRecord, Sample, SimResult
from trainyard.stats import percentile

__all__ = ["TABLE_LEGEND", "compare", "format_cell", "summarize", "table_rows", "window"]

_DIGITS = 4


def _r(x: float | None) -> float | None:
    """Round for byte-stable JSON (and turn -0.0 into 0.0)."""
    if x is None or math.isnan(x) or math.isinf(x):
        return None
    return round(x, _DIGITS) + 0.0


def _mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def window(result: SimResult) -> tuple[float, float]:
    """The measurement window [t0, t1] (see the module docstring)."""
    recs = result.records
    first_sample = result.samples[0].t if result.samples else 0.0
    t0 = min(r.submit for r in recs) if recs else first_sample
    ends = [r.end for r in recs if r.end is not None]
    all_done = bool(recs) and len(ends) == len(recs)
    t1 = max(ends) if all_done else max([result.end_time, *ends])
    return t0, max(t0, t1)


def _segments(result: SimResult, t0: float, t1: float) -> Iterator[tuple[float, Sample]]:
    """(duration, sample) for each timeline segment clipped to [t0, t1], zero-length skipped."""
    samples = result.samples
    for i, s in enumerate(samples):
        stop = samples[i + 1].t if i + 1 < len(samples) else max(result.end_time, s.t)
        dt = min(stop, t1) - max(s.t, t0)
        if dt > 0:
            yield dt, s


def _jobs_in_system(records: Sequence[JobRecord], t0: float, t1: float) -> float:
    """Time-averaged number of submitted, unfinished jobs over [t0, t1]."""
    if t1 <= t0:
        return float(len(records))
    total = math.fsum(
        max(0.0, min(t1 if r.end is None else r.end, t1) - max(r.submit, t0)) for r in records
    )
    return total / (t1 - t0)


def _fairness(result: SimResult, n_avg: float) -> dict[str, Any]:
    rhos: list[float] = []
    for r in result.records:
        jct = r.jct
        if jct is None or r.isolated_time <= 0:
            continue
        share = result.total_gpus / n_avg if n_avg > 0 else float(result.total_gpus)
        t_fair = r.isolated_time * max(1.0, r.gpus / share) if share > 0 else r.isolated_time
        rhos.append(jct / t_fair)
    return {
        "fairness_jobs": len(rhos),
        "fairness_rho_mean": _r(_mean(rhos)),
        "fairness_rho_max": _r(max(rhos)) if rhos else None,
        "fairness_share_fair": _r(sum(1 for x in rhos if x <= 1.0) / len(rhos)) if rhos else None,
    }


def _goodput(result: SimResult) -> dict[str, Any]:
    """How fast finished jobs progressed against their requested size: `speedup` = isolated
    time (alone, at the size asked for) / run time (restart penalties included), averaged
    over jobs; per GPU: isolated GPU-seconds / GPU-seconds held, over all finished jobs
    (an elastic job grown well is above 1 in speedup; below 1 per GPU when it scales
    sublinearly)."""
    done = [r for r in result.records if r.end is not None and r.run_time > 0]
    speedups = [r.isolated_time / r.run_time for r in done]
    held = math.fsum(r.held for r in done)
    ideal = math.fsum(r.isolated_time * r.gpus for r in done)
    return {
        "goodput_speedup_mean": _r(_mean(speedups)),
        "goodput_per_gpu": _r(ideal / held) if held > 0 else None,
    }


def _queue_summary(records: Sequence[JobRecord]) -> dict[str, Any]:
    jcts = [j for j in (r.jct for r in records) if j is not None]
    delays = [d for d in (r.queueing_delay for r in records) if d is not None]
    return {
        "jobs": len(records),
        "finished": len(jcts),
        "jct_avg": _r(_mean(jcts)),
        "queueing_delay_avg": _r(_mean(delays)),
        "queueing_delay_p99": _r(percentile(delays, 99)),
        "gpu_hours": _r(math.fsum(r.held for r in records) / 3600),
    }


def summarize(result: SimResult) -> dict[str, Any]:
    """Every metric of one run as a flat, deterministic, JSON-able dict (plus `queues`)."""
    recs = result.records
    jcts = [j for j in (r.jct for r in recs) if j is not None]
    delays = [d for d in (r.queueing_delay for r in recs) if d is not None]
    ends = [r.end for r in recs if r.end is not None]
    t0, t1 = window(result)
    total = result.total_gpus

    alloc_area = 0.0  # ∫ allocated over the window
    wait_time = 0.0  # time with pending_jobs > 0
    wait_alloc = 0.0  # ∫ allocated while waiting
    wait_frag = 0.0  # ∫ fragmented_free while waiting
    for dt, s in _segments(result, t0, t1):
        alloc_area += dt * s.allocated
        if s.pending_jobs > 0:
            wait_time += dt
            wait_alloc += dt * s.allocated
            wait_frag += dt * s.fragmented_free
    span = t1 - t0
    cap = total * span
    wait_cap = total * wait_time
    wait_idle = wait_cap - wait_alloc

    n_avg = _jobs_in_system(recs, t0, t1)
    queues = sorted({*result.queues, *(r.queue for r in recs)})
    by_queue = {q: _queue_summary([r for r in recs if r.queue == q]) for q in queues}

    return {
        "workload": result.workload,
        "cluster": result.cluster,
        "policy": result.policy,
        "seed": result.seed,
        "total_gpus": total,
        "end_time": _r(result.end_time),
        "rounds": result.rounds,
        "jobs": len(recs),
        "finished": len(jcts),
        "unfinished": len(recs) - len(jcts),
        "started": len(delays),
        "jct_avg": _r(_mean(jcts)),
        "jct_median": _r(statistics.median(jcts)) if jcts else None,
        "jct_p99": _r(percentile(jcts, 99)),
        "queueing_delay_avg": _r(_mean(delays)),
        "queueing_delay_p99": _r(percentile(delays, 99)),
        "makespan": _r(max(ends) - t0) if ends else None,
        "window_start": _r(t0),
        "window_end": _r(t1),
        "utilisation": _r(alloc_area / cap) if cap > 0 else None,
        "waiting_time": _r(wait_time),
        "utilisation_while_waiting": _r(wait_alloc / wait_cap) if wait_cap > 0 else None,
        "fragmentation": _r(wait_frag / wait_cap) if wait_cap > 0 else None,
        "fragmented_share_of_idle": _r(wait_frag / wait_idle) if wait_idle > 0 else None,
        "avg_jobs_in_system": _r(n_avg),
        **_fairness(result, n_avg),
        **_goodput(result),
        "preemptions": sum(r.preemptions for r in recs),
        "restarts": sum(r.restarts for r in recs),
        "resizes": sum(r.resizes for r in recs),
        "jobs_resized": sum(1 for r in recs if r.resizes),
        "jobs_preempted": sum(1 for r in recs if r.preemptions > 0),
        "gpu_hours": _r(math.fsum(r.held for r in recs) / 3600),
        "queues": by_queue,
    }


def _labels(results: Sequence[SimResult]) -> list[str]:
    """Unique row labels: the policy, then the seed, then a counter when still ambiguous."""
    policies = [r.policy for r in results]
    labels = [
        p if policies.count(p) == 1 else f"{p} (seed {r.seed})"
        for p, r in zip(policies, results, strict=True)
    ]
    out: list[str] = []
    for label in labels:
        unique, k = label, 2
        while unique in out:
            unique, k = f"{label} #{k}", k + 1
        out.append(unique)
    return out


def compare(results: Sequence[SimResult]) -> dict[str, dict[str, Any]]:
    """Summaries keyed by policy (input order; the seed or a counter disambiguates repeats)."""
    return {label: summarize(r) for label, r in zip(_labels(results), results, strict=True)}


# Durations in the table: one fixed unit per column, whatever the run's scale, so that the
# same column reads the same way in every row and every run (the JSON stays in seconds).
_UNIT_SECONDS = {"h": 3600.0, "min": 60.0}

# (summary key, header, kind): kind "h" / "min" are durations in that unit, "pct" shares
# shown as percentages, "num" plain ratios, "int" counts.
_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("jobs", "jobs", "int"),
    ("finished", "done", "int"),
    ("jct_avg", "JCT avg (h)", "h"),
    ("jct_median", "JCT median (h)", "h"),
    ("jct_p99", "JCT p99 (h)", "h"),
    ("queueing_delay_avg", "wait avg (min)", "min"),
    ("queueing_delay_p99", "wait p99 (min)", "min"),
    ("makespan", "makespan (h)", "h"),
    ("gpu_hours", "GPU-h", "num"),
    ("utilisation", "util (%)", "pct"),
    ("utilisation_while_waiting", "util waiting (%)", "pct"),
    ("fragmentation", "frag (%)", "pct"),
    ("fairness_rho_mean", "rho avg", "num"),
    ("fairness_rho_max", "rho max", "num"),
    ("fairness_share_fair", "rho<=1 (%)", "pct"),
    ("goodput_speedup_mean", "speedup (x)", "num"),
    ("preemptions", "preempt", "int"),
    ("resizes", "resize", "int"),
)

# What each header of `table_rows` means, in words (printed under the CLI's table and in
# the report); the module docstring has the exact definitions.
TABLE_LEGEND: tuple[tuple[str, str], ...] = (
    ("jobs, done", "jobs in the workload, and how many of them finished"),
    (
        "JCT avg/median/p99 (h)",
        "job completion time, submission to end, of the finished jobs, in hours",
    ),
    ("wait avg/p99 (min)", "queueing delay, submission to first start, in minutes"),
    ("makespan (h)", "first submission to last job end, in hours"),
    ("GPU-h", "GPU-hours the jobs held, restarts included: what their JCTs cost"),
    ("util (%)", "share of the cluster's GPU-time that was allocated, over the whole run"),
    ("util waiting (%)", "the same, counted only while some job was waiting to start"),
    (
        "frag (%)",
        "share of the GPU-time, while jobs waited, left idle by fragmentation "
        "(enough GPUs free, but not together)",
    ),
    (
        "rho avg/max",
        "finish-time fairness: JCT / the time on a fair share of the cluster (<= 1 is fair)",
    ),
    ("rho<=1 (%)", "share of the finished jobs with rho <= 1"),
    ("speedup (x)", "isolated run time at the asked size / actual run time, mean per job"),
    ("preempt, resize", "preemptions and elastic resizes, summed over the jobs"),
    ("-", "no value (e.g. no job finished, or none ever waited)"),
)

_UNITS = (("h", 3600.0), ("m", 60.0), ("s", 1.0))


def duration_unit(max_seconds: float) -> tuple[str, float]:
    """The unit (name, seconds per unit) that shows `max_seconds` best: h, m or s (for plot
    axes, each of which states its unit; the tables use fixed units instead)."""
    for name, size in _UNITS:
        if max_seconds >= 2 * size:
            return name, size
    return "s", 1.0


def format_cell(value: Any, kind: str) -> str:
    """One table cell: `kind` as in the table's columns ("h", "min", "pct", "num", "int")."""
    if value is None:
        return "-"
    if kind == "int":
        return str(value)
    if kind == "pct":
        return f"{100 * value:.1f}"
    if kind in _UNIT_SECONDS:
        return f"{value / _UNIT_SECONDS[kind]:.2f}"
    return f"{value:.2f}"


def table_rows(summaries: Mapping[str, Mapping[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The comparison as a header and formatted rows (the CLI's table and the report); each
    column has one unit, the same for every row and every run (see `TABLE_LEGEND`)."""
    header = ["policy", *(title for _, title, _ in _COLUMNS)]
    rows = [
        [label, *(format_cell(s.get(key), kind) for key, _, kind in _COLUMNS)]
        for label, s in summaries.items()
    ]
    return header, rows
