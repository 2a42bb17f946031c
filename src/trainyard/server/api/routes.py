"""Thin routers: parse the request, open one unit of work, call a service, return its schema."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request, Response, Security
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from fastapi.security import HTTPBearer
from prometheus_client import CollectorRegistry
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

import trainyard.server.api.schemas as schemas
import trainyard.server.services.audit as audit
import trainyard.server.services.idempotency as idempotency
import trainyard.server.services.jobs as jobs
import trainyard.server.services.logs as logs
import trainyard.server.services.tokens as tokens
import trainyard.server.services.usage as usage
from trainyard.jobspec import Limits
from trainyard.server.api import auth
from trainyard.server.api.auth import Principal, TokenCache
from trainyard.server.api.errors import ApiError
from trainyard.server.api.guards import caller_first, known_query
from trainyard.server.bootstrap import DEFAULT_TENANT
from trainyard.server.db.base import JobState, Role
from trainyard.server.metrics import PLATFORM
from trainyard.server.services import depends, reports
from trainyard.server.services.admission import Admission
from trainyard.server.services.intake import Intake, Prepared, QueueDirectory, prepare
from trainyard.server.services.logs import JobLogs

_bearer = HTTPBearer(auto_error=False, description="an API token: `Bearer ty_...`")
_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": schemas.ErrorOut} for code in (400, 401, 403, 404, 409, 413, 422)
}


@dataclass(frozen=True)
class ApiContext:
    """What every request needs: sessions, the job limits and the clock; `notify` wakes the
    scheduler loop after a change it must act on; `logs` reads job logs (None: no executor)."""

    sessions: sessionmaker[Session]
    limits: Limits
    clock: Callable[[], float]
    intake: Intake
    queues: QueueDirectory
    tokens: TokenCache = field(default_factory=TokenCache)
    notify: Callable[[], None] = field(default=lambda: None)
    logs: JobLogs | None = None
    admission: Admission | None = None
    usage_metrics: CollectorRegistry | None = None  # accounting counters (metrics.py)

    @contextlib.contextmanager
    def unit(self, request: Request) -> Iterator[tuple[Session, Principal, float]]:
        """One transaction for the caller of `request`: committed only if nothing raised."""
        now = self.clock()
        with self.sessions() as session:
            try:
                who = getattr(request.state, "caller", None)  # `guards.caller_first` found it
                if who is None:
                    header = auth.authorization(request)
                    who = auth.authenticate(session, header, now=now, cache=self.tokens)
                    auth.check_cookie(request, who)
                yield session, who, now
                session.commit()
            except BaseException:
                session.rollback()
                raise

    def authenticate(self, authorization: str | None, now: float) -> Principal:
        """The caller, verified against the database (and remembered in `tokens`)."""
        with self.sessions() as session:
            who = auth.authenticate(session, authorization, now=now, cache=self.tokens)
            session.commit()  # last_used_at
            return who

    async def caller(self, request: Request, now: float) -> Principal:
        """The caller, from the token cache or (in a worker thread) the database."""
        header = auth.authorization(request)
        who = self.tokens.get(auth.bearer(header), now=now)
        if who is None:
            who = await run_in_threadpool(self.authenticate, header, now)
        auth.check_cookie(request, who)
        return who


def context(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.trainyard
    return ctx


async def raw_body(request: Request) -> bytes:
    return await request.body()


Ctx = Annotated[ApiContext, Depends(context)]


v1 = APIRouter(
    prefix="/v1",
    dependencies=[Security(_bearer), Depends(known_query)],
    responses=_ERRORS,
)
ops = APIRouter()

_SPEC_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "the job spec (see trainyard.jobspec), as JSON or YAML text",
        "content": {
            "application/json": {"schema": {"type": "object", "additionalProperties": True}},
            "application/yaml": {"schema": {"type": "string"}},
        },
    }
}


@v1.post("/jobs", status_code=201, response_model=schemas.SubmitOut, openapi_extra=_SPEC_BODY)
async def submit_job(
    request: Request,
    response: Response,
    ctx: Ctx,
    body: Annotated[bytes, Depends(raw_body)],
    idempotency_key: Annotated[
        str | None,
        Header(
            alias=idempotency.HEADER,
            pattern=idempotency.PATTERN,
            description="retry-safe submit: the same key and body give the same job",
        ),
    ] = None,
) -> schemas.SubmitOut:
    """Submit a job: it is stored in PENDING for the scheduler (answered once committed)."""
    now = ctx.clock()
    who = await ctx.caller(request, now)
    content_type = request.headers.get("content-type", "application/json")
    key_digest = idempotency.digest(body, content_type) if idempotency_key else ""
    try:
        who.require_write("submit jobs")
        if idempotency_key:
            found = await run_in_threadpool(
                idempotency.find, ctx.sessions, who.user_id, idempotency_key, key_digest
            )
            if found is not None:
                response.headers["Idempotent-Replayed"] = "true"
                return schemas.SubmitOut(id=found[0], state=found[1], array_ids=found[2])
        queues = ctx.queues.cached(who.tenant_id)
        fresh = queues is None
        if queues is None:
            queues = await run_in_threadpool(ctx.queues.load, who.tenant_id)
        args = (who, body, content_type)
        options = {
            "limits": ctx.limits, "queues": queues, "now": now, "admission": ctx.admission,
            "directory": ctx.queues,
        }  # fmt: skip
        try:
            prepared = await _prepare(args, options, planned=b"model" in body)
        except ApiError as error:
            if error.field != "queue" or fresh:
                raise
            queues = await run_in_threadpool(ctx.queues.load, who.tenant_id)  # created just now?
            options["queues"] = queues
            prepared = await _prepare(args, options, planned=b"model" in body)
        if prepared.job.get("after"):  # the jobs waited for must be the tenant's own
            await run_in_threadpool(depends.check, ctx.sessions, who, prepared.job["after"])
        if resume := prepared.job["spec"].get("resume_from"):  # the caller's own, ended
            await run_in_threadpool(depends.check_resume, ctx.sessions, who, resume)
    except ApiError:
        PLATFORM.submissions.inc(outcome="rejected")
        raise
    if idempotency_key:
        prepared.job.update(submit_key=idempotency_key, submit_digest=key_digest)
    try:
        await ctx.intake.store_async(prepared)
    except ApiError as error:  # 409: the database refused the row
        found = None
        if idempotency_key and error.status == 409:  # a concurrent submit with this key won
            found = idempotency.find(ctx.sessions, who.user_id, idempotency_key, key_digest)
        if found is None:
            raise
        response.headers["Idempotent-Replayed"] = "true"
        return schemas.SubmitOut(id=found[0], state=found[1], array_ids=found[2])
    ctx.notify()
    if prepared.array_id is not None:
        return schemas.SubmitOut(
            id=prepared.array_id, state=JobState.PENDING, array_ids=prepared.job_ids
        )
    return schemas.SubmitOut(id=prepared.job_id, state=JobState.PENDING)


async def _prepare(
    args: tuple[Principal, bytes, str], options: dict[str, Any], *, planned: bool
) -> Prepared:
    """`intake.prepare`, in a worker thread when the planner may run (it can take a while)."""
    if planned:
        return await run_in_threadpool(lambda: prepare(*args, **options))
    return prepare(*args, **options)


# the filters of the jobs list, shared with the console's jobs page (the same checks)
StateFilter = Annotated[
    list[JobState] | None, Query(description="only jobs in these states (repeat)")
]


def _text_filter(max_length: int, description: str, *, empty: bool) -> Any:
    """The query check of a free-text filter; `empty`: whether '' passes (the console's form
    sends '' for "any")."""
    return Query(
        min_length=None if empty else 1,
        max_length=max_length,
        pattern=schemas.PRINTABLE,
        description=description,
    )


_QUEUE, _USER, _ARRAY = "only this queue", "only this user's", "only the members of this job array"
QueueFilter = Annotated[str | None, _text_filter(128, _QUEUE, empty=True)]
UserFilter = Annotated[str | None, _text_filter(128, _USER, empty=True)]
ArrayFilter = Annotated[str | None, _text_filter(32, _ARRAY, empty=True)]
# The API's own: an empty value names nothing, so it is refused naming the field. Found by
# the fuzzing: schemathesis sent an invalid value (a list) that the query string carries as
# `array=`, which was accepted as the array ''.
ApiQueueFilter = Annotated[str | None, _text_filter(128, _QUEUE, empty=False)]
ApiUserFilter = Annotated[str | None, _text_filter(128, _USER, empty=False)]
ApiArrayFilter = Annotated[str | None, _text_filter(32, _ARRAY, empty=False)]
JobOrder = Annotated[
    str | None,
    Query(
        pattern=schemas.JOB_SORT,
        description="order by id, name, state, gpus, submitted, changed, queue or user "
        "(`-` first: descending) [newest first]",
    ),
]


@v1.get("/jobs", response_model=schemas.JobList)
def list_jobs(
    request: Request,
    ctx: Ctx,
    state: StateFilter = None,
    queue: ApiQueueFilter = None,
    user: ApiUserFilter = None,
    since: Annotated[
        float | None, Query(ge=0, description="only jobs submitted at or after (Unix time)")
    ] = None,
    array: ApiArrayFilter = None,
    limit: Annotated[int, Query(ge=1, le=jobs.LIST_LIMIT)] = jobs.LIST_LIMIT,
    offset: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
    sort: JobOrder = None,
) -> schemas.JobList:
    """The caller's tenant's jobs, newest first (an array's members by index) unless
    `sort` says otherwise, filtered by state, queue, user, submission time or array; `more`
    says whether another page follows (ask again with `offset`)."""
    with ctx.unit(request) as (session, who, _now):
        where = jobs.Filters(
            states=state, queue=queue, user=user, since=since, array=array, sort=sort
        )
        return jobs.list_jobs(session, who, where, limit=limit, offset=offset)


@v1.post(
    "/jobs/{job_id}/reports", status_code=202, response_model=schemas.Accepted,
    dependencies=[Depends(caller_first)],
)  # fmt: skip
def report_job(request: Request, ctx: Ctx, job_id: str, body: schemas.ReportIn) -> schemas.Accepted:
    """A running job reports its steps (the SDK, with the job's token): stored per size and
    placement for the scheduler's goodput model (`services/reports.py`)."""
    with ctx.unit(request) as (session, who, now):
        reports.record(session, who, job_id, body, now=now)
    return schemas.Accepted()


@v1.post("/arrays/{array_id}/cancel", response_model=schemas.ArrayCancelOut)
def cancel_array(request: Request, ctx: Ctx, array_id: str) -> schemas.ArrayCancelOut:
    """Cancel every member of a job array that has not ended."""
    with ctx.unit(request) as (session, who, now):
        out = jobs.cancel_array(session, who, array_id, now=now)
    ctx.notify()
    return out


@v1.get("/jobs/{job_id}", response_model=schemas.JobDetail)
def describe_job(request: Request, ctx: Ctx, job_id: str) -> schemas.JobDetail:
    """A job: state, placement, pending reason, estimated start and every event."""
    with ctx.unit(request) as (session, who, _now):
        return jobs.describe_job(session, who, job_id)


@v1.post("/jobs/{job_id}/cancel", response_model=schemas.SubmitOut)
def cancel_job(request: Request, ctx: Ctx, job_id: str) -> schemas.SubmitOut:
    """Cancel a job (its processes are stopped by the executor)."""
    with ctx.unit(request) as (session, who, now):
        out = jobs.cancel_job(session, who, job_id, now=now)
    ctx.notify()
    return out


@v1.get(
    "/jobs/{job_id}/logs",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
        410: {"description": "the job's logs were removed by retention (`admin gc`)"},
    },
)
def job_logs_route(
    request: Request,
    ctx: Ctx,
    job_id: str,
    rank: Annotated[int | None, Query(ge=0, le=logs.MAX_RANK)] = None,
    attempt: Annotated[int | None, Query(ge=0, le=logs.MAX_ATTEMPT)] = None,
    follow: bool = False,
    tail: Annotated[int | None, Query(ge=0, le=logs.MAX_TAIL)] = None,
) -> StreamingResponse:
    """A job's output (stdout and stderr) by rank, of its latest attempt unless `attempt` is
    given; several ranks' lines are prefixed `[rank r] `. `tail`: only the last that many
    lines of each rank's. `follow` streams new lines until the attempt ends."""
    with ctx.unit(request) as (session, who, _now):
        lines = logs.open_logs(
            session, who, ctx.logs, ctx.sessions, job_id, rank=rank, attempt=attempt,
            follow=follow, tail=tail,
        )  # fmt: skip
    return StreamingResponse(lines, media_type="text/plain; charset=utf-8")


@v1.post(
    "/tokens", status_code=201, response_model=schemas.NewTokenOut,
    dependencies=[Depends(caller_first)],
)  # fmt: skip
def create_token(request: Request, ctx: Ctx, body: schemas.TokenIn) -> schemas.NewTokenOut:
    """Create an API token for the caller; the token text is in this answer only."""
    with ctx.unit(request) as (session, who, now):
        return tokens.create_token(session, who, body, now=now)


@v1.get("/tokens", response_model=schemas.TokenList)
def list_tokens(request: Request, ctx: Ctx) -> schemas.TokenList:
    """The caller's tokens (an admin: every user's of the tenant), never their secrets."""
    with ctx.unit(request) as (session, who, _now):
        return tokens.list_tokens(session, who)


@v1.delete("/tokens/{token_id}", response_model=schemas.TokenOut)
def revoke_token(request: Request, ctx: Ctx, token_id: str) -> schemas.TokenOut:
    """Revoke a token from now on (kept for the audit trail)."""
    with ctx.unit(request) as (session, who, now):
        out = tokens.revoke(session, who, token_id, now=now)
    ctx.tokens.clear()  # a cached copy must not outlive the revocation
    return out


@v1.get("/queues", response_model=schemas.QueueList)
def list_queues(request: Request, ctx: Ctx) -> schemas.QueueList:
    """Queues the caller may submit to, with their quotas and job counts."""
    with ctx.unit(request) as (session, who, _now):
        return jobs.list_queues(session, who)


@v1.get("/usage", response_model=schemas.UsageOut)
def get_usage(
    request: Request,
    ctx: Ctx,
    since: Annotated[float, Query(ge=0, le=1e12, description="epoch seconds")] = 0.0,
    until: Annotated[float | None, Query(ge=0, le=1e12, description="epoch seconds [now]")] = None,
    by: Annotated[str, Query(pattern="^(tenant|user|queue|job)$")] = "tenant",
) -> schemas.UsageOut:
    """GPU/CPU/memory-seconds of the caller's tenant in [since, until), by tenant, user,
    queue or job: every run interval, preempted and failed attempts included. A job's own
    token reads its job's usage only, as it reads no other job."""
    with ctx.unit(request) as (session, who, now):
        end = now if until is None else until
        if end < since:
            raise ApiError(
                422,
                f"the window ends ({end:.0f}) before it starts (since={since:.0f}); "
                + ("give an until after since, or swap the two" if until is not None
                   else "since is later than the server's clock; give an earlier since"),
                field="until" if until is not None else "since",
            )  # fmt: skip
        rows = usage.usage(session, tenant_id=who.tenant_id, since=since, until=end, by=by,
                           now=now, job_id=who.job_id)  # fmt: skip
    return schemas.UsageOut(
        since=since, until=end, by=by,
        rows=[
            schemas.UsageRowOut(
                key=r.key, gpu_seconds=r.gpu_seconds, gpu_hours=r.gpu_seconds / 3600,
                cpu_seconds=r.cpu_seconds, memory_gb_seconds=r.memory_gb_seconds,
                intervals=r.intervals, jobs=len(r.jobs),
            )
            for r in rows
        ],
    )  # fmt: skip


@v1.get("/audit", response_model=schemas.AuditList)
def get_audit(
    request: Request,
    ctx: Ctx,
    since: Annotated[float, Query(ge=0, le=1e12, description="epoch seconds")] = 0.0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> schemas.AuditList:
    """The tenant's audit trail, oldest first (admins only): who did what and when."""
    with ctx.unit(request) as (session, who, _now):
        who.require_admin("read the audit trail")
        rows, more = audit.events(session, tenant_id=who.tenant_id, since=since, limit=limit)
        return schemas.AuditList(
            events=[
                schemas.AuditEventOut(
                    time=r.time, actor=r.actor, action=r.action, target=r.target, details=r.details
                )
                for r in rows
            ],
            more=more,
        )


@v1.get("/nodes", response_model=schemas.NodeList)
def list_nodes(request: Request, ctx: Ctx) -> schemas.NodeList:
    """The cluster's nodes and devices (virtual devices are marked)."""
    with ctx.unit(request) as (session, who, _now):
        return jobs.list_nodes(session, who)


@v1.get("/whoami", response_model=schemas.WhoAmI)
def whoami(request: Request, ctx: Ctx) -> schemas.WhoAmI:
    """The caller's user, tenant and role."""
    with ctx.unit(request) as (_session, who, _now):
        return schemas.WhoAmI(user=who.user_name, tenant=who.tenant_name, role=who.role)


_METRICS_TYPES: dict[str, Any] = {
    media: {"schema": {"type": "string"}}
    for media in ("text/plain", "application/openmetrics-text")
}


@ops.get(
    "/metrics",
    response_class=Response,  # (no media type: the errors are stated as JSON, as they are)
    dependencies=[Security(_bearer)],
    responses={200: {"content": _METRICS_TYPES}, **{c: _ERRORS[c] for c in (401, 403)}},
)
def metrics(request: Request, ctx: Ctx) -> Response:
    """Prometheus metrics (the text format, or OpenMetrics when asked for): the platform's
    gauges and counters, process metrics, accounting. They hold every tenant's usage, so
    only the platform's operator reads them: a token of an admin of tenant `default` (for a
    scraper: `trainyard admin token issue admin --name prometheus`)."""
    with ctx.unit(request) as (session, who, _now):
        if who.tenant_name != DEFAULT_TENANT or who.role != Role.ADMIN or who.job_id:
            raise ApiError(403, "only the platform's operator (an admin of tenant "
                           f"{DEFAULT_TENANT!r}) reads /metrics: it holds every tenant's "
                           "usage")  # fmt: skip
        jobs.refresh_job_gauges(session)
    body, media = PLATFORM.render(request.headers.get("accept", ""), ctx.usage_metrics)
    return Response(body, media_type=media)


@ops.get("/healthz", response_model=schemas.HealthOut)
def healthz(ctx: Ctx) -> schemas.HealthOut:
    """Liveness: the server answers and its database does."""
    with ctx.sessions() as session:
        session.execute(text("SELECT 1"))
    return schemas.HealthOut(status="ok", database="ok")
