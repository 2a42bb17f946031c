"""`parse_job_spec`: YAML text or a mapping -> a checked `JobSpec`, or a `JobSpecError`
naming the field (the format is documented in the `trainyard.jobspec` package docstring);
`spec_from_dict` / `spec_from_json` read back what `JobSpec.to_dict` / `to_json` stored."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shlex
from collections.abc import Collection, Mapping
from typing import Any, Final

from trainyard.errors import suggest
from trainyard.fields import MAX_DURATION_S
from trainyard.jobspec.depends import parse_after, parse_array
from trainyard.jobspec.elastic import check_elastic, parse_elastic
from trainyard.jobspec.errors import JobSpecError, unknown_field
from trainyard.jobspec.fields import (
    boolean,
    describe,
    integer,
    load_yaml,
    mapping,
    number,
    scalar_string,
    string_map,
    text,
    unicode_text,
)
from trainyard.jobspec.spec import (
    FIELDS,
    PLAN_ENV_PREFIX,
    RESERVED_ENV,
    RESERVED_ENV_PREFIXES,
    RESOURCE_FIELDS,
    JobSpec,
    Limits,
)
from trainyard.planner.errors import PlannerError
from trainyard.planner.hardware import gpu
from trainyard.planner.jobplan import PLANNER_KEYS, model_from_spec
from trainyard.planner.model import Model

__all__ = ["parse_job_spec", "unknown_queue"]

_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
_QUEUE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")
_TOPOLOGY = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,62}")
_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # as exec/jobdirs.JOB_ID
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MODEL_FIELDS: Final = frozenset(f.name for f in dataclasses.fields(Model))
_OBJECTIVES: Final = ("time", "cost")


def _num(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


def _too_big(where: str, value: float, limit: float | None, what: str, key: str) -> None:
    if limit is not None and value > limit:
        raise JobSpecError(
            where,
            f"asks for {_num(value)} {what}; at most {_num(limit)} allowed here (limit {key}): "
            "ask for less, or ask an administrator to raise the limit",
        )


def _name(raw: object, where: str) -> str:
    value = text(raw, where)
    if not _NAME.fullmatch(value):
        fixed = re.sub(r"[^a-z0-9-]+", "-", value.lower()).strip("-")
        fixed = re.sub(r"^[^a-z]+", "", fixed)[:63].rstrip("-")
        hint = f" such as {fixed!r}" if fixed and _NAME.fullmatch(fixed) else ""
        raise JobSpecError(
            where,
            f"{value!r} is not a valid job name: use 1-63 lowercase letters, digits and '-', "
            f"starting with a letter and ending with a letter or digit{hint}",
        )
    return value


def _command(raw: object, where: str, limit: int | None) -> tuple[str, ...]:
    if isinstance(raw, str):
        try:
            parts = shlex.split(unicode_text(raw, where))
        except ValueError as exc:
            raise JobSpecError(
                where, f"cannot split {raw!r} into arguments ({exc}); write it as a list"
            ) from None
    elif isinstance(raw, list | tuple):
        parts = [scalar_string(item, f"{where}[{k}]") for k, item in enumerate(raw)]
    else:
        raise JobSpecError(
            where, f"must be a list of arguments or a command line, got {describe(raw)}"
        )
    if not parts or not parts[0].strip():
        raise JobSpecError(where, "must name a program to run, e.g. [python, train.py]")
    for k, part in enumerate(parts):
        if "\0" in part:
            raise JobSpecError(f"{where}[{k}]", "must not contain NUL characters")
    length = sum(map(len, parts)) + len(parts) - 1
    if limit is not None and length > limit:
        raise JobSpecError(
            where,
            f"is {length} characters long; at most {limit} allowed (limit max_command_length): "
            "put long settings in a file the command reads",
        )
    return tuple(parts)


def _env(raw: object, where: str, limit: int | None, *, planner: bool) -> dict[str, str]:
    env = string_map(raw, where)
    if limit is not None and len(env) > limit:
        raise JobSpecError(
            where,
            f"has {len(env)} variables; at most {limit} allowed (limit max_env_entries): "
            "pass settings in a file or as arguments instead",
        )
    for key in env:
        path = f"{where}.{key}"
        if not _ENV_NAME.fullmatch(key):
            raise JobSpecError(
                path,
                "is not a valid environment variable name: use letters, digits and '_', "
                "not starting with a digit",
            )
        if planner and key.startswith(PLAN_ENV_PREFIX):
            continue  # set by resolve(); replaced by the planner's value
        if key in RESERVED_ENV or key.startswith(RESERVED_ENV_PREFIXES):
            raise JobSpecError(
                path,
                "is set by trainyard for every process (torchrun variables, devices and "
                f"{', '.join(p + '*' for p in RESERVED_ENV_PREFIXES)}): remove it",
            )
    return env


def _model(raw: object, where: str) -> str | dict[str, Any]:
    value: str | dict[str, Any]
    if isinstance(raw, str):
        value = text(raw, where).strip()
    elif isinstance(raw, Mapping):
        value = mapping(raw, where, "a mapping of model fields")
        for key, item in value.items():
            if item is not None and not isinstance(item, str | int | float):
                raise JobSpecError(
                    f"{where}.{key}", f"must be a single value, got {describe(item)}"
                )
            if isinstance(item, str):
                value[key] = unicode_text(item, f"{where}.{key}")
    else:
        raise JobSpecError(
            where, f"must be a preset name, a YAML file or a mapping of fields, got {describe(raw)}"
        )
    if isinstance(value, str) and value.lower().endswith((".yaml", ".yml")):
        return value  # read at resolve() time, relative to the spec's directory
    try:
        model_from_spec(value)
    except PlannerError as exc:
        name = exc.field if exc.field == "model" else f"model.{exc.field}"
        raise JobSpecError(name, exc.message) from None
    return value


def _planner(raw: object, where: str, limits: Limits) -> dict[str, Any]:
    section = mapping(raw, where, f"a mapping of {', '.join(PLANNER_KEYS)}")
    out: dict[str, Any] = {}
    for key, value in section.items():
        path = f"{where}.{key}"
        if key not in PLANNER_KEYS:
            raise unknown_field(key, where, PLANNER_KEYS)
        if value is None:
            continue
        if key in ("max_gpus", "nodes_of"):
            out[key] = integer(value, path, low=1)
        elif key == "flash_attention":
            out[key] = boolean(value, path)
        elif key == "objective":
            if value not in _OBJECTIVES:
                raise JobSpecError(path, f"must be time or cost, got {describe(value)}")
            out[key] = value
        else:
            out[key] = number(value, path, positive=True)
    if "max_gpus" in out:
        _too_big(
            f"{where}.max_gpus",
            out["max_gpus"],
            limits.max_gpus_per_job,
            "GPUs",
            "max_gpus_per_job",
        )
    return out


def _document(
    source_doc: str | bytes | Mapping[str, Any], source: str, limits: Limits
) -> dict[str, Any]:
    doc: object
    if isinstance(source_doc, bytes):
        try:
            source_doc = source_doc.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JobSpecError("", f"{source}: not UTF-8 text ({exc})", source=source) from None
    if isinstance(source_doc, str):
        size = len(source_doc.encode("utf-8", "surrogatepass"))
        if limits.max_spec_bytes is not None and size > limits.max_spec_bytes:
            raise JobSpecError(
                "",
                f"{source}: is {size} bytes; at most {limits.max_spec_bytes} allowed "
                "(limit max_spec_bytes)",
                source=source,
            )
        doc = load_yaml(source_doc, source)
    else:
        doc = source_doc
    if doc is None:
        raise JobSpecError(
            "", f"{source}: the job spec is empty; give at least name: and command:", source=source
        )
    return mapping(doc, "", "a mapping of fields (name: ..., command: ...)")


def _flatten(raw: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """Top-level and ``resources:`` fields in one dict, with the path each was given at."""
    known = (*FIELDS, "resources")
    for key in raw:
        if key not in known:
            raise unknown_field(key, "", known)
    values = {k: v for k, v in raw.items() if k != "resources" and v is not None}
    paths = {k: k for k in values}
    section = raw.get("resources")
    if section is not None:
        resources = mapping(section, "resources", f"a mapping of {', '.join(RESOURCE_FIELDS)}")
        for key, value in resources.items():
            if key not in RESOURCE_FIELDS:
                if key in FIELDS:
                    raise JobSpecError(f"resources.{key}", "belongs at the top level, not here")
                raise unknown_field(key, "resources", RESOURCE_FIELDS)
            if key in values:
                raise JobSpecError(
                    f"resources.{key}", f"also given at the top level as {key}:; keep one"
                )
            if value is not None:
                values[key], paths[key] = value, f"resources.{key}"
    return values, paths


def spec_from_dict(data: Mapping[str, Any], *, source: str = "stored spec") -> JobSpec:
    """Read back `JobSpec.to_dict` output: every check except the size limits (which may
    have changed since it was stored)."""
    return parse_job_spec(data, source=source, limits=Limits.none())


def spec_from_json(text: str, *, source: str = "stored spec") -> JobSpec:
    """Read back `JobSpec.to_json` output."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise JobSpecError("", f"{source}: nested too deeply", source=source) from None
    except json.JSONDecodeError as exc:
        raise JobSpecError(
            "",
            f"{source}: malformed JSON: {exc.msg}",
            source=source,
            line=exc.lineno,
            column=exc.colno,
        ) from None
    return spec_from_dict(data, source=source)


