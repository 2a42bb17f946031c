"""`trainyard usage`: GPU-, CPU- and memory-hours of your tenant, as `sacct` reports them.

`--since`/`--until` take a date or time (ISO 8601, UTC unless it says otherwise), epoch
seconds, or a duration meaning "that long ago" (`7d`, `12h`); `--by tenant|user|queue|job`;
`--format table|csv|json`. The figures come from `GET /v1/usage`: every run interval of every
job, preempted and failed attempts included, counted to the second inside the window. The
operator reads every tenant's with `trainyard admin usage` (the same options and output,
`checked` and `render` here, straight from the database).
"""

from __future__ import annotations

import csv
import json
import sys
import time
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from trainyard.cli.remote import TokenOption, UrlOption, connect, console, fail, parse_when

COLUMNS = ("key", "gpu_hours", "gpu_seconds", "cpu_seconds", "memory_gb_seconds", "intervals",
           "jobs")  # fmt: skip


def register(app: typer.Typer) -> None:
    """Add `usage` to `app`."""
    app.command("usage")(usage_command)


# the options `trainyard usage` and `trainyard admin usage` share
Since = Annotated[str, typer.Option(help="start: a date, epoch seconds or 7d (ago)")]
Until = Annotated[str | None, typer.Option(help="end (default: now)")]
By = Annotated[str, typer.Option(help="group by tenant, user, queue or job")]
Output = Annotated[str, typer.Option("--format", help="table, csv or json")]
AsJson = Annotated[bool, typer.Option("--json", help="The same as --format json.")]


def usage_command(
    since: Since = "30d",
    until: Until = None,
    by: By = "user",
    output: Output = "table",
    as_json: AsJson = False,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """GPU/CPU/memory usage of your tenant in a window, to the second."""
    output, params = checked(since, until, by, output, as_json)
    with connect(url, token) as client:
        out = client.get("/v1/usage", **params)
    render(out, by, output)


def checked(
    since: str, until: str | None, by: str, output: str, as_json: bool
) -> tuple[str, dict[str, Any]]:
    """The output format and the query (`since`, `until` when given, `by`), or exit 2."""
    output = "json" if as_json else output
    if by not in ("tenant", "user", "queue", "job"):
        fail(f"--by: unknown grouping {by!r}; use tenant, user, queue or job")
    if output not in ("table", "csv", "json"):
        fail(f"--format: unknown format {output!r}; use table, csv or json")
    now = time.time()
    params: dict[str, Any] = {"since": max(0.0, parse_when(since, "--since", now)), "by": by}
    if until is not None:
        params["until"] = parse_when(until, "--until", now)
        if params["until"] <= params["since"]:
            fail("--until: must be after --since")
    return output, params


def render(out: dict[str, Any], by: str, output: str) -> None:
    """`GET /v1/usage`'s answer as a table, CSV or JSON."""
    rows: list[dict[str, Any]] = out["rows"]
    if output == "json":
        typer.echo(json.dumps(out, indent=2))
        return
    if output == "csv":
        writer = csv.writer(sys.stdout)
        writer.writerow(COLUMNS)
        for row in rows:
            writer.writerow([row[c] for c in COLUMNS])
        return
    if not rows:
        typer.echo("no usage in that window")
        return
    start = datetime.fromtimestamp(out["since"], UTC).strftime("%Y-%m-%d %H:%M")
    end = datetime.fromtimestamp(out["until"], UTC).strftime("%Y-%m-%d %H:%M")
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title=f"usage {start} .. {end} UTC")
    for name in (by.upper(), "GPU-HOURS", "GPU-S", "CPU-S", "MEM-GB-S", "RUNS", "JOBS"):
        table.add_column(name, justify="left" if name == by.upper() else "right")
    for row in rows:
        table.add_row(
            row["key"], f"{row['gpu_hours']:.3f}", f"{row['gpu_seconds']:.0f}",
            f"{row['cpu_seconds']:.0f}", f"{row['memory_gb_seconds']:.0f}",
            str(row["intervals"]), str(row["jobs"]),
        )  # fmt: skip
    console().print(table)
