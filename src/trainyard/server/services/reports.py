"""Reports from running jobs (issue 15): `POST /v1/jobs/{id}/reports`, and what they feed.

A running job (the SDK's `Reporter`, with the job's own token) reports, at a bounded rate,
one aggregate of the steps it trained since its last report: the GPUs and nodes it ran on,
the global batch, the mean seconds per step and how many steps that mean covers, its
progress (steps, samples, loss) and, when it measures them, the gradient statistics of
Pollux's statistical efficiency and, when it knows them, the samples it still has to
train. `record` keeps:
- per (GPUs, nodes, batch), the mean step time (`JobObservation`), weighted by steps, the
  weight of the past capped at `MAX_WEIGHT` steps so that the mean follows a job whose speed
  drifts (data loading warming up, a neighbour leaving);
- the latest progress (`JobProgress`);
- the reports over time (`JobReportSample`): one every `SAMPLE_EVERY_S` at most per job and
  attempt, and one whenever the world size changes, for the console's charts (`history`).
`observations` gives them back as the core's `Elastic` for the scheduling round, so the
goodput model fits the job's measured throughput rather than its prior.
Only a RUNNING job reports (409 otherwise), or one whose run is being stopped for a resize
or a preemption (RESIZING, PREEMPTED: the SDK's last report as it exits, which an outside
review saw refused, so the step counts per size fell short), and only for the run it is
in: the report's
`attempt` must be the running attempt and, for a job that holds GPUs, its `gpus` the GPUs
the job holds and its `nodes` no more than the nodes they are on (409 naming the field
otherwise). So neither a stale report nor a made-up one (a job's own code may send any body
with its token) can put step times at sizes the job never ran into its goodput model, nor
make the hang detector take another attempt's report for this one's (found by an outside
review). A job's token may report for that job only, a member or admin of its tenant for
any of the tenant's jobs (404 for other tenants' jobs).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

import trainyard.server.api.schemas as schemas
from trainyard import core
from trainyard.server.api.auth import Principal
from trainyard.server.api.errors import ApiError
from trainyard.server.db.base import JobState
from trainyard.server.db.jobs import Job
from trainyard.server.db.reports import JobObservation, JobProgress, JobReportSample
from trainyard.server.services.jobs import own_job

MAX_WEIGHT = 200  # steps: the most weight the past keeps in a mean step time
MAX_SAMPLES = 16  # observations per job passed to the core (the most recent)
SAMPLE_EVERY_S = 30.0  # the least time between two kept reports of a job (`history`)
MAX_HISTORY = 2000  # the most samples `history` gives back (evenly thinned)


# a run reports while it runs, and its last report as it is stopped for a resize or an eviction
_REPORTING = (JobState.RUNNING, JobState.RESIZING, JobState.PREEMPTED)


def record(
    session: Session, who: Principal, job_id: str, report: schemas.ReportIn, *, now: float
) -> None:
    """Store one report of a running job (see the module docstring)."""
    job = own_job(session, who, job_id)
    if who.job_id is None:
        who.require_write("report for jobs")
    if job.state not in _REPORTING:
        raise ApiError(
            409, f"job {job.id} is {job.state.value}: only a running job reports", field="state"
        )
    _check_run(job, report)
    key = (job.id, report.gpus, report.nodes, report.batch)
    obs = session.get(JobObservation, key)
    if obs is None:
        session.add(
            JobObservation(
                job_id=job.id, gpus=report.gpus, nodes=report.nodes, batch=report.batch,
                step_time=report.step_time, steps=report.steps, updated_at=now,
            )
        )  # fmt: skip
    else:
        past = min(obs.steps, MAX_WEIGHT)
        obs.step_time = (obs.step_time * past + report.step_time * report.steps) / (
            past + report.steps
        )
        obs.steps = min(obs.steps + report.steps, 2**31 - 1)
        obs.updated_at = now
    progress = session.get(JobProgress, job.id)
    _sample(session, job.id, report, progress, now=now)
    values: dict[str, Any] = {
        "attempt": report.attempt, "world_size": report.world_size, "step": report.step,
        "samples": report.samples, "loss": report.loss, "grad_sqr": report.grad_sqr,
        "grad_var": report.grad_var, "remaining_samples": report.remaining_samples,
        "updated_at": now,
    }  # fmt: skip
    if progress is None:
        session.add(JobProgress(job_id=job.id, **values))
    else:
        for name, value in values.items():
            if value is None and name in ("grad_sqr", "grad_var", "remaining_samples"):
                continue  # measured now and then: the last measurement stands
            setattr(progress, name, value)


def _check_run(job: Job, report: schemas.ReportIn) -> None:
    """A 409 naming the field when the report is not of the job's running attempt or names
    GPUs or nodes the job does not hold."""
    running = max(0, job.attempt - 1)
    if report.attempt != running:
        raise ApiError(
            409, f"job {job.id} runs attempt {running}, not {report.attempt}: a report "
            "comes from the running attempt (TRAINYARD_ATTEMPT)", field="attempt",
        )  # fmt: skip
    placement = job.placement or []
    held = sum(len(part.get("devices", [])) for part in placement)
    if job.state == JobState.RESIZING:  # it holds its old and new devices; it ran on the old
        held = job.gpus
    if held and report.gpus != held:
        raise ApiError(
            409, f"job {job.id} holds {held} GPU(s), not {report.gpus}: a report gives the "
            "GPUs its run trains on", field="gpus",
        )  # fmt: skip
    if held and report.nodes > len(placement):
        raise ApiError(
            409,
            f"job {job.id} runs on {len(placement)} node(s), not {report.nodes}",
            field="nodes",
        )


def _sample(
    session: Session,
    job_id: str,
    report: schemas.ReportIn,
    progress: JobProgress | None,
    *,
    now: float,
) -> None:
    """Keep this report over time when the job's last kept one is old enough, or the world
    size or attempt changed since the previous report."""
    changed = progress is None or (progress.world_size, progress.attempt) != (
        report.world_size,
        report.attempt,
    )
    if not changed:
        last = session.scalar(
            select(func.max(JobReportSample.time)).where(JobReportSample.job_id == job_id)
        )
        if last is not None and now - last < SAMPLE_EVERY_S:
            return
    session.add(
        JobReportSample(
            job_id=job_id, time=now, attempt=report.attempt, world_size=report.world_size,
            gpus=report.gpus, batch=report.batch, step_time=report.step_time, step=report.step,
            samples=report.samples, loss=report.loss, grad_sqr=report.grad_sqr,
            grad_var=report.grad_var,
        )
    )  # fmt: skip


def history(session: Session, job_id: str) -> list[JobReportSample]:
    """The job's kept reports, oldest first (at most `MAX_HISTORY`, evenly thinned)."""
    rows = list(
        session.scalars(
            select(JobReportSample)
            .where(JobReportSample.job_id == job_id)
            .order_by(JobReportSample.time, JobReportSample.id)
        )
    )
    if len(rows) <= MAX_HISTORY:
        return rows
    step = len(rows) / MAX_HISTORY
    return [rows[int(i * step)] for i in range(MAX_HISTORY - 1)] + [rows[-1]]