def parse_job_spec(
    text_or_mapping: str | bytes | Mapping[str, Any],
    *,
    source: str = "job.yaml",
    limits: Limits | None = None,
    queues: Collection[str] | None = None,
) -> JobSpec:
    """Check a job spec (YAML/JSON text or an already parsed mapping) and return a `JobSpec`.

    Raises `JobSpecError` naming the field and the fix for anything wrong: malformed YAML (with
    line and column), a document that is not a mapping, unknown fields (with the closest known
    name), wrong types, impossible values, requests above `limits` (default `Limits()`), and,
    when `queues` is given, a queue not among them. Nothing else escapes for any input.
    """
    limits = limits if limits is not None else Limits()
    values, paths = _flatten(_document(text_or_mapping, source, limits))
    out: dict[str, Any] = {}
    for required in ("name", "command"):
        if required not in values:
            example = "name: my-job" if required == "name" else "command: [python, train.py]"
            raise JobSpecError(required, f"is required (e.g. {example})")
    out["name"] = _name(values["name"], "name")
    if "queue" in values:
        out["queue"] = _queue(values["queue"], queues)
    elif queues is not None and "default" not in queues:
        raise JobSpecError("queue", f"is required here: one of {', '.join(sorted(queues))}")
    out["command"] = _command(values["command"], "command", limits.max_command_length)

    for key, low in (("workers", 1), ("nodes", 1), ("max_restarts", 0), ("priority", None)):
        if key in values:
            out[key] = integer(values[key], paths.get(key, key), low=low)
    for key in ("cpus", "memory_gb", "gpu_memory_gb", "expected_duration_s", "time_limit_s"):
        if key in values:
            out[key] = number(values[key], paths[key], positive=True)
    if "min_runtime_s" in values:
        out["min_runtime_s"] = number(values["min_runtime_s"], "min_runtime_s", low=0)
    for key in ("expected_duration_s", "time_limit_s", "min_runtime_s"):
        if out.get(key, 0.0) > MAX_DURATION_S:
            raise JobSpecError(
                key, f"must be at most {MAX_DURATION_S:.0f} s (ten years), got {out[key]:g}"
            )
    if "preemptible" in values:
        out["preemptible"] = boolean(values["preemptible"], "preemptible")
    if "wait_for_capacity" in values:
        out["wait_for_capacity"] = boolean(values["wait_for_capacity"], "wait_for_capacity")
    if "checkpoint_every" in values:
        out["checkpoint_every"] = integer(values["checkpoint_every"], "checkpoint_every", low=1)
    if "working_dir" in values:
        out["working_dir"] = _bounded(values["working_dir"], "working_dir", 4096)
    if "resume_from" in values:
        job = text(values["resume_from"], "resume_from").strip()
        if not _JOB_ID.fullmatch(job):
            raise JobSpecError("resume_from", f"{job!r} is not a job id; give the id "
                               "`trainyard submit` printed (see `trainyard jobs`)")  # fmt: skip
        out["resume_from"] = job
    if "gpu_type" in values:
        out["gpu_type"] = _bounded(values["gpu_type"], paths["gpu_type"], 128).strip()
    if "topology" in values:
        topology = text(values["topology"], "topology").strip()
        if not _TOPOLOGY.fullmatch(topology):
            raise JobSpecError(
                "topology", f"must be island, node or a topology level name, got {topology!r}"
            )
        out["topology"] = topology

    planner_form = "model" in values
    if planner_form:
        out["model"] = _model(values["model"], "model")
    if "planner" in values:
        if not planner_form:
            raise JobSpecError(
                "planner",
                "is only used with model: (the planner sizes a model); add model: "
                "or remove planner:",
            )
        out["planner"] = _planner(values["planner"], "planner", limits)
    if "gpus" in values:
        out["gpus"] = integer(values["gpus"], paths["gpus"], low=1 if planner_form else 0)
    elif planner_form:
        out["gpus"] = None
    if "env" in values:
        out["env"] = _env(values["env"], "env", limits.max_env_entries, planner=planner_form)
    if "elastic" in values:
        ranks = out.get("workers", 1) * out.get("nodes", 1)
        out["elastic"], out["gpus"] = check_elastic(
            parse_elastic(values["elastic"]),
            gpus=out.get("gpus"),
            gpus_given="gpus" in values,
            ranks=ranks,
            planner_form=planner_form,
            max_gpus_per_job=limits.max_gpus_per_job,
        )

    if "after" in values:
        out["after"] = parse_after(values["after"])
    if "visible_devices" in values:
        visible = text(values["visible_devices"], "visible_devices").strip()
        if visible not in ("node", "rank"):
            raise JobSpecError(
                "visible_devices",
                f"{visible!r}: use node (every rank sees the job's devices on its node, as "
                "torchrun) or rank (each rank sees only its own)",
            )
        out["visible_devices"] = visible
    if "array" in values:
        out["array"] = parse_array(values["array"], "array", limits.max_array_size)

    spec = JobSpec(**out, priority_given="priority" in values)
    _check_together(spec, paths, limits)
    return spec


