"""`trainyard bench scheduler`: the scheduler benchmark from the command line (JSON or table)."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table

from trainyard.core import PROFILES, UnknownNameError

MAX_GPUS = 1_048_576  # a hundred times the largest cluster
MAX_JOBS = 1_000_000
bench_app = typer.Typer(help="Benchmarks that print JSON (recorded in docs/benchmarks.md).")


@bench_app.command("scheduler")
def scheduler(
    gpus: int = typer.Option(10_240, help="GPUs in the synthetic cluster (8 per node)."),
    pending: int = typer.Option(5_000, help="Pending jobs (Philly size distribution)."),
    profile: str = typer.Option("default", help="Scheduling profile."),
    repeats: int = typer.Option(0, help="Full cycles to time (0: 20, or 5 above 20k GPUs)."),
    arrivals: int = typer.Option(50, help="Single arrivals to time in the steady cluster."),
    seed: int = typer.Option(0, help="Random seed of the synthetic workload."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Time scheduling cycles on a half-occupied synthetic cluster (virtual devices)."""
    from trainyard.sim.timing import run

    bounds = (
        ("--gpus", gpus, 8, MAX_GPUS),
        ("--pending", pending, 0, MAX_JOBS),
        ("--arrivals", arrivals, 1, MAX_JOBS),
        ("--repeats", repeats, 0, 1_000),
    )
    for flag, value, low, high in bounds:  # the cluster is built in memory: bounded
        if not low <= value <= high:
            typer.echo(f"error: {flag} must be {low:,} to {high:,}, got {value:,}", err=True)
            raise typer.Exit(2)
    try:
        PROFILES.get(profile)
    except UnknownNameError as exc:
        typer.echo(f"error: --profile: {exc}", err=True)
        raise typer.Exit(2) from None
    result = run(gpus, pending, repeats=repeats, arrivals=arrivals, profile=profile, seed=seed)
    if as_json:
        typer.echo(json.dumps(result))
        return
    table = Table(title=f"scheduler benchmark ({result['devices']})")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in result.items():
        table.add_row(key, str(value))
    Console().print(table)


def register(app: typer.Typer) -> None:
    app.add_typer(bench_app, name="bench")
