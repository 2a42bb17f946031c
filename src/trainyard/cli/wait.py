"""`trainyard wait JOB...`: block until jobs end, and exit with their status (for scripts).

Polls each job (`GET /v1/jobs/{id}`) until it is SUCCEEDED, FAILED or CANCELLED, printing
one line per job as it ends (`--quiet`: nothing). The exit status, documented in `--help`:
0 when every job succeeded; the job's own exit code (1-255) when a job failed with one (the
first such job named on the command line); 128 + N when its rank was killed by signal N
(137 for SIGKILL, as a shell says); 1 when a job failed without a code or was cancelled;
124 when `--timeout` passed first (as coreutils' `timeout`); 2 for bad input
(an unknown job) or a server that cannot be reached.
"""

from __future__ import annotations

import math
import time
from typing import Annotated, Any

import typer

from trainyard.cli.joblist import fetch_jobs
from trainyard.cli.jobs import TERMINAL, job_path
from trainyard.cli.remote import JsonOption, TokenOption, UrlOption, connect, fail, print_json
from trainyard.client.http import ApiClient

TIMED_OUT = 124


def register(app: typer.Typer) -> None:
    """Add `wait` to `app`."""
    app.command("wait")(wait_command)


def exit_status(jobs: list[dict[str, Any]]) -> int:
    """The status `wait` exits with for these finished jobs (see the module docstring)."""
    status = 0
    for job in jobs:
        if job["state"] == "SUCCEEDED":
            continue
        code = job.get("exit_code")
        if job["state"] == "FAILED" and isinstance(code, int) and 0 < code < 256:
            return code
        if job["state"] == "FAILED" and isinstance(code, int) and -64 < code < 0:
            return 128 - code  # killed by signal -code, as a shell reports it
        status = status or 1
    return status


def _expand(client: ApiClient, ids: list[str]) -> list[str]:
    """Job ids, with each array id (a-...) replaced by its members in index order."""
    out: list[str] = []
    for job_id in ids:
        if not job_id.startswith("a-"):
            out.append(job_id)
            continue
        page = fetch_jobs(client, {"array": job_id, "limit": 1000, "offset": 0}, every=True)
        members = [j["id"] for j in page["jobs"]]
        if not members:
            fail(f"array {job_id!r}: no such array of yours")
        out += members
    return out


def wait_command(
    jobs: Annotated[
        list[str], typer.Argument(metavar="JOB...", help="Job ids, or array ids (a-...).")
    ],
    timeout: Annotated[
        float | None,
        typer.Option("--timeout", min=0, help="Give up after this many seconds (exit 124)."),
    ] = None,
    interval: Annotated[
        float, typer.Option("--interval", min=0.05, help="Seconds between polls.")
    ] = 1.0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing.")] = False,
    as_json: JsonOption = False,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Wait for jobs to end. Exit status: 0 all succeeded; a failed job's exit code (1-255);
    128+N killed by signal N; 1 failed without a code or cancelled; 124 --timeout passed;
    2 error (unknown job, no server)."""
    for flag, value in (("--timeout", timeout), ("--interval", interval)):
        if value is not None and not math.isfinite(value):  # nan and inf pass typer's min
            fail(f"{flag}: {value} is not a number of seconds")
    deadline = None if timeout is None else time.monotonic() + timeout
    done: dict[str, dict[str, Any]] = {}
    with connect(url, token) as client:
        jobs = _expand(client, jobs)
        while True:
            for job_id in jobs:
                if job_id in done:
                    continue
                job = client.get(job_path(job_id))
                if job["state"] in TERMINAL:
                    done[job_id] = job
                    if not quiet and not as_json:
                        code = job.get("exit_code")
                        tail = f" (exit code {code})" if code is not None else ""
                        typer.echo(f"job {job_id}: {job['state']}{tail}")
            if len(done) == len(set(jobs)):
                break
            if deadline is not None and time.monotonic() >= deadline:
                if not quiet:
                    left = [j for j in jobs if j not in done]
                    typer.echo(f"timed out waiting for {', '.join(left)}", err=True)
                raise typer.Exit(TIMED_OUT)
            pause = interval
            if deadline is not None:
                pause = max(0.0, min(pause, deadline - time.monotonic()))
            time.sleep(pause)
    finished = [done[j] for j in dict.fromkeys(jobs)]
    if as_json:
        print_json([{k: j.get(k) for k in ("id", "state", "exit_code")} for j in finished])
    raise typer.Exit(exit_status(finished))
