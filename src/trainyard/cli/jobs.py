"""`trainyard submit`, `jobs`, `describe` and `cancel`: jobs through the server's REST API.

`submit` sends a job spec file as YAML (as JSON when `--queue`/`--name` override fields), the
server validates it and reports errors by field. `jobs` lists the tenant's jobs, `describe`
shows one job with its placement (virtual devices said so), why it waits and every event.
Every failure prints one `error: ...` line and exits with code 2 (see `cli.remote`).
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlsplit

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from trainyard.cli.remote import (
    JsonOption,
    TokenOption,
    UrlOption,
    age,
    clock,
    connect,
    console,
    fail,
    print_json,
    relative,
)
from trainyard.client.http import ApiClient, ClientError

STATE_STYLE = {
    "PENDING": "yellow",
    "STARTING": "cyan",
    "RUNNING": "green",
    "RESIZING": "cyan",
    "PREEMPTED": "magenta",
    "SUCCEEDED": "bold green",
    "FAILED": "bold red",
    "CANCELLED": "dim",
}
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})


def register(app: typer.Typer) -> None:
    """Add `submit`, `jobs`, `describe` and `cancel` to `app`."""
    app.command("submit")(submit_command)
    app.command("jobs")(jobs_command)
    app.command("describe")(describe_command)
    app.command("cancel")(cancel_command)


def job_path(job_id: str, suffix: str = "") -> str:
    return f"/v1/jobs/{quote(job_id, safe='')}{suffix}"


def styled(state: str) -> str:
    style = STATE_STYLE.get(state)
    return f"[{style}]{escape(state)}[/{style}]" if style else escape(state)


def _body(
    path: Path, queue: str | None, name: str | None, workdir: str | None = None
) -> tuple[bytes, str]:
    """The request body and its content type: the file's YAML text as is, or, to override
    fields, the parsed spec as JSON (a file that does not parse is sent as is, so the server
    reports the error with its line and column). `workdir` becomes the spec's `working_dir`
    unless it sets one."""
    try:
        text = path.read_bytes()
    except OSError as exc:
        fail(f"{path}: cannot be read ({exc.strerror or exc})")
    if queue is None and name is None and workdir is None and b"model" not in text:
        return text, "application/yaml"
    from trainyard.jobspec.errors import JobSpecError  # the server's YAML reading (lazy: slow)
    from trainyard.jobspec.fields import load_yaml

    try:
        doc = load_yaml(text.decode("utf-8"), str(path))
    except (JobSpecError, UnicodeDecodeError):
        return text, "application/yaml"
    if not isinstance(doc, dict):
        return text, "application/yaml"
    model = doc.get("model")
    if isinstance(model, str) and model.lower().endswith((".yaml", ".yml")):
        doc["model"] = _model_file(path, model)  # the server reads no files: send the fields
    elif queue is None and name is None and (workdir is None or "working_dir" in doc):
        return text, "application/yaml"
    if workdir is not None:
        doc.setdefault("working_dir", workdir)
    if queue is not None:
        doc["queue"] = queue
    if name is not None:
        doc["name"] = name
    return json.dumps(doc, default=str).encode(), "application/json"


def _model_file(spec: Path, name: str) -> object:
    """The fields of a ``model:`` YAML file, found relative to the job spec's folder."""
    from trainyard.jobspec.errors import JobSpecError
    from trainyard.jobspec.fields import load_yaml

    found = Path(name) if Path(name).is_absolute() else spec.parent / name
    try:
        return load_yaml(found.read_text(), str(found))
    except OSError as exc:
        fail(f"{spec}: model: {found} cannot be read ({exc.strerror or exc})")
    except JobSpecError as exc:
        fail(f"{spec}: model: {exc}")


