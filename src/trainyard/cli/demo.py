"""`trainyard demo`: a simulated day through the real scheduling core (a simulator run)."""

from __future__ import annotations

import typer

from trainyard.core import PROFILES, UnknownNameError


def demo(
    profile: str = typer.Option("default", help="Scheduling profile."),
    jobs: int = typer.Option(400, help="Jobs arriving over the day."),
    seed: int = typer.Option(7, help="Random seed of the workload."),
    show: int = typer.Option(60, help="Decisions printed in full before hourly lines."),
) -> None:
    """Schedule a day of Philly-like jobs on 64 virtual GPUs and explain the decisions."""
    from trainyard.demo import run_day, summary

    try:
        PROFILES.get(profile)
    except UnknownNameError as exc:
        typer.echo(f"error: --profile: {exc}", err=True)
        raise typer.Exit(2) from None
    if jobs < 1:
        typer.echo("error: --jobs must be >= 1", err=True)
        raise typer.Exit(2)
    stats = run_day(seed=seed, jobs=jobs, profile=profile, show=show, echo=typer.echo)
    summary(stats, echo=typer.echo)


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
