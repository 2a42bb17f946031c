"""The console's pages: one route each, a view from `views.py`, a template, live blocks.

Every page depends on `web.page_user` (the session cookie; login by `?token=`), so roles and
tenants are the API's. Writes are not here: a page's forms send them to the REST API
(`/v1/...`) with the session cookie and the page's CSRF token (`static/console.js`).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import FileResponse, Response

import trainyard.server.services.jobs as jobs
from trainyard.server.api.auth import Principal
from trainyard.server.api.errors import ApiError, not_found
from trainyard.server.api.routes import (
    ArrayFilter,
    JobOrder,
    QueueFilter,
    StateFilter,
    UserFilter,
    context,
)
from trainyard.server.console import simreports, views
from trainyard.server.console.charts import Series, line_chart, stacked_chart
from trainyard.server.console.live import log_events
from trainyard.server.console.web import (
    ON_INVALID,
    SECURITY_HEADERS,
    ConsoleRoute,
    Page,
    page_user,
    settings,
    show,
)
from trainyard.server.services.logs import MAX_ATTEMPT, MAX_RANK

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)
Who = Annotated[Principal, Depends(page_user)]
WINDOWS = {"1h": 3600.0, "24h": 86400.0, "7d": 7 * 86400.0, "30d": 30 * 86400.0}


@router.get("/")
async def cluster_page(request: Request, who: Who) -> Response:
    page = Page(
        "cluster.html",
        lambda s, now: views.cluster(s, who, now),
        live=("map", "summary"),
        title="Cluster",
        nav="cluster",
    )
    return await show(request, who, page)


@router.get("/queues")
async def queues_page(request: Request, who: Who) -> Response:
    weight = settings(request).usage_weight
    page = Page(
        "queues.html",
        lambda s, now: views.queues(s, who, now, weight),
        live=("queues",),
        title="Queues",
        nav="queues",
    )
    return await show(request, who, page)


@router.get("/jobs")
async def jobs_page(
    request: Request,
    who: Who,
    state: StateFilter = None,
    queue: QueueFilter = None,
    user: UserFilter = None,
    sort: JobOrder = None,
    array: ArrayFilter = None,
    page: Annotated[int, Query(ge=1, le=1_000_000)] = 1,
) -> Response:
    where = jobs.Filters(
        states=state, queue=queue or None, user=user or None, sort=sort, array=array or None
    )
    shown = Page(
        "jobs.html",
        lambda s, now: views.job_list(s, who, where, page),
        live=("jobs_table", "counts"),
        title="Jobs",
        nav="jobs",
        extra={"filters": where, "error": None, "raw": request.query_params},
    )
    return await show(request, who, shown)


async def _jobs_invalid(request: Request, error: ApiError) -> Response:
    """The jobs page with its filters refused: the API's error next to the field."""
    who = await page_user(request)
    shown = Page(
        "jobs.html",
        lambda s, now: views.job_list(s, who, jobs.Filters(), 1) | {"jobs": [], "more": False},
        title="Jobs",
        nav="jobs",
        status=422,
        extra={"filters": jobs.Filters(), "error": error, "raw": request.query_params},
    )
    return await show(request, who, shown)


ON_INVALID["/jobs"] = _jobs_invalid


def _job_charts(values: dict[str, Any]) -> dict[str, Any]:
    """The job page's charts, from what `views.job_detail` found."""
    charts = [
        line_chart("GPUs held", [Series("GPUs", values["gpus_over_time"])], y_unit="GPUs",
                   step=True),
    ]  # fmt: skip
    if values["world"]:
        charts.append(line_chart("World size (reported)", [Series("ranks", values["world"])],
                                 y_unit="ranks", step=True))  # fmt: skip
        rates = [Series("throughput", values["throughput"])]
        title = "Throughput"
        if values["goodput"]:  # reported gradient statistics: Pollux's efficiency applies
            rates.append(Series("goodput", values["goodput"]))
            title = "Throughput and goodput"
        charts.append(line_chart(title, rates, y_unit="samples/s"))
    if values["loss"]:
        charts.append(line_chart("Loss", [Series("loss", values["loss"])], y_min=None))
    return values | {"charts": charts}