def submit_command(
    file: Annotated[Path, typer.Argument(metavar="FILE.yaml", help="The job spec.")],
    queue: Annotated[
        str | None, typer.Option("--queue", "-q", help="Submit to this queue instead.")
    ] = None,
    name: Annotated[str | None, typer.Option("--name", "-n", help="Name the job so.")] = None,
    workdir: Annotated[
        str | None,
        typer.Option(
            "--workdir",
            "-C",
            help="Run the job in this directory when its spec sets no working_dir. Default: "
            "the current directory if the server runs on this machine, else the server's.",
        ),
    ] = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Submit a job spec (YAML); prints the new job's id."""
    if not file.exists():
        fail(f"{file}: no such file")
    if not file.is_file():
        fail(f"{file}: not a file")
    with connect(url, token) as client:
        if workdir is None and _on_this_machine(client.url):
            workdir = str(Path.cwd())  # as sbatch does: a job runs where it was submitted
        elif workdir is not None:
            workdir = str(Path(workdir).expanduser().resolve())
        body, content_type = _body(file, queue, name, workdir)
        # a retried submit with the same key gets the job the first attempt created
        headers = {"Content-Type": content_type, "Idempotency-Key": uuid.uuid4().hex}
        try:
            out = _submit_with_retries(client, body, headers)
        except ClientError as error:
            if error.status in (400, 413, 422):
                message = error.message.removeprefix("request body: ")
                fail(f"{file}: {message}")
            raise
    if as_json:
        print_json(out)
        return
    typer.echo(out["id"])
    typer.echo(
        f"submitted {file} as job {out['id']} ({out['state']}); "
        f"see `trainyard describe {out['id']}`, `trainyard logs {out['id']} -f`",
        err=True,
    )


SUBMIT_RETRIES = (0.5, 1.0, 2.0)  # seconds before each retry of a submit that got no answer


def _submit_with_retries(client: ApiClient, body: bytes, headers: dict[str, str]) -> Any:
    """POST the spec; when the answer is lost (no status: a timeout, a dropped connection),
    send it again with the same `Idempotency-Key`, which cannot create a second job."""
    for pause in (*SUBMIT_RETRIES, None):
        try:
            return client.request("POST", "/v1/jobs", content=body, headers=headers)
        except ClientError as error:
            if not error.lost or pause is None:
                raise
            time.sleep(pause)
    raise AssertionError("unreachable")


def _on_this_machine(url: str) -> bool:
    """Whether the server's URL is a loopback address (its jobs share our file system)."""
    host = (urlsplit(url).hostname or "").lower()
    return host in ("localhost", "::1") or host.startswith("127.")


def jobs_command(
    state: Annotated[
        str | None,
        typer.Option("--state", "-s", help="Only jobs in this state (PENDING, RUNNING, ...)."),
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", min=1, max=1000, help="At most this many jobs.")
    ] = 100,
    offset: Annotated[int, typer.Option("--offset", min=0, help="Skip the newest N.")] = 0,
    as_json: JsonOption = False,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """List your tenant's jobs, newest first (a page; says when more exist)."""
    with connect(url, token) as client:
        out = client.get(
            "/v1/jobs", state=state.upper() if state else None, limit=limit, offset=offset
        )
    if as_json:
        print_json(out)
        return
    jobs: list[dict[str, Any]] = out["jobs"]
    if not jobs:
        typer.echo(f"no jobs{f' in state {state.upper()}' if state else ''}")
        return
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("ID", no_wrap=True)
    table.add_column("NAME", no_wrap=True)
    table.add_column("QUEUE")
    table.add_column("STATE", no_wrap=True)
    table.add_column("GPUS", justify="right")
    table.add_column("USER")
    table.add_column("AGE", justify="right", no_wrap=True)
    for job in jobs:
        table.add_row(
            escape(job["id"]),
            escape(job["name"]),
            escape(job["queue"]),
            styled(job["state"]),
            str(job["gpus"]),
            escape(job["user"] or "-"),
            age(job["submitted_at"]),
        )
    console().print(table)
    if out.get("more"):
        typer.echo(
            f"{len(jobs)} shown; more jobs exist: --offset {offset + len(jobs)} for the next "
            "page, or a larger --limit",
            err=True,
        )


def _virtual_devices(client: ApiClient) -> dict[str, set[int]] | None:
    """Node name -> indexes of its virtual devices (None when the nodes cannot be read)."""
    try:
        nodes = client.get("/v1/nodes")["nodes"]
    except (ClientError, KeyError, TypeError):
        return None
    return {n["name"]: {d["index"] for d in n["devices"] if d.get("virtual")} for n in nodes}


def placement_text(placement: list[Any] | None, virtual: dict[str, set[int]] | None) -> str:
    """`node: devices 0,1` per node, saying when devices are virtual (declared, not real)."""
    if not placement:
        return "-"
    parts = []
    for entry in placement:
        node = str(entry.get("node", "?")) if isinstance(entry, dict) else str(entry)
        devices = list(entry.get("devices", [])) if isinstance(entry, dict) else []
        text = f"{node}: " + (
            f"device{'s' if len(devices) > 1 else ''} {','.join(str(d) for d in devices)}"
            if devices
            else "no GPU (CPU only)"
        )
        if devices and virtual is not None and node in virtual:
            if all(d in virtual[node] for d in devices):
                text += " (VIRTUAL: declared, not real)"
            elif any(d in virtual[node] for d in devices):
                text += " (some VIRTUAL: declared, not real)"
        parts.append(text)
    return "; ".join(parts)


def _detail_value(key: str, value: Any) -> str:
    if key == "placement" and isinstance(value, list):
        return placement_text(value, None)
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), default=str)


