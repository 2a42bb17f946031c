"""`trainyard admin job list|describe|cancel`: every tenant's jobs, for the operator, on the
server's database like the rest of `trainyard admin` (`--home` / `--db`).

`describe` and `cancel` act as an admin of the job's tenant would through the API (the same
service code: `services/jobs.py`), with the operator's OS login as the actor in the job's
events and the audit trail; a running server stops a cancelled job at its next round.
"""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

import typer
from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from trainyard.cli.admin import Db, Home, Json, _fail, _run, _table, _when, admin_app
from trainyard.server.api.auth import Principal
from trainyard.server.api.errors import ApiError
from trainyard.server.db import Job, JobState, Queue, Role, Tenant
from trainyard.server.services import audit
from trainyard.server.services import jobs as svc

job_app = typer.Typer(help="Every tenant's jobs: list, describe, cancel.", no_args_is_help=True)
admin_app.add_typer(job_app, name="job")
JobId = Annotated[str, typer.Argument(metavar="JOB", help="The job's id.")]


def _operator(session: Session, job_id: str) -> Principal:
    job = session.get(Job, job_id) if len(job_id) <= 32 else None
    if job is None:
        raise ApiError(404, f"no job {job_id!r}; see: trainyard admin job list", field="job")
    tenant = session.get(Tenant, job.tenant_id)
    name = tenant.name if tenant is not None else str(job.tenant_id)
    return Principal(0, audit.operator(), job.tenant_id, name, Role.ADMIN)


def _act(home: Any, db: Any, work: Any) -> Any:
    try:
        return _run(home, db, work)
    except ApiError as error:
        _fail(error.field or "job", error.message)


@job_app.command("list")
def job_list(
    state: Annotated[str | None, typer.Option("--state", "-s", help="Only this state.")] = None,
    tenant: Annotated[str | None, typer.Option("--tenant", "-t", help="Only this tenant.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=100_000, help="At most this many.")] = 100,
    offset: Annotated[int, typer.Option(min=0, help="Skip the newest N.")] = 0,
    home: Home = None,
    db: Db = None,
    as_json: Json = False,
) -> None:
    """Jobs of every tenant, newest first (says when more exist)."""
    wanted = None
    if state is not None:
        try:
            wanted = JobState(state.upper())
        except ValueError:
            _fail("--state", f"unknown state {state!r}; use one of "
                  f"{', '.join(s.value for s in JobState)}")  # fmt: skip

    def read(s: Session) -> tuple[list[dict[str, Any]], bool]:
        query = (
            select(Job, Tenant.name, Queue.name)
            .join(Tenant, Job.tenant_id == Tenant.id)
            .join(Queue, Job.queue_id == Queue.id)
            .options(selectinload(Job.user))
            .order_by(Job.submitted_at.desc(), Job.id)
            .offset(offset)
            .limit(limit + 1)
        )
        if wanted is not None:
            query = query.where(Job.state == wanted)
        if tenant is not None:
            query = query.where(Tenant.name == tenant)
        rows = [
            {
                "id": j.id,
                "name": j.name,
                "tenant": t,
                "queue": q,
                "state": j.state.value,
                "gpus": j.gpus,
                "user": j.user.name if j.user else None,
                "submitted_at": j.submitted_at,
            }
            for j, t, q in s.execute(query)
        ]
        return rows[:limit], len(rows) > limit

    rows, more = _run(home, db, read)
    if as_json:
        typer.echo(json.dumps({"jobs": rows, "more": more}, indent=2))
        return
    _table("jobs", ["id", "name", "tenant", "queue", "state", "gpus", "user", "submitted"],
           [(r["id"], r["name"], r["tenant"], r["queue"], r["state"], r["gpus"], r["user"],
             _when(r["submitted_at"])) for r in rows])  # fmt: skip
    if more:
        typer.echo(f"more jobs exist: --offset {offset + len(rows)} for the next page")


@job_app.command("describe")
def job_describe(job: JobId, home: Home = None, db: Db = None) -> None:
    """A job of any tenant, as its tenant's admin sees it (JSON)."""
    detail = _act(home, db, lambda s: svc.describe_job(s, _operator(s, job), job))
    typer.echo(detail.model_dump_json(indent=2))


@job_app.command("cancel")
def job_cancel(job: JobId, home: Home = None, db: Db = None) -> None:
    """Cancel a job of any tenant (a running server stops it at its next round)."""
    out = _act(home, db, lambda s: svc.cancel_job(s, _operator(s, job), job, now=time.time()))
    typer.echo(f"job {out.id}: {out.state.value} (by {audit.operator()})")
