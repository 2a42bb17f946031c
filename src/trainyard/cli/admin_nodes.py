"""`trainyard admin node list|cordon|drain|undrain|remove`: take a node out of scheduling and
back, or forget one that left for good.

`cordon` stops new placements on the node; jobs running there keep running. `drain` cordons
it and evicts the jobs running there: each gets the notice `preempt` and SIGTERM (the SDK
checkpoints and exits), is requeued with its progress, and runs elsewhere. `undrain` (or
`uncordon`) returns the node to service. `remove` forgets a lost node no job holds (it comes
back as a new node if its executor reports it again). The commands work on the database
like the rest of `trainyard admin` (`--home` / `--db`), are recorded in the audit trail, and
a running server honours them at its next step.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Annotated

import typer

from trainyard.cli.admin import Db, Home, Json, _run, _table, _when, admin_app
from trainyard.server.services import nodes as svc

node_app = typer.Typer(
    help="Nodes: list, cordon, drain, undrain (uncordon), remove.", no_args_is_help=True
)
admin_app.add_typer(node_app, name="node")
Name = Annotated[str, typer.Argument(metavar="NODE", help="The node's name (`admin node list`).")]


def _state(info: svc.NodeInfo) -> str:
    return info.state


@node_app.command("list")
def node_list(home: Home = None, db: Db = None, as_json: Json = False) -> None:
    """The nodes, whether they take new jobs, and how many jobs hold devices on each."""
    nodes = _run(home, db, svc.list_nodes)
    if as_json:
        out = [{**dataclasses.asdict(n), "state": n.state} for n in nodes]
        typer.echo(json.dumps(out, indent=2))
        return
    rows = [
        (
            n.name, _state(n), n.health,
            f"{n.gpus} x {n.gpu_type}" + (" (VIRTUAL)" if n.virtual else ""),
            n.jobs, _when(n.last_heartbeat_at), _why(n),
        )
        for n in nodes
    ]  # fmt: skip
    _table("nodes", ["name", "state", "health", "devices", "jobs", "heartbeat", "why"], rows)


def _why(info: svc.NodeInfo) -> str:
    bad = f"GPUs {','.join(map(str, info.unhealthy_gpus))} unhealthy" if info.unhealthy_gpus else ""
    return "; ".join(x for x in (info.drain_reason or "", bad) if x) or "-"


@node_app.command("cordon")
def node_cordon(node: Name, home: Home = None, db: Db = None) -> None:
    """Place no new job on NODE; the jobs running there keep running."""
    info = _run(home, db, lambda s: svc.set_schedulable(s, node, False), ("node.cordon", node, {}))
    typer.echo(f"node {info.name}: cordoned; {info.jobs} job(s) still run there")


@node_app.command("drain")
def node_drain(
    node: Name,
    reason: Annotated[
        str | None, typer.Option("--reason", help="why, shown by `admin node list`")
    ] = None,
    home: Home = None,
    db: Db = None,
) -> None:
    """Cordon NODE and evict the jobs running there (checkpointed, requeued elsewhere)."""
    now = time.time()
    details = {"reason": reason} if reason else {}
    info = _run(home, db, lambda s: svc.drain(s, node, now, reason), ("node.drain", node, details))
    typer.echo(
        f"node {info.name}: draining; {info.jobs} job(s) there are evicted and requeued"
        if info.jobs
        else f"node {info.name}: drained (no job runs there)"
    )


@node_app.command("undrain")
@node_app.command("uncordon")
def node_undrain(node: Name, home: Home = None, db: Db = None) -> None:
    """Let the scheduler place jobs on NODE again (ends a cordon or a drain)."""
    info = _run(home, db, lambda s: svc.set_schedulable(s, node, True), ("node.undrain", node, {}))
    typer.echo(f"node {info.name}: schedulable")


@node_app.command("remove")
def node_remove(node: Name, home: Home = None, db: Db = None) -> None:
    """Forget NODE: a lost node (it stopped reporting) on which no job holds devices."""
    info = _run(home, db, lambda s: svc.remove(s, node), ("node.remove", node, {}))
    typer.echo(f"node {info.name}: removed ({info.gpus} x {info.gpu_type})")
