"""`trainyard jobs`: the tenant's jobs as `squeue` shows them: filtered, paged, watched.

Filters go to the server (`GET /v1/jobs`): `--state` (repeat, or commas; squeue's codes
such as PD and R too), `--queue`,
`--user`, `--since` (`2h` ago, epoch seconds, or a date `2026-12-01[T10:00]`, UTC unless
it names a zone; as `trainyard usage` reads it: `remote.parse_when`), `--array`.
A page is `--limit` rows (100); when more exist it says so on stderr and how to get them
(`--offset`, or `--all` to read every page). `--format id,state,gpus` picks the columns, as
`squeue -o` does (`--format help` lists them); `--no-header` drops the header line for
scripts; `--watch [S]` redraws every S seconds until Ctrl-C; `--json` prints the API's answer.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from trainyard.cli import plain
from trainyard.cli.jobs import STATE_STYLE
from trainyard.cli.remote import (
    JsonOption,
    TokenOption,
    UrlOption,
    age,
    clock,
    connect,
    fail,
    parse_when,
    print_json,
)
from trainyard.client.http import ApiClient

STATES = ("PENDING", "STARTING", "RUNNING", "RESIZING", "PREEMPTED", "SUCCEEDED", "FAILED",
          "CANCELLED")  # fmt: skip
COLUMNS: dict[str, str] = {
    "id": "the job's id",
    "name": "its name",
    "queue": "its queue",
    "state": "its state",
    "gpus": "GPUs it holds (or asks for while pending)",
    "elastic": "an elastic job's range (min-max GPUs)",
    "user": "who submitted it",
    "age": "time since it was submitted",
    "submitted": "when it was submitted (local time)",
    "changed": "when its state last changed (local time)",
    "array": "the job array it belongs to",
    "index": "its index in that array",
    "reason": "why a pending job waits (squeue's %r)",
}
DEFAULT_FORMAT = "id,name,queue,state,gpus,user,age"
RIGHT = ("GPUS", "AGE", "INDEX")


def register(app: typer.Typer) -> None:
    """Add `jobs` to `app`."""
    app.command("jobs")(jobs_command)


# squeue's short state codes (`squeue -t PD,R`), for the states trainyard has
SLURM_CODES = {"PD": "PENDING", "CF": "STARTING", "R": "RUNNING", "RS": "RESIZING",
               "PR": "PREEMPTED", "CD": "SUCCEEDED", "F": "FAILED", "CA": "CANCELLED"}  # fmt: skip


def _states(items: list[str]) -> list[str]:
    out = []
    for item in items:
        for part in item.split(","):
            state = part.strip().upper()
            state = SLURM_CODES.get(state, state)
            if state not in STATES:
                codes = ", ".join(f"{code} ({name})" for code, name in SLURM_CODES.items())
                fail(f"--state: {part!r} is not a state; use {', '.join(STATES)}, or squeue's "
                     f"codes {codes}")  # fmt: skip
            out.append(state)
    return out


def _columns(spec: str) -> list[str]:
    if spec.strip() == "help":
        width = max(map(len, COLUMNS))
        typer.echo("\n".join(f"{k:<{width}}  {v}" for k, v in COLUMNS.items()))
        raise typer.Exit(0)
    cols = [c.strip().lower() for c in spec.split(",") if c.strip()]
    for col in cols:
        if col not in COLUMNS:
            fail(f"--format: {col!r} is not a column; use {', '.join(COLUMNS)} (or --format help)")
    if not cols:
        fail("--format: name at least one column, e.g. --format id,state")
    return cols


def _cell(job: dict[str, Any], col: str) -> str:
    if col == "age":
        return age(job["submitted_at"])
    if col == "submitted":
        return clock(job["submitted_at"])
    if col == "changed":
        return clock(job.get("state_changed_at"))
    if col == "elastic":
        low, high = job.get("min_gpus"), job.get("max_gpus")
        return f"{low}-{high}" if low is not None and high is not None else "-"
    if col == "array":
        return job.get("array_id") or "-"
    if col == "index":
        index = job.get("array_index")
        return "-" if index is None else str(index)
    if col == "reason":
        return job.get("pending_reason") or "-"
    value = job.get(col)
    return "-" if value is None or value == "" else str(value)


def fetch_jobs(client: ApiClient, query: dict[str, Any], every: bool) -> dict[str, Any]:
    """One page, or with `every` all of them (`more` then false)."""
    out: dict[str, Any] = client.get("/v1/jobs", **query)
    if not every:
        return out
    rows = list(out["jobs"])
    while out.get("more"):
        query = {**query, "offset": query["offset"] + len(out["jobs"])}
        out = client.get("/v1/jobs", **query)
        rows += out["jobs"]
    return {"jobs": rows, "more": False}


def render(out: dict[str, Any], cols: list[str], header: bool, colour: bool) -> str:
    jobs: list[dict[str, Any]] = out["jobs"]
    rows = [[_cell(j, c) for c in cols] for j in jobs]
    styles = [[STATE_STYLE.get(j["state"]) if c == "state" else None for c in cols] for j in jobs]
    text = plain.table([c.upper() for c in cols], rows, right=RIGHT, styles=styles, colour=colour)
    return text if header else "\n".join(text.split("\n")[1:])


def jobs_command(
    state: Annotated[
        list[str] | None,
        typer.Option("--state", "-s", help="Only these states (repeat, or PENDING,RUNNING)."),
    ] = None,
    queue: Annotated[str | None, typer.Option("--queue", "-q", help="Only this queue.")] = None,
    user: Annotated[str | None, typer.Option("--user", "-u", help="Only this user's.")] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", help="Only submitted since: 2h (ago) or 2026-12-01T10:00."),
    ] = None,
    array: Annotated[
        str | None, typer.Option("--array", help="Only this array's members (a-...).")
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", min=1, max=1000, help="At most this many jobs.")
    ] = 100,
    offset: Annotated[int, typer.Option("--offset", min=0, help="Skip the newest N.")] = 0,
    every: Annotated[bool, typer.Option("--all", help="Read every page.")] = False,
    fmt: Annotated[
        str, typer.Option("--format", "-o", help="Columns, e.g. id,state,gpus (help: list).")
    ] = DEFAULT_FORMAT,
    no_header: Annotated[bool, typer.Option("--no-header", help="No header line.")] = False,
    watch: Annotated[
        float | None,
        typer.Option("--watch", "-w", min=0.2, help="Redraw every N seconds (Ctrl-C stops)."),
    ] = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """List your tenant's jobs, newest first, filtered (a page; says when more exist)."""
    cols = _columns(fmt)
    query: dict[str, Any] = {
        "state": _states(state or []) or None,
        "queue": queue,
        "user": user,
        "since": max(0.0, parse_when(since, "--since", time.time())) if since is not None else None,
        "array": array,
        "limit": limit,
        "offset": offset,
    }
    colour = plain.colour_on()
    with connect(url, token) as client:
        while True:
            out = fetch_jobs(client, query, every)
            if watch is not None and colour:
                typer.echo("\x1b[H\x1b[2J", nl=False)  # clear the terminal between frames
            _show(out, cols, query, not no_header, colour, as_json)
            if watch is None:
                return
            try:
                time.sleep(watch)
            except KeyboardInterrupt:
                raise typer.Exit(0) from None


def _show(
    out: dict[str, Any],
    cols: list[str],
    query: dict[str, Any],
    header: bool,
    colour: bool,
    as_json: bool,
) -> None:
    if as_json:
        print_json(out)
        return
    if not out["jobs"]:
        typer.echo("no jobs" + _filters_text(query))
        return
    typer.echo(render(out, cols, header, colour))
    if out.get("more"):
        typer.echo(
            f"{len(out['jobs'])} shown; more jobs exist: --offset "
            f"{query['offset'] + len(out['jobs'])} for the next page, or --all",
            err=True,
        )


def _filters_text(query: dict[str, Any]) -> str:
    """` in state RUNNING in queue q ...`: the filters, for "no jobs ..."."""
    parts = []
    if query["state"]:
        parts.append(f"in state {', '.join(query['state'])}")
    if query["queue"] is not None:
        parts.append(f"in queue {query['queue']}")
    if query["user"] is not None:
        parts.append(f"of user {query['user']}")
    if query["since"] is not None:
        parts.append(f"submitted since {clock(query['since'])}")
    if query["array"] is not None:
        parts.append(f"in array {query['array']}")
    return "".join(f" {p}" for p in parts)
