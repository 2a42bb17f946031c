"""`trainyard admin queue add|set|list|rm`: the queue tree, its quotas, weights and priority
limits, on the server's database like the rest of `trainyard admin` (`--home` / `--db`).
Every change is recorded in the audit trail."""

from __future__ import annotations

import time
from typing import Annotated, TypeVar

import typer
from sqlalchemy.orm import Session

from trainyard.cli.admin import Db, Home, Json, _fail, _json, _run, _table, queue_app
from trainyard.server.services import admin as svc

T = TypeVar("T")

# ---- queues --------------------------------------------------------------------------------

Parent = Annotated[str | None, typer.Option("--parent", "-p", help="Parent queue.")]
Tenant = Annotated[str | None, typer.Option("--tenant", "-t", help="Owning tenant.")]
Guaranteed = Annotated[int | None, typer.Option("--guaranteed", "-g", help="Guaranteed GPUs.")]
Limit = Annotated[int | None, typer.Option("--limit", "-l", help="At most this many GPUs.")]
Weight = Annotated[float | None, typer.Option("--weight", "-w", help="Fair-share weight (> 0).")]
DefaultPriority = Annotated[
    int | None,
    typer.Option("--default-priority", help="Priority of its jobs whose spec names none "
                 "(else the nearest ancestor's, else 0)."),
]  # fmt: skip
MaxPriority = Annotated[
    int | None,
    typer.Option("--max-priority", help="Highest priority its jobs may ask for (a submit above "
                 "it is refused; the lowest limit of the queue and its ancestors applies)."),
]  # fmt: skip


def _warned(session: Session, out: T) -> tuple[T, str | None]:
    """`out`, with the warnings of the queue tree as it now stands (`svc.queue_warnings`)."""
    session.flush()
    return out, svc.queue_warnings(session)


def _warn(warning: str | None) -> None:
    if warning is not None:
        typer.echo(f"warning: {warning}", err=True)


def _queue_line(q: svc.QueueInfo) -> str:
    limit = "no limit" if q.limit is None else f"limit {q.limit}"
    top = "" if q.max_priority is None else f", max priority {q.max_priority}"
    if q.default_priority is not None:
        top += f", default priority {q.default_priority}"
    return (
        f"queue {q.name}: parent {q.parent or '-'}, {q.tenant or 'shared'}, "
        f"guaranteed {q.guaranteed}, {limit}, weight {q.weight:g}{top}"
    )


@queue_app.command("add")
def queue_add(
    name: Annotated[str, typer.Argument(help="Queue name (unique).")],
    parent: Parent = None,
    tenant: Annotated[
        str | None, typer.Option("--tenant", "-t", help="Owning tenant (default: shared).")
    ] = None,
    guaranteed: Guaranteed = 0,
    limit: Limit = None,
    weight: Weight = 1.0,
    max_priority: MaxPriority = None,
    default_priority: DefaultPriority = None,
    home: Home = None,
    db: Db = None,
) -> None:
    """Create a queue (shared unless --tenant; a root unless --parent)."""
    queue, warning = _run(
        home,
        db,
        lambda s: _warned(s, svc.create_queue(
            s,
            name,
            now=time.time(),
            parent=parent,
            tenant=tenant,
            guaranteed=guaranteed or 0,
            limit=limit,
            weight=1.0 if weight is None else weight,
            max_priority=max_priority,
            default_priority=default_priority,
        )),
        ("queue.add", name, {"parent": parent, "tenant": tenant, "guaranteed": guaranteed,
                             "limit": limit, "weight": weight, "max_priority": max_priority,
                             "default_priority": default_priority}),
    )  # fmt: skip
    typer.echo(f"created {_queue_line(queue)}")
    _warn(warning)


