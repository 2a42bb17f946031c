"""`trainyard schedule`: run a scenario file through the scheduling core and show decisions.

Thin shell over `trainyard.scenario`: load the file, run one cycle (or, when the scenario
has `steps:`, every cycle of them, `scenario.steps.run_steps`), print each decision as
tables (default) or as JSON (`--json`: one decision in the format of docs/scenarios.md, or
`{"cycles": [...]}` with the step and cycle of each). Input errors (bad file, bad field,
unknown profile) print one `error: ...` line on stderr and exit with code 2, never a
traceback.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from trainyard.core import Decision, NodeDevices, SnapshotError, UnknownNameError
from trainyard.scenario import ScenarioError, decision_to_dict, decision_to_json, load_scenario
from trainyard.scenario.steps import run_steps

_SHOWN_NODES = 6  # nodes listed per row before "+N more"


def register(app: typer.Typer) -> None:
    """Add the `schedule` command to `app`."""
    app.command("schedule")(schedule_command)


def schedule_command(
    scenario: Annotated[
        str,
        typer.Option(
            "--scenario",
            "-s",
            metavar="FILE",
            help="Scenario file (YAML or JSON, see docs/scenarios.md).",
        ),
    ],
    profile: Annotated[
        str | None,
        typer.Option("--profile", "-p", help="Profile name; overrides the scenario's own."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the decision as JSON.")] = False,
) -> None:
    """Run a scenario through the scheduling core (one cycle, or its steps) and print what
    it decides."""
    try:
        loaded = load_scenario(scenario)
        rounds = run_steps(loaded, profile)
    except (ScenarioError, SnapshotError, UnknownNameError, ValueError) as exc:
        message = exc.message if isinstance(exc, UnknownNameError) else str(exc)
        typer.echo(f"error: {' '.join(message.split())}", err=True)
        raise typer.Exit(2) from None
    if not loaded.steps:
        decision = rounds[0].decision
        if as_json:
            typer.echo(decision_to_json(decision), nl=False)
        else:
            render(decision, Console(highlight=False))
        return
    if as_json:
        cycles = [
            {"step": r.step, "cycle": r.cycle, **decision_to_dict(r.decision)} for r in rounds
        ]
        typer.echo(json.dumps({"cycles": cycles}, indent=2) + "\n", nl=False)
        return
    console = Console(highlight=False)
    for r in rounds:
        console.rule(f"step {r.step}, cycle {r.cycle}")
        if r.decision.is_empty:
            console.print(
                f"t={r.decision.now:g}: nothing changes ({len(r.decision.pending)} pending)"
            )
        else:
            render(r.decision, console)


def _devices(devices: tuple[int, ...]) -> str:
    """(0, 1, 2, 3, 6) -> "0-3,6"."""
    out: list[str] = []
    start = prev = -2
    for d in (*devices, -2):
        if d == prev + 1:
            prev = d
            continue
        if start >= 0:
            out.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = d
    return ",".join(out)


def _nodes(nodes: tuple[NodeDevices, ...]) -> str:
    shown = " ".join(f"{nd.node}[{_devices(nd.devices)}]" for nd in nodes[:_SHOWN_NODES])
    more = len(nodes) - _SHOWN_NODES
    return f"{shown} +{more} more nodes" if more > 0 else shown


def _when(t: float | None, now: float) -> str:
    if t is None:
        return "-"
    return f"{t:g} (in {t - now:g}s)" if t > now else f"{t:g} (now)"


def render(decision: Decision, console: Console) -> None:
    """Print `decision` as tables: placements, evictions, resizes, running elastic jobs not
    grown, reservations, pending."""
    d = decision
    console.print(
        f"profile [bold]{d.profile}[/bold] at t={d.now:g}: {len(d.placements)} placed, "
        f"{len(d.evictions)} evicted, {len(d.resizes)} resized, {len(d.reservations)} "
        f"reserved, {len(d.pending)} pending"
    )
    if d.placements:
        t = Table("job", "queue", "GPUs", "type", "action", "nodes[devices]", title="Placements")
        for p in d.placements:
            after = f" after evicting {', '.join(p.after_evictions)}" if p.after_evictions else ""
            t.add_row(p.job_id, p.queue, str(p.gpus), p.gpu_type, p.action + after, _nodes(p.nodes))
        console.print(t)
    if d.evictions:
        t = Table("job", "queue", "GPUs", "action", "for job", "reason", title="Evictions")
        for e in d.evictions:
            t.add_row(e.job_id, e.queue, str(e.gpus), e.action, e.for_job, e.reason)
        console.print(t)
    if d.resizes:
        t = Table("job", "queue", "GPUs", "nodes[devices]", "reason", title="Resizes")
        for z in d.resizes:
            after = f" (after {', '.join(z.after_evictions)} stop)" if z.after_evictions else ""
            t.add_row(z.job_id, z.queue, f"{z.from_gpus} -> {z.gpus}", _nodes(z.nodes),
                      z.reason + after)  # fmt: skip
        console.print(t)
    if d.not_grown:
        t = Table("job", "until", "why it was not grown into idle GPUs", title="Not grown")
        for jid, note in d.not_grown.items():
            t.add_row(jid, _when(note.until, d.now), note.reason)
        console.print(t)
    if d.reservations:
        t = Table("job", "start", "nodes[devices]", title="Reservations")
        for r in d.reservations:
            t.add_row(r.job_id, _when(r.start_time, d.now), _nodes(r.nodes))
        console.print(t)
    if d.pending:
        t = Table("job", "code", "estimated start", "reason", title="Pending")
        for jid, reason in d.pending.items():
            t.add_row(jid, reason.code, _when(reason.estimated_start, d.now), reason.message)
        console.print(t)