def observations(session: Session, job_ids: Iterable[str]) -> dict[str, core.Elastic]:
    """The core's `Elastic` facts of these jobs that reported (batch range left to the
    caller: it comes from the spec), by job id."""
    ids = sorted(set(job_ids))
    if not ids:
        return {}
    samples: dict[str, list[core.StepSample]] = defaultdict(list)
    query = (
        select(JobObservation)
        .where(JobObservation.job_id.in_(ids))
        .order_by(JobObservation.job_id, JobObservation.updated_at)
    )
    for obs in session.scalars(query):
        samples[obs.job_id].append(core.StepSample(obs.gpus, obs.nodes, obs.batch, obs.step_time))
    stats = {
        p.job_id: p for p in session.scalars(select(JobProgress).where(JobProgress.job_id.in_(ids)))
    }
    out: dict[str, core.Elastic] = {}
    for job_id in ids:
        progress = stats.get(job_id)
        seen = tuple(samples.get(job_id, ())[-MAX_SAMPLES:])
        if not seen and progress is None:
            continue
        out[job_id] = core.Elastic(
            samples=seen,
            grad_sqr=(progress.grad_sqr or 0.0) if progress is not None else 0.0,
            grad_var=(progress.grad_var or 0.0) if progress is not None else 0.0,
            remaining=float(progress.remaining_samples or 0) if progress is not None else 0.0,
        )
    return out


def progress_of(session: Session, job_id: str) -> dict[str, Any] | None:
    """The latest report and the measured step times of a job, for `describe`."""
    progress = session.get(JobProgress, job_id)
    rows = list(
        session.scalars(
            select(JobObservation)
            .where(JobObservation.job_id == job_id)
            .order_by(JobObservation.gpus, JobObservation.nodes, JobObservation.batch)
        )
    )
    if progress is None and not rows:
        return None
    out: dict[str, Any] = {
        "observed": [
            {"gpus": o.gpus, "nodes": o.nodes, "batch": o.batch, "step_time": o.step_time,
             "steps": o.steps, "samples_per_s": o.batch / o.step_time if o.step_time else None}
            for o in rows
        ],
    }  # fmt: skip
    if progress is not None:
        out.update(
            attempt=progress.attempt, world_size=progress.world_size, step=progress.step,
            samples=progress.samples, loss=progress.loss, grad_sqr=progress.grad_sqr,
            grad_var=progress.grad_var, remaining_samples=progress.remaining_samples,
            reported_at=progress.updated_at,
        )  # fmt: skip
    return out