@queue_app.command("set")
def queue_set(
    name: Annotated[str, typer.Argument(help="Queue name.")],
    parent: Parent = None,
    no_parent: Annotated[bool, typer.Option("--no-parent", help="Make it a root.")] = False,
    tenant: Tenant = None,
    shared: Annotated[bool, typer.Option("--shared", help="Shared by all tenants.")] = False,
    guaranteed: Guaranteed = None,
    limit: Limit = None,
    no_limit: Annotated[bool, typer.Option("--no-limit", help="Remove the limit.")] = False,
    weight: Weight = None,
    max_priority: MaxPriority = None,
    no_max_priority: Annotated[
        bool, typer.Option("--no-max-priority", help="Remove the priority limit.")
    ] = False,
    default_priority: DefaultPriority = None,
    no_default_priority: Annotated[
        bool, typer.Option("--no-default-priority", help="Remove the default priority.")
    ] = False,
    home: Home = None,
    db: Db = None,
) -> None:
    """Change a queue's parent, tenant, guarantee, limit, weight or priority limit."""
    for given, flag, other in (
        (parent is not None and no_parent, "--parent", "--no-parent"),
        (tenant is not None and shared, "--tenant", "--shared"),
        (limit is not None and no_limit, "--limit", "--no-limit"),
        (max_priority is not None and no_max_priority, "--max-priority", "--no-max-priority"),
        (
            default_priority is not None and no_default_priority,
            "--default-priority",
            "--no-default-priority",
        ),
    ):
        if given:
            _fail(flag, f"give {flag} or {other}, not both")
    new_parent: str | svc.Unset | None = (
        None if no_parent else (svc.UNSET if parent is None else parent)
    )
    new_tenant: str | svc.Unset | None = (
        None if shared else (svc.UNSET if tenant is None else tenant)
    )
    new_limit: int | svc.Unset | None = (
        None if no_limit else (svc.UNSET if limit is None else limit)
    )
    new_top: int | svc.Unset | None = (
        None if no_max_priority else (svc.UNSET if max_priority is None else max_priority)
    )
    new_default: int | svc.Unset | None = (
        None
        if no_default_priority
        else (svc.UNSET if default_priority is None else default_priority)
    )
    changes = (new_parent, new_tenant, new_limit, new_top, new_default)
    if all(c is svc.UNSET for c in changes) and guaranteed is None and weight is None:
        _fail("queue", "nothing to change: give --parent, --tenant, --guaranteed, --limit, ...")
    queue, warning = _run(
        home,
        db,
        lambda s: _warned(s, svc.update_queue(
            s,
            name,
            parent=new_parent,
            tenant=new_tenant,
            guaranteed=guaranteed,
            limit=new_limit,
            weight=weight,
            max_priority=new_top,
            default_priority=new_default,
        )),
        ("queue.set", name, {
            **{k: v for k, v in (("parent", new_parent), ("tenant", new_tenant),
                                 ("limit", new_limit), ("max_priority", new_top),
                                 ("default_priority", new_default))
               if v is not svc.UNSET},  # None: removed
            **{k: v for k, v in (("guaranteed", guaranteed), ("weight", weight))
               if v is not None},
        }),
    )  # fmt: skip
    typer.echo(f"updated {_queue_line(queue)}")
    _warn(warning)


@queue_app.command("list")
def queue_list(
    tenant: Annotated[
        str | None, typer.Option("--tenant", "-t", help="Only queues this tenant may use.")
    ] = None,
    home: Home = None,
    db: Db = None,
    as_json: Json = False,
) -> None:
    """List queues, as a tree."""
    queues, warning = _run(home, db, lambda s: _warned(s, svc.list_queues(s, tenant)))
    if as_json:
        _json(queues)
        _warn(warning)
        return
    by_name = {q.name: q for q in queues}
    ordered: list[tuple[int, svc.QueueInfo]] = []

    def walk(q: svc.QueueInfo, depth: int) -> None:
        ordered.append((depth, q))
        for child in q.children:
            if child in by_name:
                walk(by_name[child], depth + 1)

    for q in queues:
        if q.parent is None or q.parent not in by_name:
            walk(q, 0)
    shown = {q.name for _depth, q in ordered}
    ordered += [(0, q) for q in queues if q.name not in shown]  # on a cycle of parents
    rows = [
        (
            "  " * depth + q.name,
            q.tenant or "shared",
            q.guaranteed,
            q.limit,
            q.gpus_held,
            f"{q.weight:g}",
            q.pending,
            q.running,
        )
        for depth, q in ordered
    ]
    columns = ("queue", "tenant", "guaranteed", "limit", "in use", "weight", "pending", "running")
    _table("queues", columns, rows)
    _warn(warning)


@queue_app.command("rm")
def queue_rm(
    name: Annotated[str, typer.Argument(help="Queue name.")],
    purge_finished: Annotated[
        bool,
        typer.Option("--purge-finished", help="Also delete its finished jobs (their history)."),
    ] = False,
    home: Home = None,
    db: Db = None,
) -> None:
    """Delete a queue without child queues or unfinished jobs."""
    gone = _run(home, db, lambda s: svc.delete_queue(s, name, purge_finished=purge_finished),
                ("queue.rm", name, {"purge_finished": purge_finished}))  # fmt: skip
    typer.echo(f"queue {name} deleted" + (f" with {gone} finished job(s)" if gone else ""))
