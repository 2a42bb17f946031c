"""`trainyard submit`: a job spec file, flags that override its fields, or no file at all.

Three forms, as sbatch and `sky launch` users expect:

    trainyard submit job.yaml                           # the spec as written
    trainyard submit job.yaml --gpus 4 --time 2h        # flags override the spec's fields
    trainyard submit --gpus 2 -- python train.py --lr 3e-4   # no file: the command is the job

Without flags the file's YAML is sent as is (the server reports errors with line and
column); with flags, or without a file, the spec is built here as JSON. Values are checked
here only for their own syntax (`--env K=V`, `--mem 16G`, `--time 1-02:00:00`,
`--after JOB:ok`, `--array 0-9%4`), each error naming its flag; the server checks the rest
and its errors name the spec's field. This module imports no server, planner or simulator
code (issue 19: the command must start in tens of milliseconds).
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

import typer

from trainyard.cli.remote import JsonOption, TokenOption, UrlOption, connect, fail, print_json
from trainyard.client.http import ApiClient, ClientError
from trainyard.fields import MAX_DURATION_S

RESOURCE_FIELDS = ("gpus", "gpu_type", "gpu_memory_gb", "cpus", "memory_gb")
_MEM = re.compile(r"(?i)^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?\s*$")
_MEM_GB = {"": 1.0, "B": 1e-9, "K": 1 / 1024**2, "M": 1 / 1024, "G": 1.0, "T": 1024.0}
_DURATION = re.compile(r"(?i)^\s*(\d+(?:\.\d+)?)\s*(s|m|min|h|d)?\s*$")
_CLOCK = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")
_AFTER = re.compile(r"^([A-Za-z0-9_-]{1,32})(?::(ok|any|afterok|afterany))?$")
_ARRAY_PART = r"\s*\d+(?:\s*-\s*\d+)?(?:\s*:\s*\d+)?\s*"  # 3, 0-9 or 0-99:2 (a step)
_ARRAY = re.compile(rf"^{_ARRAY_PART}(?:,{_ARRAY_PART})*(?:%\s*\d+)?\s*$")
_NAME_BAD = re.compile(r"[^a-z0-9-]+")


def register(app: typer.Typer) -> None:
    """Add `submit` to `app`."""
    app.command("submit")(submit_command)


def memory_gb(text: str) -> float:
    """`--mem`: GB from `16`, `16G`, `512M`, `1.5T` (as sbatch; a bare number is GB)."""
    match = _MEM.match(text)
    if match is None or float(match.group(1)) <= 0:
        fail(f"--mem: {text!r} is not a memory size; give e.g. 16G, 512M or 16 (GB)")
    unit = (match.group(2) or "").upper()[:1]
    return float(match.group(1)) * _MEM_GB[unit]


def duration_s(text: str, flag: str = "--time") -> float:
    """`--time`: seconds from `90m`, `2h`, `1d`, `3600s`, or sbatch's `MM`, `MM:SS`,
    `HH:MM:SS`, `D-HH[:MM[:SS]]` (a bare number is minutes, as sbatch reads it)."""
    match = _DURATION.match(text)
    if match is not None:
        unit = (match.group(2) or "m").lower()
        scale = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}[unit]
        seconds = float(match.group(1)) * scale
    else:
        clock = _CLOCK.match(text.strip())
        if clock is None:
            fail(f"{flag}: {text!r} is not a duration; give e.g. 90m, 2h, 1-12:00:00 or 30:00")
        days, a, b, c = (int(g) if g else None for g in clock.groups())
        if days is not None:  # D-HH[:MM[:SS]]
            seconds = days * 86400 + (a or 0) * 3600 + (b or 0) * 60 + (c or 0)
        elif c is not None:  # HH:MM:SS
            seconds = (a or 0) * 3600 + (b or 0) * 60 + c
        else:  # MM:SS
            seconds = (a or 0) * 60 + (b or 0)
    if seconds <= 0:
        fail(f"{flag}: {text!r} must be longer than zero")
    if seconds > MAX_DURATION_S:
        fail(f"{flag}: {text!r} is longer than ten years; give at most {MAX_DURATION_S // 86400}d")
    return seconds


def env_pairs(items: list[str]) -> dict[str, str]:
    """`--env K=V` (repeatable) as a mapping."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            fail(f"--env: {item!r} is not NAME=VALUE; give e.g. --env OMP_NUM_THREADS=4")
        out[key.strip()] = value
    return out