def details_text(details: dict[str, Any]) -> str:
    """An event's details, notable ones first (`pids` left out: see --json)."""
    first = ("exit_code", "rank", "attempt", "run_state", "message")
    keys = [k for k in first if k in details] + [
        k for k in details if k not in first and k != "pids"
    ]
    out = []
    for key in keys:
        value = details[key]
        if (value is None or value == [] or value == "") and key not in ("exit_code", "rank"):
            continue
        out.append(f"{key}={_detail_value(key, value)}")
    return " ".join(out)


def _gpus_text(job: dict[str, Any]) -> str:
    """`2`, or for an elastic job `2 (elastic 1-8)`."""
    low, high = job.get("min_gpus"), job.get("max_gpus")
    if low is None or high is None:
        return str(job["gpus"])
    return f"{job['gpus']} (elastic {low}-{high})"


def render_job(job: dict[str, Any], virtual: dict[str, set[int]] | None, out: Console) -> None:
    """The human form of a `JobDetail` answer."""
    state = job["state"]
    out.print(f"[bold]job {escape(job['id'])}[/bold] {escape(job['name'])}: {styled(state)}")
    rows: list[tuple[str, str]] = [
        ("queue", job["queue"]),
        ("user", f"{job['user'] or '-'} (tenant {job['tenant']})"),
        ("gpus", _gpus_text(job)),
        ("submitted", relative(job["submitted_at"])),
    ]
    if job.get("started_at") is not None:
        rows.append(("started", relative(job["started_at"])))
    if job.get("finished_at") is not None:
        rows.append(("finished", relative(job["finished_at"])))
    rows.append(("placement", placement_text(job.get("placement"), virtual)))
    if state == "PENDING":
        rows.append(("pending", job.get("pending_reason") or "(no reason recorded yet)"))
        if job.get("estimated_start") is not None:
            rows.append(("estimated start", relative(job["estimated_start"])))
        if job.get("next_retry_at") is not None:
            rows.append(("next retry", relative(job["next_retry_at"])))
    rows.append(
        (
            "attempts",
            f"{job['attempt']} started; restarts {job['restart_count']} of at most "
            f"{job['max_restarts']}",
        )
    )
    if job.get("exit_code") is not None or job.get("exit_message"):
        code = job.get("exit_code")
        rows.append(
            (
                "exit",
                f"code {code if code is not None else '-'}"
                + (f": {job['exit_message']}" if job.get("exit_message") else ""),
            )
        )
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        out.print(f"  {key + ':':<{width + 1}} {escape(str(value))}", soft_wrap=True)
    events: list[dict[str, Any]] = job.get("events") or []
    out.print(f"[bold]events[/bold] ({len(events)}):")
    moves = [f"{e.get('from_state') or '(new)'} -> {e['to_state']}" for e in events]
    move_width = max((len(m) for m in moves), default=0)
    for event, move in zip(events, moves, strict=True):
        line = f"  {clock(event['time'])}  {move:<{move_width}}  {event.get('reason') or ''}"
        details = details_text(event.get("details") or {})
        out.print(escape(f"{line}  ({details})" if details else line), soft_wrap=True)


def describe_command(
    job: Annotated[str, typer.Argument(metavar="JOB", help="The job id.")],
    as_json: JsonOption = False,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Show a job: state, placement, why it waits, exit status and every event."""
    with connect(url, token) as client:
        out = client.get(job_path(job))
        virtual = _virtual_devices(client) if out.get("placement") and not as_json else None
    if as_json:
        print_json(out)
        return
    render_job(out, virtual, console())


def cancel_command(
    job: Annotated[str, typer.Argument(metavar="JOB", help="The job id.")],
    as_json: JsonOption = False,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Cancel a job (its processes are stopped)."""
    with connect(url, token) as client:
        out = client.post(job_path(job, "/cancel"))
    if as_json:
        print_json(out)
        return
    typer.echo(f"job {out['id']}: {out['state']}")