def _bounded(raw: object, where: str, most: int) -> str:
    value = text(raw, where)
    if len(value) > most:
        raise JobSpecError(where, f"is {len(value)} characters long; at most {most} allowed")
    return value


def _queue(raw: object, queues: Collection[str] | None) -> str:
    value = text(raw, "queue").strip()
    if not _QUEUE.fullmatch(value):
        raise JobSpecError(
            "queue",
            f"{value!r} is not a valid queue name: letters, digits, '.', '_' and '-' "
            "(at most 63), starting and ending with a letter or digit",
        )
    if queues is not None and value not in queues:
        raise unknown_queue(value, queues)
    return value


def unknown_queue(name: str, queues: Collection[str]) -> JobSpecError:
    """The error for a queue that does not exist, suggesting the closest existing one."""
    known = sorted(queues)
    close = suggest(name, known)
    hint = f"did you mean {close[0]!r}? " if close else ""
    shown = ", ".join(known[:20]) + (f" and {len(known) - 20} more" if len(known) > 20 else "")
    return JobSpecError("queue", f"unknown queue {name!r}; {hint}queues: {shown or 'none'}")


def _check_together(spec: JobSpec, paths: Mapping[str, str], limits: Limits) -> None:
    """Rules that involve several fields, and the size limits."""
    gpus_at = paths.get("gpus", "gpus")
    if spec.model is not None:
        if spec.gpu_type is None:
            raise JobSpecError(
                paths.get("gpu_type", "gpu_type"),
                "is required with model: (the planner plans for one GPU type, e.g. H100)",
            )
        if spec.gpus is None:
            if "max_gpus" not in (spec.planner or {}):
                raise JobSpecError(
                    "planner.max_gpus",
                    "is required when model: is given without gpus: (the most GPUs the "
                    "planner may choose), or give gpus:",
                )
            for key in ("workers", "nodes"):
                if getattr(spec, key) != 1:
                    raise JobSpecError(
                        key,
                        "is chosen by the planner when model: is given without gpus: (one worker "
                        "per GPU, planner.nodes_of per node); remove it or give gpus:",
                    )
        try:
            gpu(spec.gpu_type)
        except PlannerError as exc:
            raise JobSpecError(paths.get("gpu_type", "gpu_type"), exc.message) from None

    gpus = spec.gpus
    if gpus is not None and gpus > 0 and gpus % spec.ranks:
        raise JobSpecError(
            gpus_at,
            f"{gpus} GPUs cannot be shared evenly by workers x nodes = {spec.ranks} ranks: give "
            f"a multiple of {spec.ranks} (each rank gets the same number of GPUs), or 0 for a "
            "CPU-only job",
        )
    if spec.topology in ("island", "node") and spec.nodes > 1:
        raise JobSpecError(
            "topology",
            f"{spec.topology} keeps the job inside one node, but nodes is {spec.nodes}: use "
            "nodes: 1 or a wider topology level",
        )
    if (
        gpus == 0
        and spec.model is None
        and (spec.gpu_type is not None or spec.gpu_memory_gb is not None)
    ):
        what = "gpu_type" if spec.gpu_type is not None else "gpu_memory_gb"
        raise JobSpecError(
            paths.get(what, what), "is set but the job asks for no GPUs: add gpus: or remove it"
        )

    if gpus is not None:
        _too_big(gpus_at, gpus, limits.max_gpus_per_job, "GPUs", "max_gpus_per_job")
        _too_big(
            gpus_at,
            math.ceil(gpus / spec.nodes),
            limits.max_gpus_per_node,
            "GPUs per node",
            "max_gpus_per_node",
        )
    _too_big("nodes", spec.nodes, limits.max_nodes, "nodes", "max_nodes")
    _too_big("workers", spec.workers, limits.max_workers, "workers per node", "max_workers")
    _too_big("max_restarts", spec.max_restarts, limits.max_restarts, "restarts", "max_restarts")
    if spec.cpus is not None:
        _too_big(paths["cpus"], spec.cpus, limits.max_cpus, "CPUs", "max_cpus")
    if spec.memory_gb is not None:
        _too_big(
            paths["memory_gb"],
            spec.memory_gb,
            limits.max_memory_gb,
            "GB of memory",
            "max_memory_gb",
        )