def dependencies(items: list[str]) -> list[dict[str, str]]:
    """`--after JOB[:ok|:any]` (repeatable; commas allowed) as the spec's `after` list."""
    out = []
    for item in items:
        for part in item.split(","):
            match = _AFTER.match(part.strip())
            if match is None:
                fail(f"--after: {part!r} is not JOB, JOB:ok or JOB:any (e.g. --after j-ab12:ok)")
            condition = (match.group(2) or "ok").removeprefix("after")
            out.append({"job": match.group(1), "condition": condition})
    return out


def _set(doc: dict[str, Any], key: str, value: Any) -> None:
    """Override field `key`, where the spec gives it (top level or `resources:`)."""
    section = doc.get("resources")
    if key in RESOURCE_FIELDS and isinstance(section, dict) and key in section:
        section[key] = value
    else:
        doc[key] = value


def _default_name(command: list[str]) -> str:
    """A job name from a command: its script's name (`train.py` -> `train`), else the
    program's; lowercase letters, digits and '-' as job names must be."""
    script = next((a for a in command[1:] if a.endswith((".py", ".sh"))), command[0])
    stem = Path(script).name.rsplit(".", 1)[0].lower()
    name = _NAME_BAD.sub("-", stem).strip("-")
    name = re.sub(r"^[^a-z]+", "", name)[:63].rstrip("-")
    return name or "job"


def _read_spec(path: Path) -> tuple[bytes, dict[str, Any] | None]:
    """The file's bytes, and its parsed mapping (None when it does not parse as one: then it
    is sent as is, so the server reports the error with its line and column)."""
    if not path.exists():
        fail(f"{path}: no such file")
    if not path.is_file():
        fail(f"{path}: not a file")
    try:
        text = path.read_bytes()
    except OSError as exc:
        fail(f"{path}: cannot be read ({exc.strerror or exc})")
    from trainyard import yamlio  # PyYAML only: no jobspec, planner or server code

    try:
        doc = yamlio.load_yaml(text.decode("utf-8"))
    except (yamlio.YamlError, UnicodeDecodeError, RecursionError):
        return text, None
    return text, doc if isinstance(doc, dict) else None


def _model_file(spec: Path, name: str) -> object:
    """The fields of a ``model:`` YAML file, found relative to the job spec's folder."""
    from trainyard import yamlio

    found = Path(name) if Path(name).is_absolute() else spec.parent / name
    try:
        return yamlio.load_yaml(found.read_text())
    except OSError as exc:
        fail(f"{spec}: model: {found} cannot be read ({exc.strerror or exc})")
    except yamlio.YamlError as exc:
        fail(f"{spec}: model: {found}: malformed YAML at {exc}")


def _on_this_machine(url: str) -> bool:
    """Whether the server's URL is a loopback address (its jobs share our file system)."""
    host = (urlsplit(url).hostname or "").lower()
    return host in ("localhost", "::1") or host.startswith("127.")


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


def _opt(help_text: str, *names: str, **kw: Any) -> Any:
    return typer.Option(*names, help=help_text, show_default=False, **kw)


