"""`trainyard logs JOB`: a job's output (every rank's stdout and stderr), streamed from the API.

Without `--follow` it prints what the latest attempt (or `--attempt N`) wrote so far. With
`--follow` it waits for a job that has not started yet (one line on stderr says why it waits),
streams the running attempt as it writes, and, when the job is restarted after a failure,
goes on with the next attempt; it ends when the job has finished. `--tail N` prints only the
last N lines of each rank's output (with `--follow`, then what follows, as `tail -n N -f`).
Ctrl-C ends it quietly.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import Annotated, Any

import typer

from trainyard.cli.jobs import TERMINAL, job_path
from trainyard.cli.remote import TokenOption, UrlOption, connect
from trainyard.client.http import ApiClient

POLL_S = 0.5
MAX_TAIL = 1_000_000  # as the API's `tail` allows


def register(app: typer.Typer) -> None:
    """Add the `logs` command to `app`."""
    app.command("logs")(logs_command)


def _stream(
    client: ApiClient,
    job: str,
    *,
    rank: int | None,
    attempt: int | None,
    follow: bool,
    tail: int | None = None,
) -> bool:
    """Copy the job's log to stdout as it arrives; whether anything was written."""
    wrote = False
    with client.stream_text(
        job_path(job, "/logs"), rank=rank, attempt=attempt, follow="true" if follow else None,
        tail=tail,
    ) as chunks:  # fmt: skip
        for chunk in chunks:
            if chunk:
                typer.echo(chunk, nl=False)  # flushes
                wrote = True
    return wrote


def _waiting_line(job: str, detail: dict[str, Any]) -> str:
    state = detail["state"]
    if state == "PENDING":
        why = detail.get("pending_reason")
        if not why and detail.get("next_retry_at") is not None:
            why = f"restart {detail['restart_count']} of {detail['max_restarts']} after a backoff"
        return f"waiting for job {job} to start (pending: {why or 'not scheduled yet'})"
    if state == "STARTING":
        return f"waiting for job {job} to start (starting: placed, launching its processes)"
    return f"waiting for job {job} to run again ({state.lower()})"


def follow_job(client: ApiClient, job: str, rank: int | None, tail: int | None = None) -> None:
    """Stream every attempt from the latest one on, until the job has finished; `tail`: of
    the first attempt streamed, only its last lines (of each rank's) and what follows."""
    following: int | None = None  # the first attempt (0-based) not streamed yet
    first = True
    last_wait = ""
    while True:
        detail = client.get(job_path(job))
        state: str = detail["state"]
        current = int(detail["attempt"]) - 1  # the latest attempt's index; -1: none started
        if following is None:
            following = max(current, 0)
        # attempts that have ended: all before `current`, and `current` unless it is live
        done_up_to = current if state == "PENDING" or state in TERMINAL else current - 1
        while following <= done_up_to:
            if not first:
                typer.echo(f"--- job {job}: attempt {following} ---", err=True)
            _stream(client, job, rank=rank, attempt=following, follow=False, tail=tail)
            following, first, last_wait, tail = following + 1, False, "", None
        if state == "RUNNING" and following == current:
            if not first:
                typer.echo(f"--- job {job}: attempt {following} ---", err=True)
            _stream(client, job, rank=rank, attempt=following, follow=True, tail=tail)
            following, first, last_wait, tail = following + 1, False, "", None
            continue
        if state in TERMINAL:
            if current < 0:
                typer.echo(f"job {job} ended {state} before it started: no logs", err=True)
            return
        line = _waiting_line(job, detail)
        if line != last_wait:
            typer.echo(line, err=True)
            last_wait = line
        time.sleep(POLL_S)


def _silence_stdout() -> None:
    """After a closed pipe (`| head`), keep Python from complaining while it exits."""
    with contextlib.suppress(Exception):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def logs_command(
    job: Annotated[str, typer.Argument(metavar="JOB", help="The job id.")],
    follow: Annotated[
        bool,
        typer.Option(
            "--follow", "-f", help="Wait for the job to start, stream its output until it ends."
        ),
    ] = False,
    rank: Annotated[
        int | None, typer.Option("--rank", "-r", min=0, help="Only this rank's output.")
    ] = None,
    attempt: Annotated[
        int | None,
        typer.Option(
            "--attempt",
            min=0,
            help="This attempt (0 is the first run; `describe` says how many ran) "
            "instead of the latest.",
        ),
    ] = None,
    tail: Annotated[
        int | None,
        typer.Option(
            "--tail",
            "-n",
            min=0,
            max=MAX_TAIL,
            metavar="N",
            help="Only the last N lines of each rank's output (with -f: then what follows).",
        ),
    ] = None,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Print a job's output: stdout and stderr of every rank, each line prefixed with its rank."""
    try:
        with connect(url, token) as client:
            if follow and attempt is None:
                follow_job(client, job, rank, tail)
                return
            wrote = _stream(client, job, rank=rank, attempt=attempt, follow=follow, tail=tail)
            if not wrote:
                detail = client.get(job_path(job))
                if detail["state"] in ("PENDING", "STARTING") and int(detail["attempt"]) <= 1:
                    typer.echo(
                        f"job {job} has not started yet ({detail['state']}); "
                        f"`trainyard logs {job} -f` waits for it",
                        err=True,
                    )
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except BrokenPipeError:
        _silence_stdout()
        raise typer.Exit(0) from None
