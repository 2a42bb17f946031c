"""`trainyard probe links`: measure the links of the GPUs the platform allocates, as a job.

Submits `python -m trainyard.probe.links` as a job of N workers (one per GPU) to the server,
waits for it, reads the result line its rank 0 printed from the job's log and stores it as a
file (default ``links.json``) that `trainyard plan --links FILE` reads. Thin shell over the
client; the measurement itself is `trainyard.probe.links`. Errors print one `error:` line
and exit 2.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from trainyard.cli.jobs import TERMINAL, job_path
from trainyard.cli.remote import TokenOption, UrlOption, connect, fail

MARKER = "TRAINYARD_LINKS_JSON"  # trainyard.probe.links.MARKER (not imported: it needs no torch)
probe_app = typer.Typer(help="Measure the machines the platform allocates (jobs).")


def register(app: typer.Typer) -> None:
    """Add `probe` and its subcommands to `app`."""
    app.add_typer(probe_app, name="probe")


def spec(workers: int, gpus: int, max_bytes: int, queue: str | None) -> dict[str, Any]:
    """The probe job's spec: one process per GPU (per worker on CPUs)."""
    command = ["python", "-m", "trainyard.probe.links"]
    if max_bytes:
        command += ["--max-bytes", str(max_bytes)]
    doc: dict[str, Any] = {
        "name": "probe-links",
        "command": command,
        "workers": workers,
        "gpus": gpus,
        "cpus": 1,
        "memory_gb": 2,
        "max_restarts": 0,
    }
    if queue:
        doc["queue"] = queue
    return doc


def result_from_log(text: str) -> dict[str, Any] | None:
    """The probe's result from its rank-0 log, or None when it is not there."""
    for line in reversed(text.splitlines()):
        start = line.find(MARKER)
        if start >= 0:
            try:
                found: Any = json.loads(line[start + len(MARKER) :].strip())
            except json.JSONDecodeError:
                return None
            return found if isinstance(found, dict) else None
    return None


@probe_app.command("links")
def links_command(
    workers: Annotated[
        int, typer.Option("--workers", "-w", min=2, help="Ranks (one per GPU).")
    ] = 2,
    gpus: Annotated[
        int | None, typer.Option("--gpus", min=0, help="GPUs to ask for (default: workers).")
    ] = None,
    max_bytes: Annotated[
        int, typer.Option("--max-bytes", min=0, help="Largest message (0: the probe's default).")
    ] = 0,
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Where to store the result for the planner.")
    ] = Path("links.json"),
    queue: Annotated[str | None, typer.Option("--queue", help="Queue of the job.")] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", min=1, help="Give up waiting after this many seconds.")
    ] = 1800.0,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Run a job that times all-reduce and all-gather on the GPUs it is given and store the
    result for `trainyard plan --links`."""
    if not math.isfinite(timeout):  # nan and inf pass typer's min: a wait without end
        fail(f"--timeout: {timeout} is not a number of seconds")
    if out.is_dir() or not out.parent.is_dir():  # said before the job runs, not after
        fail(f"--out: {out} must be a file in a folder that exists")
    body = spec(workers, workers if gpus is None else gpus, max_bytes, queue)
    with connect(url, token) as client:
        job = client.post("/v1/jobs", body)
        job_id = str(job["id"])
        typer.echo(f"probe job {job_id} submitted ({workers} ranks)", err=True)
        deadline = time.monotonic() + timeout
        while True:
            detail = client.get(job_path(job_id))
            if detail["state"] in TERMINAL:
                break
            if time.monotonic() > deadline:
                fail(f"probe job {job_id} still {detail['state']} after {timeout:g} s")
            time.sleep(1.0)
        if detail["state"] != "SUCCEEDED":
            fail(f"probe job {job_id} ended {detail['state']}; see `trainyard logs {job_id}`")
        chunks: list[str] = []
        with client.stream_text(job_path(job_id, "/logs"), rank=0) as stream:
            chunks.extend(stream)
    result = result_from_log("".join(chunks))
    if result is None:
        fail(f"probe job {job_id} printed no result line; see `trainyard logs {job_id}`")
    result["job"] = job_id
    try:
        out.write_text(json.dumps(result, indent=1) + "\n")
    except OSError as exc:
        fail(f"--out: cannot write {out}: {exc.strerror or exc}")
    typer.echo(f"links measured by job {job_id} stored in {out}; use: trainyard plan --links {out}")
    sys.stdout.flush()
