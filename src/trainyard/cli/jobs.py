"""`trainyard submit`, `jobs`, `describe` and `cancel`: jobs through the server's REST API.

`submit` sends a job spec file as YAML (as JSON when `--queue`/`--name` override fields), the
server validates it and reports errors by field. `jobs` lists the tenant's jobs, `describe`
shows one job with its placement (virtual devices said so), why it waits and every event.
Every failure prints one `error: ...` line and exits with code 2 (see `cli.remote`).
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Annotated, Any
from urllib.parse import quote

import typer

from trainyard.cli import plain
from trainyard.cli.remote import (
    JsonOption,
    TokenOption,
    UrlOption,
    clock,
    connect,
    fail,
    print_json,
    relative,
    span,
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
    app.command("describe")(describe_command)
    app.command("cancel")(cancel_command)


# what a job or array id can be (`j-` or `a-` and 20 hex digits); checked here so a mistyped
# one gets an answer about the id, not about the URL it would make
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def checked_id(job_id: str) -> str:
    """`job_id`, quoted for a URL path, or exit 2 saying it cannot be a job or array id."""
    if not _ID.fullmatch(job_id):
        fail(f"{job_id!r} is not a job id: ids look like j-3f2a9c... (`trainyard jobs` lists them)")
    return quote(job_id, safe="")


def job_path(job_id: str, suffix: str = "") -> str:
    return f"/v1/jobs/{checked_id(job_id)}{suffix}"


def styled(state: str, colour: bool) -> str:
    return plain.paint(state, STATE_STYLE.get(state), colour)


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


def _first_run(job: dict[str, Any]) -> float | None:
    """When the job first started running (its first move to RUNNING among its events);
    `started_at` is its current run's start, which a restart or a resize moves."""
    for event in job.get("events") or []:
        if event.get("to_state") == "RUNNING" and isinstance(event.get("time"), int | float):
            return float(event["time"])
    return None


def render_job(job: dict[str, Any], virtual: dict[str, set[int]] | None, colour: bool) -> str:
    """The human form of a `JobDetail` answer."""
    state = job["state"]
    title = plain.paint(f"job {job['id']}", "bold", colour)
    lines = [f"{title} {job['name']}: {styled(state, colour)}"]
    rows: list[tuple[str, str]] = [
        ("queue", job["queue"]),
        ("user", f"{job['user'] or '-'} (tenant {job['tenant']})"),
        ("gpus", _gpus_text(job)),
        *_asked_rows(job.get("spec") or {}),
        ("submitted", relative(job["submitted_at"])),
    ]
    if job.get("started_at") is not None:
        first = _first_run(job)
        if first is not None and first < job["started_at"]:
            rows.append(("started", relative(first)))
            rows.append(("this run", f"since {relative(job['started_at'])}"))
        else:
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
    if state == "RUNNING" and job.get("not_grown"):  # an elastic job the scheduler held back
        until = job.get("not_grown_until")
        lifts = f"; until {relative(until)}" if until else ""
        rows.append(("not grown", job["not_grown"] + lifts))
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
                (f"code {code}" if code is not None else "no exit code")
                + (f": {job['exit_message']}" if job.get("exit_message") else ""),
            )
        )
    rows += _extra_rows(job)
    width = max(len(k) for k, _ in rows)
    lines += [f"  {key + ':':<{width + 1}} {value}" for key, value in rows]
    events: list[dict[str, Any]] = job.get("events") or []
    lines.append(f"{plain.paint('events', 'bold', colour)} ({len(events)}):")
    moves = [f"{e.get('from_state') or '(new)'} -> {e['to_state']}" for e in events]
    move_width = max((len(m) for m in moves), default=0)
    for event, move in zip(events, moves, strict=True):
        line = f"  {clock(event['time'])}  {move:<{move_width}}  {event.get('reason') or ''}"
        details = details_text(event.get("details") or {})
        lines.append(f"{line}  ({details})" if details else line)
    return "\n".join(lines)