def submit_command(
    args: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[FILE.yaml] [-- COMMAND...]",
            help="A job spec file, and/or the command to run after `--` (no file: the "
            "command alone is the job).",
            show_default=False,
        ),
    ] = None,
    queue: Annotated[str | None, _opt("Queue.", "--queue", "-q")] = None,
    name: Annotated[str | None, _opt("Job name.", "--name", "-n", "-J")] = None,
    workdir: Annotated[
        str | None,
        _opt(
            "Run the job in this directory when its spec sets no working_dir. Default: the "
            "current directory if the server runs on this machine, else the server's.",
            "--workdir",
            "-C",
        ),
    ] = None,
    resume_from: Annotated[
        str | None,
        _opt(
            "Start from the checkpoints of an ended job of yours, as a copy (resume_from): "
            "cancel, change a flag, resubmit, go on from its last checkpoint.",
            "--resume-from",
        ),
    ] = None,
    gpus: Annotated[int | None, _opt("GPUs in all (gpus).", "--gpus", "-G", min=0)] = None,
    gpu_type: Annotated[str | None, _opt("GPU type, e.g. H100 (gpu_type).", "--gpu-type")] = None,
    nodes: Annotated[int | None, _opt("Distinct nodes (nodes).", "--nodes", "-N", min=1)] = None,
    workers: Annotated[
        int | None, _opt("Ranks per node (workers).", "--workers", "--ntasks-per-node", min=1)
    ] = None,
    cpus: Annotated[float | None, _opt("CPUs per node (cpus).", "--cpus", "-c")] = None,
    mem: Annotated[str | None, _opt("Memory per node: 16G, 512M (memory_gb).", "--mem")] = None,
    env: Annotated[
        list[str] | None, _opt("NAME=VALUE for the job's environment (repeat).", "--env", "-e")
    ] = None,
    priority: Annotated[int | None, _opt("Priority (priority).", "--priority")] = None,
    max_restarts: Annotated[
        int | None, _opt("Restarts after failures (max_restarts).", "--max-restarts", min=0)
    ] = None,
    time_limit: Annotated[
        str | None,
        _opt(
            "Time limit, as sbatch -t: 90m, 2h, 1-00:00:00; an attempt that runs longer is "
            "stopped and the job fails (time_limit_s); also its run-time estimate "
            "(expected_duration_s).",
            "--time",
            "-t",
        ),
    ] = None,
    min_gpus: Annotated[
        int | None, _opt("Elastic: fewest GPUs (elastic.min_gpus).", "--min-gpus", min=1)
    ] = None,
    max_gpus: Annotated[
        int | None, _opt("Elastic: most GPUs (elastic.max_gpus).", "--max-gpus", min=1)
    ] = None,
    after: Annotated[
        list[str] | None,
        _opt("Start after JOB succeeds (JOB:ok) or ends (JOB:any); repeat.", "--after", "-d"),
    ] = None,
    array: Annotated[
        str | None,
        _opt("A job array: 0-9, 1,3,5, 0-99:2 or 0-99%8 (at most 8 at once).", "--array", "-a"),
    ] = None,
    wait: Annotated[bool, _opt("Wait for the job(s) to end; exit as `wait`.", "--wait")] = False,
    as_json: JsonOption = False,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Submit a job: a spec file, flags overriding it, or `-- COMMAND` alone; prints its id."""
    positional = list(args or [])
    spec_file: Path | None = None
    if positional and (
        positional[0].lower().endswith((".yaml", ".yml", ".json")) or Path(positional[0]).is_dir()
    ):  # a spec file (a directory gets "not a file"); anything else starts the command
        spec_file = Path(positional.pop(0))
    command = positional
    if spec_file is None and not command:
        fail("give a job spec file (trainyard submit job.yaml) or a command after -- "
             "(trainyard submit --gpus 1 -- python train.py)")  # fmt: skip
    overrides: dict[str, Any] = {}
    for key, value in (
        ("queue", queue), ("name", name), ("gpus", gpus), ("gpu_type", gpu_type),
        ("nodes", nodes), ("workers", workers), ("cpus", cpus), ("priority", priority),
        ("max_restarts", max_restarts), ("resume_from", resume_from),
    ):  # fmt: skip
        if value is not None:
            overrides[key] = value
    if mem is not None:
        overrides["memory_gb"] = memory_gb(mem)
    if time_limit is not None:
        overrides["expected_duration_s"] = overrides["time_limit_s"] = duration_s(time_limit)
    if after:
        overrides["after"] = dependencies(after)
    if array is not None:
        if not _ARRAY.match(array):
            fail(f"--array: {array!r} is not a range list; give e.g. 0-9, 1,3,5, 0-99:2 or 0-99%8")
        overrides["array"] = array.replace(" ", "")
    env_items = env_pairs(env or [])
    with connect(url, token) as client:
        if workdir is None and _on_this_machine(client.url):
            workdir = str(Path.cwd())  # as sbatch does: a job runs where it was submitted
        elif workdir is not None:
            workdir = str(Path(workdir).expanduser().resolve())
        label = str(spec_file) if spec_file is not None else "submit"
        body, content_type = _body(
            spec_file, command, overrides, env_items, (min_gpus, max_gpus), workdir
        )
        # a retried submit with the same key gets the job the first attempt created
        headers = {"Content-Type": content_type, "Idempotency-Key": os.urandom(16).hex()}
        try:
            out = _submit_with_retries(client, body, headers)
        except ClientError as error:
            if error.status in (400, 413, 422):
                fail(f"{label}: {error.message.removeprefix('request body: ')}")
            raise
    ids: list[str] = list(out.get("array_ids") or [out["id"]])
    if as_json:
        print_json(out)
    else:
        typer.echo(out["id"])
        count = f"{len(ids)} job{'s' if len(ids) != 1 else ''}"
        what = f"array {out['id']} of {count}" if out.get("array_ids") else "job"
        first = out["id"] if not out.get("array_ids") else ids[0]
        shown = label if spec_file is not None else "the command"
        typer.echo(
            f"submitted {shown} as {what if out.get('array_ids') else 'job ' + out['id']} "
            f"({out['state']}); see `trainyard describe {first}`, `trainyard logs {first} -f`",
            err=True,
        )
    if wait:
        from trainyard.cli.wait import wait_command

        wait_command(ids, timeout=None, interval=1.0, quiet=as_json, as_json=False,
                     url=url, token=token)  # fmt: skip


def _body(
    spec_file: Path | None,
    command: list[str],
    overrides: dict[str, Any],
    env: dict[str, str],
    elastic: tuple[int | None, int | None],
    workdir: str | None,
) -> tuple[bytes, str]:
    """The request body and its content type: the file's YAML as is when nothing overrides
    it, else the spec as JSON (see the module docstring)."""
    doc: dict[str, Any] | None = None
    if spec_file is not None:
        text, doc = _read_spec(spec_file)
        plain = not (overrides or command or env or any(v is not None for v in elastic))
        if doc is None or (plain and b"model" not in text and (
            workdir is None or "working_dir" in doc
        )):  # fmt: skip
            return text, "application/yaml"
        model = doc.get("model")
        if isinstance(model, str) and model.lower().endswith((".yaml", ".yml")):
            doc["model"] = _model_file(spec_file, model)  # the server reads no files
    else:
        doc = {"name": _default_name(command)}
    if command:
        doc["command"] = command
    for key, value in overrides.items():
        _set(doc, key, value)
    if env:
        base = doc.get("env")
        doc["env"] = {**(base if isinstance(base, dict) else {}), **env}
    low, high = elastic
    if low is not None or high is not None:
        section = doc.get("elastic")
        section = dict(section) if isinstance(section, dict) else {}
        if low is not None:
            section["min_gpus"] = low
        if high is not None:
            section["max_gpus"] = high
        doc["elastic"] = section
    if workdir is not None:
        doc.setdefault("working_dir", workdir)
    return json.dumps(doc, default=str).encode(), "application/json"
