"""`trainyard queues` and `trainyard nodes`: the cluster as the server's REST API shows it.

Virtual devices (declared with `trainyard up --virtual-gpus N` where no GPU was found) are
always labelled as such: they are not real GPUs and jobs placed on them run on the CPU.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from trainyard.cli.remote import (
    JsonOption,
    TokenOption,
    UrlOption,
    age,
    connect,
    console,
    print_json,
)

VIRTUAL_NOTE = "VIRTUAL: declared, not real"


def register(app: typer.Typer) -> None:
    """Add `queues` and `nodes` to `app`."""
    app.command("queues")(queues_command)
    app.command("nodes")(nodes_command)


def queues_command(
    as_json: JsonOption = False, url: UrlOption = None, token: TokenOption = None
) -> None:
    """List the queues you may submit to, with quotas, the GPUs held against them (the
    queue's jobs and its descendants') and job counts."""
    with connect(url, token) as client:
        out = client.get("/v1/queues")
    if as_json:
        print_json(out)
        return
    queues: list[dict[str, Any]] = out["queues"]
    if not queues:
        typer.echo("no queues")
        return
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for name, justify in (
        ("NAME", "left"),
        ("PARENT", "left"),
        ("TENANT", "left"),
        ("GUARANTEED", "right"),
        ("LIMIT", "right"),
        ("IN USE", "right"),
        ("WEIGHT", "right"),
        ("PENDING", "right"),
        ("RUNNING", "right"),
    ):
        table.add_column(name, justify=justify, no_wrap=name == "NAME")  # type: ignore[arg-type]
    for q in queues:
        table.add_row(
            escape(q["name"]),
            escape(q["parent"] or "-"),
            escape(q["tenant"] or "(shared)"),
            str(q["guaranteed"]),
            "-" if q["limit"] is None else str(q["limit"]),
            str(q.get("gpus_held", 0)),
            f"{q['weight']:g}",
            str(q["pending"]),
            str(q["running"]),
        )
    console().print(table)


def devices_text(devices: list[dict[str, Any]]) -> str:
    """`4 x H100 80GB` per kind of device, virtual ones marked, unhealthy ones counted."""
    if not devices:
        return "no GPUs"
    kinds = Counter((d["gpu_type"], float(d["memory_gb"]), bool(d["virtual"])) for d in devices)
    parts = []
    for (gpu_type, memory, virtual), count in kinds.items():
        text = f"{count} x {gpu_type} {memory:g}GB"
        parts.append(f"{text} ({VIRTUAL_NOTE})" if virtual else text)
    sick = [d for d in devices if d.get("health") != "healthy"]
    if sick:
        listed = ", ".join(f"{d['index']}: {d['health']}" for d in sick)
        parts.append(f"not healthy: {listed}")
    return "; ".join(parts)


def nodes_command(
    as_json: JsonOption = False, url: UrlOption = None, token: TokenOption = None
) -> None:
    """List the cluster's nodes and their devices (virtual devices are marked)."""
    with connect(url, token) as client:
        out = client.get("/v1/nodes")
    if as_json:
        print_json(out)
        return
    nodes: list[dict[str, Any]] = out["nodes"]
    if not nodes:
        typer.echo("no nodes registered (start one with `trainyard up`)")
        return
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("NAME", no_wrap=True)
    table.add_column("EXECUTOR")
    table.add_column("HEALTH")
    table.add_column("SCHEDULABLE")
    table.add_column("CPUS", justify="right")
    table.add_column("MEMORY", justify="right")
    table.add_column("DEVICES", overflow="fold")
    table.add_column("FREE", justify="right")
    table.add_column("HEARTBEAT", justify="right")
    for n in nodes:
        name = escape(n["name"]) + (" (virtual)" if n.get("virtual") else "")
        beat = n.get("last_heartbeat_at")
        table.add_row(
            name,
            escape(n["executor"]),
            escape(n["health"]),
            _schedulable(n),
            f"{n['cpus']:g}",
            f"{n['memory_gb']:.0f} GB",
            escape(devices_text(n["devices"])),
            str(sum(not d.get("busy") and d.get("health") == "healthy" for d in n["devices"])),
            f"{age(beat)} ago" if beat is not None else "-",
        )
    console().print(table)
    if any(d.get("virtual") for n in nodes for d in n["devices"]):
        typer.echo(
            "note: VIRTUAL devices are declared, not real GPUs (no GPU was found); "
            "jobs placed on them run on the CPU"
        )


def _schedulable(node: dict[str, Any]) -> str:
    """The SCHEDULABLE column: the operator's flag, "no" for a node that is not healthy
    whatever the flag says (with its health), and "spare" for a hot spare."""
    health = str(node.get("health", "healthy"))
    if health != "healthy":
        return f"no ({escape(health)})"
    if node["schedulable"] and node.get("spare"):
        return "spare (kept for recovering jobs)"
    return "yes" if node["schedulable"] else "no"
