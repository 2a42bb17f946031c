"""Thin routers: parse the request, open one unit of work, call a service, return its schema."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Security
from fastapi.responses import PlainTextResponse
from fastapi.security import HTTPBearer
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from trainyard.jobspec import Limits
from trainyard.server.api import schemas, services
from trainyard.server.api.auth import Principal, authenticate
from trainyard.server.db.base import JobState
from trainyard.server.metrics import PLATFORM

_bearer = HTTPBearer(auto_error=False, description="an API token: `Bearer ty_...`")
_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": schemas.ErrorOut} for code in (400, 401, 403, 404, 409, 413, 422)
}


@dataclass(frozen=True)
class ApiContext:
    """What every request needs: sessions, the job limits and the clock."""

    sessions: sessionmaker[Session]
    limits: Limits
    clock: Callable[[], float]

    @contextlib.contextmanager
    def unit(self, request: Request) -> Iterator[tuple[Session, Principal, float]]:
        """One transaction for the caller of `request`: committed only if nothing raised."""
        now = self.clock()
        with self.sessions() as session:
            try:
                who = authenticate(session, request.headers.get("authorization"), now=now)
                yield session, who, now
                session.commit()
            except BaseException:
                session.rollback()
                raise


def context(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.trainyard
    return ctx


async def raw_body(request: Request) -> bytes:
    return await request.body()


Ctx = Annotated[ApiContext, Depends(context)]
v1 = APIRouter(prefix="/v1", dependencies=[Security(_bearer)], responses=_ERRORS)
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
def submit_job(
    request: Request, ctx: Ctx, body: Annotated[bytes, Depends(raw_body)]
) -> schemas.SubmitOut:
    """Submit a job: it is stored in PENDING for the scheduler."""
    with ctx.unit(request) as (session, who, now):
        content_type = request.headers.get("content-type", "application/json")
        return services.submit_job(session, who, body, content_type, limits=ctx.limits, now=now)


@v1.get("/jobs", response_model=schemas.JobList)
def list_jobs(
    request: Request,
    ctx: Ctx,
    state: JobState | None = None,
    limit: Annotated[int, Query(ge=1, le=services.LIST_LIMIT)] = services.LIST_LIMIT,
) -> schemas.JobList:
    """The caller's tenant's jobs, newest first, optionally in one state."""
    with ctx.unit(request) as (session, who, _now):
        return services.list_jobs(session, who, state=state, limit=limit)


@v1.get("/jobs/{job_id}", response_model=schemas.JobDetail)
def describe_job(request: Request, ctx: Ctx, job_id: str) -> schemas.JobDetail:
    """A job: state, placement, pending reason, estimated start and every event."""
    with ctx.unit(request) as (session, who, _now):
        return services.describe_job(session, who, job_id)


@v1.post("/jobs/{job_id}/cancel", response_model=schemas.SubmitOut)
def cancel_job(request: Request, ctx: Ctx, job_id: str) -> schemas.SubmitOut:
    """Cancel a job (its processes are stopped by the executor)."""
    with ctx.unit(request) as (session, who, now):
        return services.cancel_job(session, who, job_id, now=now)


@v1.get("/queues", response_model=schemas.QueueList)
def list_queues(request: Request, ctx: Ctx) -> schemas.QueueList:
    """Queues the caller may submit to, with their quotas and job counts."""
    with ctx.unit(request) as (session, who, _now):
        return services.list_queues(session, who)


@v1.get("/nodes", response_model=schemas.NodeList)
def list_nodes(request: Request, ctx: Ctx) -> schemas.NodeList:
    """The cluster's nodes and devices (virtual devices are marked)."""
    with ctx.unit(request) as (session, who, _now):
        return services.list_nodes(session, who)


@v1.get("/whoami", response_model=schemas.WhoAmI)
def whoami(request: Request, ctx: Ctx) -> schemas.WhoAmI:
    """The caller's user, tenant and role."""
    with ctx.unit(request) as (_session, who, _now):
        return schemas.WhoAmI(user=who.user_name, tenant=who.tenant_name, role=who.role)


@ops.get("/metrics", response_class=PlainTextResponse)
def metrics(ctx: Ctx) -> PlainTextResponse:
    """Prometheus metrics (text exposition format 0.0.4); no authentication."""
    with ctx.sessions() as session:
        services.refresh_job_gauges(session)
    return PlainTextResponse(
        PLATFORM.registry.render(), media_type="text/plain; version=0.0.4; charset=utf-8"
    )


@ops.get("/healthz", response_model=schemas.HealthOut)
def healthz(ctx: Ctx) -> schemas.HealthOut:
    """Liveness: the server answers and its database does."""
    with ctx.sessions() as session:
        session.execute(text("SELECT 1"))
    return schemas.HealthOut(status="ok", database="ok")