def _asked_rows(spec: dict[str, Any]) -> list[tuple[str, str]]:
    """What the job asked for beyond its GPUs, as `scontrol show job` shows it: command,
    CPUs and memory, time limit, priority (an outside review found them only in --json)."""
    rows: list[tuple[str, str]] = []
    if spec.get("command"):
        rows.append(("command", shlex.join(str(c) for c in spec["command"])))
    held = [f"{spec[k]:g} {unit}" for k, unit in (("cpus", "CPUs"), ("memory_gb", "GB"))
            if isinstance(spec.get(k), int | float)]  # fmt: skip
    rows.append(("reserved", ", ".join(held) if held else "no CPU or memory reserved"))
    if isinstance(spec.get("time_limit_s"), int | float):
        rows.append(("time limit", span(float(spec["time_limit_s"]))))
    if spec.get("priority"):
        rows.append(("priority", str(spec["priority"])))
    return rows


def _extra_rows(job: dict[str, Any]) -> list[tuple[str, str]]:
    """Rows for what only some jobs have: an array index, dependencies."""
    rows: list[tuple[str, str]] = []
    if job.get("array_id"):
        rows.append(("array", f"{job['array_id']} index {job.get('array_index')}"))
    after = job.get("after") or []
    if after:
        rows.append(("after", ", ".join(f"{d['job']}:{d['condition']}" for d in after)))
    return rows + _progress_rows(job.get("progress"))


def _progress_rows(progress: dict[str, Any] | None) -> list[tuple[str, str]]:
    """What a job's reports said (trainyard.sdk's `Reporter`): its latest report, then its
    measured step time at each size it ran (what the scheduler's goodput model is fitted on).
    `step` is the reporter's total: the current attempt's steps, from the checkpoint's step
    when the job says it resumed (`Reporter.resume`)."""
    if not progress:
        return []
    rows: list[tuple[str, str]] = []
    if progress.get("step") is not None:
        parts = [f"step {progress['step']:,} (attempt {progress.get('attempt')})",
                 f"{progress.get('samples') or 0:,} samples"]  # fmt: skip
        if progress.get("loss") is not None:
            parts.append(f"loss {progress['loss']:.4g}")
        if progress.get("remaining_samples") is not None:
            parts.append(f"{progress['remaining_samples']:,} samples left")
        when = progress.get("reported_at")
        rows.append(("progress", ", ".join(parts) + (f" ({relative(when)})" if when else "")))
    for o in progress.get("observed") or []:
        rate = o.get("samples_per_s")
        rows.append(
            (
                "step time",
                f"{o['step_time']:.3g} s on {o['gpus']} GPU{'s' if o['gpus'] != 1 else ''} "
                f"({o['nodes']} node{'s' if o['nodes'] != 1 else ''}), batch "
                f"{o['batch']}" + (f", {rate:,.1f} samples/s" if rate else ""),
            )
        )
    return rows


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
    typer.echo(render_job(out, virtual, plain.colour_on()))


def cancel_command(
    jobs: Annotated[
        list[str], typer.Argument(metavar="JOB...", help="Job ids, or array ids (a-...).")
    ],
    as_json: JsonOption = False,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Cancel jobs (their processes are stopped); an array id cancels every member that has
    not ended. Every id is tried: one that cannot be cancelled (unknown, already ended) is
    reported on stderr and the command exits 2 once it has tried the rest, as scancel does."""
    paths = [
        f"/v1/arrays/{checked_id(job)}/cancel" if job.startswith("a-") else job_path(job, "/cancel")
        for job in jobs
    ]  # every id checked before anything is cancelled
    answers: list[dict[str, Any]] = []
    failed = 0
    with connect(url, token) as client:
        for job, path in zip(jobs, paths, strict=True):
            try:
                out = client.post(path)
            except ClientError as error:  # the server's message names the job
                failed += 1
                typer.echo(f"error: {error.message}", err=True)
                answers.append({"id": job, "error": error.message})
                continue
            answers.append(out)
            if as_json:
                continue
            if job.startswith("a-"):
                typer.echo(
                    f"array {out['id']}: {len(out['cancelled'])} jobs cancelled, "
                    f"{len(out['ended'])} had ended"
                )
            else:
                typer.echo(f"job {out['id']}: {out['state']}")
    if as_json:
        print_json(answers[0] if len(answers) == 1 else answers)
    if failed:
        raise typer.Exit(2)
