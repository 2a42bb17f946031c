"""The work behind the routes. Every function takes the request's session and the caller;
writes happen in the caller's one transaction, committed by the route's session scope only
when no error was raised (so a 4xx leaves the database as it was)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, func, or_, select
from sqlalchemy.orm import Session, selectinload
from sqlalchemy.orm.exc import StaleDataError

import trainyard.server.api.schemas as schemas
from trainyard.jobspec import JobSpec, JobSpecError, Limits, parse_job_spec
from trainyard.server import lifecycle
from trainyard.server.api.auth import Principal
from trainyard.server.api.errors import ApiError, not_found
from trainyard.server.db.base import JobState
from trainyard.server.db.cluster import Node, Queue
from trainyard.server.db.jobs import Job
from trainyard.server.db.tenancy import Tenant, User
from trainyard.server.metrics import PLATFORM
from trainyard.server.services import audit

YAML_TYPES = frozenset({"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"})
LIST_LIMIT = 1000
_JOB_ID = re.compile(r"[A-Za-z0-9_-]{1,32}")


def submittable_by(tenant_id: int) -> ColumnElement[bool]:
    """The queues a tenant's users may submit to: shared ones and the tenant's own."""
    return or_(Queue.tenant_id.is_(None), Queue.tenant_id == tenant_id)


def _visible_queues(session: Session, who: Principal) -> list[Queue]:
    """Queues the caller may submit to (`submittable_by`), by name."""
    query = select(Queue).where(submittable_by(who.tenant_id))
    return list(session.scalars(query.order_by(Queue.name)))


def spec_error(error: JobSpecError) -> ApiError:
    detail = error.to_dict()
    field = str(detail.pop("field"))
    message = str(detail.pop("message"))
    status = 413 if "max_spec_bytes" in message and field == "" else 422
    return ApiError(status, message, field=field, extra=detail)


def read_spec(body: bytes, content_type: str, *, limits: Limits, queues: Sequence[str]) -> JobSpec:
    """The job spec in a request body: YAML text for a YAML content type, JSON otherwise."""
    if limits.max_spec_bytes is not None and len(body) > limits.max_spec_bytes:
        raise ApiError(
            413,
            f"the request body is {len(body)} bytes; at most {limits.max_spec_bytes} allowed "
            "(limit max_spec_bytes)",
            field="",
        )
    media = content_type.split(";", 1)[0].strip().lower()
    try:
        if media in YAML_TYPES:
            return parse_job_spec(body, source="request body", limits=limits, queues=queues)
        try:
            data: Any = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise ApiError(
                400, f"the body is not valid JSON ({exc}); send JSON or application/yaml", field=""
            ) from None
        if not isinstance(data, dict):
            raise ApiError(422, "the job spec must be a JSON object (name, command, ...)", field="")
        return parse_job_spec(data, source="request body", limits=limits, queues=queues)
    except JobSpecError as error:
        raise spec_error(error) from None


def visible(job: Job, who: Principal) -> bool:
    """Whether the caller may see this job at all: a job of the caller's tenant (a job's
    token: that job only). Every other job does not exist for the caller."""
    if job.tenant_id != who.tenant_id:
        return False
    return who.job_id is None or who.job_id == job.id


def _summary_fields(job: Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "name": job.name,
        "queue": job.queue.name,
        "state": job.state,
        "gpus": job.gpus,
        "min_gpus": job.min_gpus,
        "max_gpus": job.max_gpus,
        "user": job.user.name if job.user else None,
        "submitted_at": job.submitted_at,
        "state_changed_at": job.state_changed_at,
        "array_id": job.array_id,
        "array_index": job.array_index,
        "pending_reason": job.pending_reason if job.state == JobState.PENDING else None,
    }


@dataclass(frozen=True)
class Filters:
    """What `GET /v1/jobs` may narrow the list to (None: no filter), and its order (`SORTS`,
    `-` first for descending; None: newest first, an array's members by index)."""

    states: Sequence[JobState] | None = None
    queue: str | None = None
    user: str | None = None
    since: float | None = None
    array: str | None = None
    sort: str | None = None


# the columns of `schemas.JOB_SORTS` (a leading `-`: descending); ties by job id
SORTS: dict[str, Any] = {
    "id": Job.id,
    "name": Job.name,
    "state": Job.state,
    "gpus": Job.gpus,
    "submitted": Job.submitted_at,
    "changed": Job.state_changed_at,
    "queue": Queue.name,
    "user": User.name,
}
assert tuple(SORTS) == schemas.JOB_SORTS


def list_jobs(
    session: Session,
    who: Principal,
    where: Filters | None = None,
    *,
    limit: int,
    offset: int = 0,
    state: JobState | None = None,
) -> schemas.JobList:
    """A page of the tenant's jobs, newest first (an array's members in index order);
    `more` says whether rows follow it."""
    where = where or Filters(states=[state] if state is not None else None)
    query = (
        select(Job)
        .where(Job.tenant_id == who.tenant_id)
        .options(selectinload(Job.queue), selectinload(Job.user))
    )
    key = (where.sort or "").lstrip("-")
    if key in SORTS:
        column = SORTS[key]
        descending = (where.sort or "").startswith("-")
        query = query.order_by(column.desc() if descending else column, Job.id)
    elif where.array is not None:
        query = query.order_by(Job.array_index, Job.id)
    else:
        query = query.order_by(Job.submitted_at.desc(), Job.id)
    if where.array is not None:
        query = query.where(Job.array_id == where.array)
    if where.states:
        query = query.where(Job.state.in_(list(where.states)))
    if where.queue is not None or key == "queue":
        query = query.join(Queue, Job.queue_id == Queue.id)
    if where.queue is not None:
        query = query.where(Queue.name == where.queue)
    if where.user is not None or key == "user":
        query = query.outerjoin(User, Job.user_id == User.id)
    if where.user is not None:
        query = query.where(User.name == where.user)
    if where.since is not None:
        query = query.where(Job.submitted_at >= where.since)
    if who.job_id is not None:
        query = query.where(Job.id == who.job_id)
    jobs = list(session.scalars(query.offset(offset).limit(limit + 1)))
    if not jobs and where.array is not None and not _array_exists(session, who, where.array):
        raise not_found(f"array {where.array!r}")  # a mistyped id, not an empty array
    if not jobs:
        _check_named(session, who, where)
    return schemas.JobList(
        jobs=[schemas.JobSummary(**_summary_fields(j)) for j in jobs[:limit]],
        more=len(jobs) > limit,
    )


def _check_named(session: Session, who: Principal, where: Filters) -> None:
    """A filter naming a user or a queue the tenant has none of is a mistake, not an empty
    answer (as squeue refuses an unknown user): a 404 naming the field, as a mistyped array
    id is."""
    if where.user is not None:
        user = select(User.id).where(User.name == where.user, User.tenant_id == who.tenant_id)
        if session.scalar(user) is None:
            raise ApiError(404, f"{where.user!r} is not a user of this tenant", field="user")
    if where.queue is not None:
        visible = or_(Queue.tenant_id.is_(None), Queue.tenant_id == who.tenant_id)
        if session.scalar(select(Queue.id).where(Queue.name == where.queue, visible)) is None:
            raise ApiError(
                404, f"there is no queue {where.queue!r} (trainyard queues lists them)",
                field="queue",
            )  # fmt: skip


def _array_exists(session: Session, who: Principal, array_id: str) -> bool:
    query = select(Job.id).where(Job.array_id == array_id, Job.tenant_id == who.tenant_id)
    return session.scalar(query.limit(1)) is not None


def cancel_array(
    session: Session, who: Principal, array_id: str, *, now: float
) -> schemas.ArrayCancelOut:
    """Cancel every member of an array of the caller's tenant that has not ended."""
    who.require_write("cancel jobs")
    well_formed = _JOB_ID.fullmatch(array_id) is not None
    members = (
        list(
            session.scalars(
                select(Job)
                .where(Job.array_id == array_id, Job.tenant_id == who.tenant_id)
                .order_by(Job.array_index)
            )
        )
        if well_formed and who.job_id is None
        else []
    )
    if not members:
        raise not_found(f"array {array_id!r}")
    cancelled, ended = [], []
    reason = f"cancelled by {who.user_name}"[:64]
    for job in members:
        try:
            lifecycle.transition(session, job, JobState.CANCELLED, reason=reason, now=now)
        except lifecycle.IllegalTransition:
            ended.append(job.id)
            continue
        except StaleDataError:
            raise ApiError(
                409, f"job {job.id} of array {array_id} changed concurrently; try again",
                field=None,
            ) from None  # fmt: skip
        cancelled.append(job.id)
    audit.record(
        session, actor=who.user_name, user_id=who.user_id or None, tenant_id=who.tenant_id,
        action="array.cancel", target=array_id, now=now, details={"jobs": len(cancelled)},
    )  # fmt: skip
    return schemas.ArrayCancelOut(id=array_id, cancelled=cancelled, ended=ended)


def _progress(session: Session, job_id: str) -> dict[str, Any] | None:
    from trainyard.server.services.reports import progress_of  # (it imports this module)

    return progress_of(session, job_id)


def own_job(session: Session, who: Principal, job_id: str) -> Job:
    well_formed = _JOB_ID.fullmatch(job_id) is not None  # e.g. a NUL would upset PostgreSQL
    job = session.get(Job, job_id) if well_formed else None
    if job is None or not visible(job, who):
        raise not_found(f"job {job_id!r}")
    return job


def describe_job(session: Session, who: Principal, job_id: str) -> schemas.JobDetail:
    job = own_job(session, who, job_id)
    events = [
        schemas.EventOut(
            time=e.time,
            from_state=e.from_state,
            to_state=e.to_state,
            reason=e.reason,
            details=e.details,
        )
        for e in job.events
    ]
    running = job.state == JobState.RUNNING  # a note of an earlier run says nothing now
    return schemas.JobDetail(
        **{**_summary_fields(job), "pending_reason": job.pending_reason},
        tenant=who.tenant_name,
        after=job.after or [],
        progress=_progress(session, job.id),
        spec=job.spec,
        placement=job.placement,
        estimated_start=job.estimated_start,
        not_grown=job.resize_note if running else None,
        not_grown_until=job.resize_note_until if running else None,
        attempt=job.attempt,
        restart_count=job.restart_count,
        max_restarts=job.max_restarts,
        next_retry_at=job.next_retry_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        exit_code=job.exit_code,
        exit_message=job.exit_message,
        events=events,
    )


def cancel_job(session: Session, who: Principal, job_id: str, *, now: float) -> schemas.SubmitOut:
    job = own_job(session, who, job_id)
    who.require_write("cancel jobs")
    try:
        lifecycle.transition(
            session, job, JobState.CANCELLED, reason=f"cancelled by {who.user_name}"[:64], now=now
        )
    except lifecycle.IllegalTransition:
        raise ApiError(
            409, f"job {job.id} is {job.state.value} and cannot be cancelled", field="state"
        ) from None
    except StaleDataError:
        raise ApiError(409, f"job {job.id} changed concurrently; try again", field=None) from None
    audit.record(
        session, actor=who.user_name, user_id=who.user_id or None, tenant_id=who.tenant_id,
        action="job.cancel", target=job.id, now=now,
    )  # fmt: skip
    return schemas.SubmitOut(id=job.id, state=job.state)


def _counts_by_queue(session: Session, states: Sequence[JobState]) -> dict[int, int]:
    rows = session.execute(
        select(Job.queue_id, func.count()).where(Job.state.in_(states)).group_by(Job.queue_id)
    )
    return {queue_id: count for queue_id, count in rows}


def gpus_in_use(session: Session) -> dict[int, int]:
    """GPUs held by each queue's own jobs (those whose placement is in use), by queue id."""
    rows = session.execute(
        select(Job.queue_id, func.sum(Job.gpus))
        .where(Job.state.in_(sorted(lifecycle.HOLDS_DEVICES)))
        .group_by(Job.queue_id)
    )
    return {queue_id: int(total or 0) for queue_id, total in rows}


def gpus_held_under(session: Session) -> dict[int, int]:
    """GPUs held by each queue's jobs and its descendants' (what its guarantee and limit
    bound, as the scheduler counts them), by queue id."""
    parents: dict[int, int | None] = {
        qid: parent for qid, parent in session.execute(select(Queue.id, Queue.parent_id))
    }
    out: dict[int, int] = {}
    for queue_id, gpus in gpus_in_use(session).items():
        seen: set[int] = set()
        at: int | None = queue_id
        while at is not None and at not in seen:  # `seen`: a stored cycle counts once
            seen.add(at)
            out[at] = out.get(at, 0) + gpus
            at = parents.get(at)
    return out


def state_counts(session: Session, who: Principal) -> dict[JobState, int]:
    """How many of the caller's tenant's jobs are in each state."""
    query = select(Job.state, func.count()).where(Job.tenant_id == who.tenant_id)
    if who.job_id is not None:
        query = query.where(Job.id == who.job_id)
    counts = {JobState(state): int(n) for state, n in session.execute(query.group_by(Job.state))}
    return {state: counts.get(state, 0) for state in JobState}


@dataclass(frozen=True)
class Holder:
    """The job holding a device, as the caller may see it: `job` is None for another
    tenant's job (then only that the device is taken is shown)."""

    state: JobState
    since: float
    job: schemas.JobSummary | None


def device_holders(session: Session, who: Principal) -> dict[tuple[str, int], Holder]:
    """(node, device index) -> the job whose placement is in use there (a RESIZING job's
    new devices included)."""
    query = (
        select(Job)
        .where(Job.state.in_(sorted(lifecycle.HOLDS_DEVICES)))
        .options(selectinload(Job.queue), selectinload(Job.user))
    )
    out: dict[tuple[str, int], Holder] = {}
    for job in session.scalars(query):
        since = job.started_at if job.state == JobState.RUNNING else job.state_changed_at
        holder = Holder(
            state=job.state,
            since=since or job.state_changed_at,
            job=schemas.JobSummary(**_summary_fields(job)) if visible(job, who) else None,
        )
        for part in (job.placement or []) + (job.resize_to or []):
            for index in part.get("devices", ()):
                out[(str(part.get("node")), int(index))] = holder
    return out


def list_queues(session: Session, who: Principal) -> schemas.QueueList:
    queues = _visible_queues(session, who)
    names = {q.id: q.name for q in session.scalars(select(Queue))}
    tenants = {t.id: t.name for t in session.scalars(select(Tenant))}
    pending = _counts_by_queue(session, [JobState.PENDING])
    running = _counts_by_queue(session, sorted(lifecycle.HOLDS_DEVICES))
    in_use = gpus_in_use(session)
    held = gpus_held_under(session)
    return schemas.QueueList(
        queues=[
            schemas.QueueOut(
                name=q.name,
                parent=names.get(q.parent_id) if q.parent_id is not None else None,
                tenant=tenants.get(q.tenant_id) if q.tenant_id is not None else None,
                guaranteed=q.guaranteed,
                limit=q.limit,
                weight=q.weight,
                pending=pending.get(q.id, 0),
                running=running.get(q.id, 0),
                gpus_in_use=in_use.get(q.id, 0),
                gpus_held=held.get(q.id, 0),
                max_priority=q.max_priority,
                default_priority=q.default_priority,
                usage=q.usage,
            )
            for q in queues
        ]
    )


def list_nodes(session: Session, who: Principal) -> schemas.NodeList:
    del who  # every authenticated caller may see the cluster's nodes, and which GPUs are busy
    nodes = session.scalars(select(Node).options(selectinload(Node.devices)).order_by(Node.name))
    holding = select(Job.placement).where(Job.state.in_(sorted(lifecycle.HOLDS_DEVICES)))
    busy = {(str(p["node"]), int(d)) for (placed,) in session.execute(holding)
            for p in placed or () for d in p["devices"]}  # fmt: skip
    return schemas.NodeList(
        nodes=[
            schemas.NodeOut(
                name=n.name,
                executor=n.executor,
                cpus=n.cpus,
                memory_gb=n.memory_gb,
                schedulable=n.schedulable,
                virtual=n.virtual,
                health=n.health,
                last_heartbeat_at=n.last_heartbeat_at,
                drained_at=n.drained_at,
                drain_reason=n.drain_reason,
                spare=n.spare,
                devices=[
                    schemas.DeviceOut(
                        index=d.index,
                        gpu_type=d.gpu_type,
                        memory_gb=d.memory_gb,
                        virtual=d.virtual,
                        health=d.health,
                        busy=(n.name, d.index) in busy,
                    )
                    for d in n.devices
                ],
            )
            for n in nodes
        ]
    )


def refresh_job_gauges(session: Session) -> None:
    """Set the job-state gauge from the database (before rendering /metrics)."""
    rows = session.execute(select(Job.state, func.count()).group_by(Job.state))
    counts = {JobState(state).value: count for state, count in rows}
    PLATFORM.jobs.replace(({"state": s.value}, float(counts.get(s.value, 0))) for s in JobState)
