"""`create_app`: the FastAPI application of the control plane, with its error handlers."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import Scope

from trainyard.jobspec import Limits
from trainyard.server.api.bodylimit import BodyLimit
from trainyard.server.api.errors import ApiError, error_body, validation_error
from trainyard.server.api.openapi import install as install_openapi
from trainyard.server.api.routes import ApiContext, ops, v1
from trainyard.server.console import ConsoleSettings
from trainyard.server.console import install as install_console
from trainyard.server.db.session import make_engine, make_session_factory
from trainyard.server.metrics import PLATFORM, UsageCollector
from trainyard.server.services import usage
from trainyard.server.services.admission import DEFAULT_MAX_QUEUED, Admission
from trainyard.server.services.intake import Intake, QueueDirectory
from trainyard.server.services.logs import JobLogs

log = logging.getLogger(__name__)


def create_app(
    engine_or_url: Engine | str | Path,
    *,
    limits: Limits | None = None,
    clock: Callable[[], float] = time.time,
    notify: Callable[[], None] | None = None,
    logs: JobLogs | None = None,
    work_roots: tuple[Path, ...] = (),
    private: tuple[Path, ...] = (),
    max_queued: int | None = DEFAULT_MAX_QUEUED,
    console: ConsoleSettings | None = None,
    dirs_here: bool = False,
    others_enter: bool = False,
    on_ray: bool = False,
) -> FastAPI:
    """The API over the database behind `engine_or_url` (already migrated: `init_db`).
    `notify` is called after each submit and cancel (the server wakes its scheduler loop);
    `logs` serves job logs (None: `/v1/jobs/{id}/logs` answers 404). Submissions pass
    `services.admission` against the cluster in the database, with `work_roots` (empty: any
    directory), `private` (the server's state, never a working directory) and `dirs_here`
    (jobs run on this machine: a working directory must exist here at submit) and
    `others_enter` (they run as uids of their own: it must let others enter it); `on_ray`:
    jobs run on Ray's nodes (no `resume_from`)."""
    engine = engine_or_url if isinstance(engine_or_url, Engine) else make_engine(engine_or_url)
    app = FastAPI(
        title="trainyard",
        summary="Schedules and runs deep-learning training jobs.",
        version="1",
        docs_url="/docs",
        openapi_url="/openapi.json",
    )
    sessions = make_session_factory(engine)
    app.state.trainyard = ApiContext(
        sessions=sessions,
        intake=Intake(sessions),
        queues=QueueDirectory(sessions),
        limits=limits if limits is not None else Limits(),
        clock=clock,
        notify=notify or (lambda: None),
        logs=logs,
        admission=Admission(
            sessions,
            work_roots=work_roots,
            private=private,
            max_queued=max_queued,
            dirs_here=dirs_here,
            others_enter=others_enter,
            on_ray=on_ray,
        ),
        usage_metrics=_usage_registry(sessions),
    )
    app.include_router(v1)
    app.include_router(ops)
    install_console(app, console)
    install_openapi(app)
    _install_handlers(app)
    # bodies are bounded while streaming in, before authentication (api/bodylimit.py); the
    # bound is the largest spec accepted, plus room for the JSON around it
    spec_bytes = app.state.trainyard.limits.max_spec_bytes
    app.add_middleware(
        BodyLimit, max_bytes=(spec_bytes or 1_000_000) + 64 * 1024, on_refuse=_count_refused
    )
    return app


def _usage_registry(sessions: sessionmaker[Session]) -> CollectorRegistry:
    """The accounting counters of `/metrics`: usage by tenant, from the database."""

    def read() -> list[tuple[str, float, float, float]]:
        with sessions() as s:
            return usage.totals_by_tenant(s)

    registry = CollectorRegistry()
    registry.register(UsageCollector(read))
    return registry


def _count_refused(scope: Scope) -> None:
    if scope.get("path") == "/v1/jobs":
        PLATFORM.submissions.inc(outcome="rejected")


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE")


def _allowed_methods(app: FastAPI, scope: Scope) -> str:
    """Every method served at the request's path, for a 405's `Allow` (RFC 9110): Starlette
    names only the first route there (`POST` for `/v1/jobs`, which also serves `GET`)."""
    return ", ".join(
        method
        for method in _METHODS
        if any(r.matches({**scope, "method": method})[0] is Match.FULL for r in app.router.routes)
    )


def _install_handlers(app: FastAPI) -> None:
    from trainyard.server.outage import RETRY_AFTER_S, Outage, is_outage

    @app.exception_handler(ApiError)
    async def api_error(_request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        error = validation_error(exc.errors())
        return JSONResponse(error.body(), status_code=error.status)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = dict(getattr(exc, "headers", None) or {})
        allowed = _allowed_methods(app, request.scope) if exc.status_code == 405 else ""
        if allowed:
            headers["Allow"] = allowed
        return JSONResponse(
            error_body(None, str(exc.detail)), status_code=exc.status_code, headers=headers
        )

    outage = Outage(log, "API")

    @app.exception_handler(Exception)
    async def crash(request: Request, exc: Exception) -> JSONResponse:
        if is_outage(exc):  # not a bug: the client should retry (`trainyard.server.outage`)
            outage.failed(exc)
            body = error_body(None, "the database does not answer; retry in a few seconds")
            headers = {"Retry-After": str(RETRY_AFTER_S)}
            return JSONResponse(body, status_code=503, headers=headers)
        log.exception("internal error on %s %s", request.method, request.url.path)
        return JSONResponse(error_body(None, "internal server error"), status_code=500)
