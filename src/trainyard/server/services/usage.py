"""Usage: GPU-, CPU- and memory-seconds per tenant, user, queue or job, to the second.

Every interval a job spent RUNNING is a `UsageRecord` (written by `lifecycle.transition` when
the job leaves RUNNING: finished, failed, preempted, cancelled, node lost), so preempted and
failed attempts count as well, each until its run stopped (`extend_to_stop`: a cancelled,
preempted or resized run holds its GPUs through its grace period); a job running now adds
its open interval up to `now`. Each interval counts for the part inside [since, until)
(`accounting.overlap`); an empty window has no usage. A caller sees its own tenant (an
operator reads every tenant with `trainyard admin usage`). Served by `GET /v1/usage` and
printed by `trainyard usage` (table, CSV or JSON).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from trainyard.accounting import billed_cpus, overlap
from trainyard.server.api.errors import ApiError
from trainyard.server.db import Job, JobState, Queue, Tenant, UsageRecord, User

BY: Final = ("tenant", "user", "queue", "job")


@dataclass
class UsageRow:
    key: str
    gpu_seconds: float = 0.0
    cpu_seconds: float = 0.0
    memory_gb_seconds: float = 0.0
    intervals: int = 0
    jobs: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Interval:
    job_id: str
    tenant_id: int
    user_id: int | None
    queue_id: int
    start: float
    end: float
    gpus: int
    cpus: float
    memory_gb: float


def intervals(
    session: Session, *, tenant_id: int | None, since: float, until: float, now: float,
    job_id: str | None = None,
) -> list[Interval]:  # fmt: skip
    """Every run interval that overlaps [since, until), the open ones of running jobs
    included (ending at `now`); of one job when `job_id` is given."""
    query = select(UsageRecord).where(UsageRecord.ended_at > since, UsageRecord.started_at < until)
    if tenant_id is not None:
        query = query.where(UsageRecord.tenant_id == tenant_id)
    if job_id is not None:
        query = query.where(UsageRecord.job_id == job_id)
    out = [
        Interval(
            r.job_id,
            r.tenant_id,
            r.user_id,
            r.queue_id,
            r.started_at,
            r.ended_at,
            r.gpus,
            r.cpus,
            r.memory_gb,
        )
        for r in session.scalars(query)
    ]
    running = select(Job).where(Job.state == JobState.RUNNING, Job.started_at < until)
    if tenant_id is not None:
        running = running.where(Job.tenant_id == tenant_id)
    if job_id is not None:
        running = running.where(Job.id == job_id)
    for j in session.scalars(running):
        assert j.started_at is not None
        out.append(
            Interval(
                j.id,
                j.tenant_id,
                j.user_id,
                j.queue_id,
                j.started_at,
                max(now, j.started_at),
                j.gpus,
                billed_cpus(j.cpus, j.spec, j.gpus),
                j.memory_gb,
            )
        )
    return out


def extend_to_stop(
    session: Session, job_id: str, attempt: int, ended_at: float, at_most_s: float
) -> None:
    """A run that went on after its job left RUNNING (a cancel, a preemption or a resize
    stops it through its grace period, holding its GPUs) is billed until it stopped: the
    interval of that attempt ends at `ended_at`, at most `at_most_s` after it was closed (a
    run whose end is not recorded is seen to stop only when a server looks)."""
    record = session.scalars(
        select(UsageRecord)
        .where(UsageRecord.job_id == job_id, UsageRecord.attempt == attempt)
        .order_by(UsageRecord.id.desc())
        .limit(1)
    ).first()
    if record is not None and ended_at > record.ended_at:
        record.ended_at = min(ended_at, record.ended_at + at_most_s)


def totals_by_tenant(session: Session) -> list[tuple[str, float, float, float]]:
    """(tenant, GPU-s, CPU-s, memory GB-s) of every finished run interval, by tenant name
    (the `/metrics` counters: they only grow, as records are never deleted)."""
    length = UsageRecord.ended_at - UsageRecord.started_at
    rows = session.execute(
        select(
            Tenant.name,
            func.sum(UsageRecord.gpus * length),
            func.sum(UsageRecord.cpus * length),
            func.sum(UsageRecord.memory_gb * length),
        )
        .join(Tenant, Tenant.id == UsageRecord.tenant_id)
        .group_by(Tenant.name)
        .order_by(Tenant.name)
    )
    return [(name, float(g or 0), float(c or 0), float(m or 0)) for name, g, c, m in rows]


def usage(
    session: Session,
    *,
    tenant_id: int | None,
    since: float,
    until: float,
    by: str,
    now: float,
    job_id: str | None = None,
) -> list[UsageRow]:
    """Usage in [since, until) grouped `by` tenant, user, queue or job, largest first; of
    one job when `job_id` is given (what a job's own token may read)."""
    if by not in BY:
        raise ApiError(422, f"unknown grouping {by!r}; use one of {', '.join(BY)}", field="by")
    if not until > since:
        return []  # an empty window holds no usage
    spans = intervals(
        session, tenant_id=tenant_id, since=since, until=until, now=now, job_id=job_id
    )
    names = _names(session, by)
    rows: dict[str, UsageRow] = {}
    for iv in spans:
        seconds = overlap(iv.start, iv.end, since, until)
        if seconds <= 0:
            continue
        key = names(iv)
        row = rows.setdefault(key, UsageRow(key))
        row.gpu_seconds += iv.gpus * seconds
        row.cpu_seconds += iv.cpus * seconds
        row.memory_gb_seconds += iv.memory_gb * seconds
        row.intervals += 1
        row.jobs.add(iv.job_id)
    return sorted(rows.values(), key=lambda r: (-r.gpu_seconds, r.key))


def _names(session: Session, by: str) -> Callable[[Interval], str]:
    if by == "job":
        return lambda iv: iv.job_id
    attr = f"{by}_id"
    columns = {"tenant": (Tenant.id, Tenant.name), "user": (User.id, User.name),
               "queue": (Queue.id, Queue.name)}[by]  # fmt: skip
    known: dict[int, str] = {i: n for i, n in session.execute(select(*columns))}

    def name(iv: Interval) -> str:
        ident = getattr(iv, attr)
        if ident is None:
            return "(deleted user)"
        return str(known.get(ident, f"#{ident} (deleted {by})"))  # usage outlives the row

    return name


@dataclass(frozen=True)
class Series:
    """Usage over time: `edges` are the bucket boundaries (len(buckets) + 1); `gpu_hours`
    maps each key (a tenant, user or queue) to its GPU-hours per bucket; `cluster_gpu_hours`
    is every tenant's use per bucket, unnamed (the cluster's utilisation)."""

    edges: list[float]
    gpu_hours: dict[str, list[float]]
    cluster_gpu_hours: list[float]


def series(
    session: Session,
    *,
    tenant_id: int,
    since: float,
    until: float,
    buckets: int,
    by: str,
    now: float,
) -> Series:
    """GPU-hours of the tenant per bucket of [since, until) grouped `by` (as `usage`), and
    the whole cluster's per bucket (no names: for utilisation)."""
    if by not in BY or by == "job":
        raise ApiError(422, f"unknown grouping {by!r}; use tenant, user or queue", field="by")
    buckets = max(1, buckets)
    width = max(until - since, 1e-9) / buckets
    edges = [since + i * width for i in range(buckets + 1)]
    spans = intervals(session, tenant_id=None, since=since, until=until, now=now)
    names = _names(session, by)
    ours: dict[str, list[float]] = {}
    cluster = [0.0] * buckets
    for iv in spans:
        first = max(0, int((max(iv.start, since) - since) // width))
        last = min(buckets - 1, int((min(iv.end, until) - since) // width))
        for b in range(first, last + 1):
            hours = iv.gpus * overlap(iv.start, iv.end, edges[b], edges[b + 1]) / 3600.0
            if hours <= 0:
                continue
            cluster[b] += hours
            if iv.tenant_id == tenant_id:
                ours.setdefault(names(iv), [0.0] * buckets)[b] += hours
    return Series(edges=edges, gpu_hours=ours, cluster_gpu_hours=cluster)