@router.get("/jobs/{job_id}")
async def job_page(request: Request, who: Who, job_id: str) -> Response:
    logs = context(request).logs
    page = Page(
        "job.html",
        lambda s, now: _job_charts(views.job_detail(s, who, job_id, now, logs)),
        live=("job_head", "job_facts", "job_events", "job_charts", "job_checkpoints"),
        title=f"Job {job_id}",
        nav="jobs",
    )
    return await show(request, who, page)


@router.get("/jobs/{job_id}/log")
async def job_log(
    request: Request,
    who: Who,
    job_id: str,
    rank: Annotated[int, Query(ge=0, le=MAX_RANK)] = 0,
    attempt: Annotated[int | None, Query(ge=0, le=MAX_ATTEMPT)] = None,
) -> Response:
    """A rank's log as server-sent events (the job page's live log)."""
    del who  # the stream authenticates itself, as the API's logs route does
    return log_events(request, job_id, rank, attempt)


@router.get("/submit")
async def submit_page(request: Request, who: Who) -> Response:
    page = Page(
        "submit.html",
        lambda s, now: {"queue_names": [q.name for q in jobs.list_queues(s, who).queues]},
        title="Submit a job",
        nav="submit",
    )
    return await show(request, who, page)


@router.get("/usage")
async def usage_page(
    request: Request,
    who: Who,
    window: Annotated[str, Query(pattern="^(1h|24h|7d|30d)$")] = "24h",
    by: Annotated[str, Query(pattern="^(tenant|user|queue)$")] = "queue",
) -> Response:
    until = context(request).clock()
    since = until - WINDOWS[window]

    def build(session: object, now: float) -> dict[str, object]:
        values = views.usage_page(session, who, now, since=since, until=until, by=by)  # type: ignore[arg-type]
        stacked = [Series(k, v) for k, v in values["stacked"].items()]
        values["gpu_hours_chart"] = stacked_chart(
            f"GPU-hours by {by} per {values['bucket_hours'] * 60:.0f} min", stacked,
            y_unit="GPU-h",
        )  # fmt: skip
        values["utilisation_chart"] = line_chart(
            "Utilisation of the cluster's GPUs",
            [Series("all tenants", values["utilisation"]),
             Series(f"tenant {who.tenant_name}", values["share"])],
            y_unit="%",
        )  # fmt: skip
        return values

    page = Page("usage.html", build, live=("usage_body",), title="Usage", nav="usage",
                extra={"window": window, "windows": list(WINDOWS)})  # fmt: skip
    return await show(request, who, page)


@router.get("/tokens")
async def tokens_page(request: Request, who: Who) -> Response:
    page = Page("tokens.html", lambda s, now: views.own_tokens(s, who), live=("token_list",),
                title="Tokens", nav="tokens")  # fmt: skip
    return await show(request, who, page)


@router.get("/admin")
async def admin_page(request: Request, who: Who) -> Response:
    who.require_admin("see the tenant's users")
    page = Page("admin.html", lambda s, now: views.admin(s, who, now),
                live=("admin_users", "admin_tokens", "admin_audit"), title="Tenant",
                nav="admin")  # fmt: skip
    return await show(request, who, page)


@router.get("/simulations")
async def simulations_page(request: Request, who: Who) -> Response:
    roots = settings(request).sim_reports
    page = Page("simulations.html",
                lambda s, now: {"reports": simreports.reports(roots), "roots": roots},
                title="Simulations", nav="simulations")  # fmt: skip
    return await show(request, who, page)


@router.get("/simulations/{name}")
async def simulation_page(request: Request, who: Who, name: str) -> Response:
    report = simreports.find(settings(request).sim_reports, name)
    if report is None:
        raise not_found(f"simulation report {name!r}")
    page = Page("simulation.html", lambda s, now: {"report": report, **simreports.details(report)},
                title=f"Simulation {name}", nav="simulations")  # fmt: skip
    return await show(request, who, page)


@router.get("/simulations/{name}/{file_name}")
async def simulation_file(request: Request, who: Who, name: str, file_name: str) -> Response:
    del who
    report = simreports.find(settings(request).sim_reports, name)
    path = simreports.file(report, file_name) if report is not None else None
    if path is None:
        raise not_found(f"file {file_name!r} of simulation report {name!r}")
    headers = dict(SECURITY_HEADERS) | {"Cache-Control": "private, max-age=60"}
    return FileResponse(path, media_type="image/png", headers=headers)
