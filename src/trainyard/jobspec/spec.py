"""`JobSpec`, `Limits` and `parse_job_spec`: the checked, immutable form of a job spec.

Owned by `trainyard.jobspec` (the format is documented in its package docstring). Parsing turns
YAML text or a mapping into a `JobSpec` or raises `JobSpecError` naming the field; `resolve`
lets the planner choose the GPU count for a ``model:`` spec; `to_core_job` gives the scheduling
core's view; `to_dict` / `from_dict` store a spec as JSON.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import re
import shlex
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from trainyard.core.types import Job
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
from trainyard.planner.errors import PlannerError
from trainyard.planner.hardware import gpu
from trainyard.planner.jobplan import PLANNER_KEYS, JobPlan, model_from_spec, plan_job_spec
from trainyard.planner.model import Model

__all__ = [
    "FIELDS",
    "RESERVED_ENV",
    "RESERVED_ENV_PREFIXES",
    "RESOURCE_FIELDS",
    "JobSpec",
    "Limits",
    "PlanFunction",
    "parse_job_spec",
    "unknown_queue",
]

PlanFunction = Callable[[Mapping[str, Any], Path | None], JobPlan]

FIELDS: Final = (
    "name",
    "queue",
    "command",
    "workers",
    "nodes",
    "gpus",
    "gpu_type",
    "gpu_memory_gb",
    "cpus",
    "memory_gb",
    "priority",
    "preemptible",
    "max_restarts",
    "min_runtime_s",
    "expected_duration_s",
    "topology",
    "env",
    "working_dir",
    "checkpoint_every",
    "model",
    "planner",
)
RESOURCE_FIELDS: Final = ("gpus", "gpu_type", "gpu_memory_gb", "cpus", "memory_gb")
RESERVED_ENV: Final = frozenset(
    {
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "GROUP_WORLD_SIZE",
        "ROLE_RANK",
        "ROLE_NAME",
        "ROLE_WORLD_SIZE",
        "NODE_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
    }
)
RESERVED_ENV_PREFIXES: Final = ("TRAINYARD_", "TORCHELASTIC_")
PLAN_ENV_PREFIX: Final = "TRAINYARD_PLAN_"
DEFAULT_NODES_OF: Final = 8

_NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
_QUEUE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")
_TOPOLOGY = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,62}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MODEL_FIELDS: Final = frozenset(f.name for f in dataclasses.fields(Model))
_OBJECTIVES: Final = ("time", "cost")


@dataclass(frozen=True)
class Limits:
    """The largest request one job may make; None switches a check off.

    `max_workers` is per node (the ``workers`` field), `max_cpus` / `max_memory_gb` are for the
    whole job, `max_command_length` counts the characters of the command joined by spaces,
    `max_spec_bytes` the size of the YAML text. `Limits()` holds generous defaults that only
    catch mistakes; a server passes its cluster's real limits.
    """

    max_gpus_per_job: int | None = 1024
    max_gpus_per_node: int | None = None
    max_nodes: int | None = 256
    max_workers: int | None = 256
    max_cpus: float | None = 8192.0
    max_memory_gb: float | None = 131072.0
    max_command_length: int | None = 65536
    max_env_entries: int | None = 256
    max_restarts: int | None = 100
    max_spec_bytes: int | None = 1_000_000

    @classmethod
    def none(cls) -> Limits:
        """No limits at all (for specs read back from storage, accepted earlier)."""
        return cls(**{f.name: None for f in dataclasses.fields(cls)})


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    return value


@dataclass(frozen=True)
class JobSpec:
    """A validated job spec. Build it with `parse_job_spec` (the constructor does not check).

    `gpus` is the job's total GPU count; it is None only for a planner spec (``model:`` without
    ``gpus:``) that has not been `resolve`d yet. `env`, `model` and `planner` are read-only
    mappings. Equal specs compare equal; a spec is not hashable (it holds mappings).
    """

    name: str
    command: tuple[str, ...]
    queue: str = "default"
    workers: int = 1
    nodes: int = 1
    gpus: int | None = 0
    gpu_type: str | None = None
    gpu_memory_gb: float | None = None
    cpus: float | None = None
    memory_gb: float | None = None
    priority: int = 0
    preemptible: bool = True
    max_restarts: int = 3
    min_runtime_s: float = 0.0
    expected_duration_s: float | None = None
    topology: str | None = None
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    working_dir: str | None = None
    checkpoint_every: int | None = None
    model: str | Mapping[str, Any] | None = None
    planner: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "command", tuple(self.command))
        object.__setattr__(self, "env", _freeze(self.env))
        if isinstance(self.model, Mapping):
            object.__setattr__(self, "model", _freeze(self.model))
        if self.planner is not None:
            object.__setattr__(self, "planner", _freeze(self.planner))

    @property
    def ranks(self) -> int:
        """Processes in the job: `workers` per node times `nodes` (torchrun's WORLD_SIZE)."""
        return self.workers * self.nodes

    @property
    def gpus_per_worker(self) -> int:
        """GPUs each rank gets (0 for a CPU-only job); needs a resolved spec."""
        return self._resolved_gpus() // self.ranks

    @property
    def needs_planner(self) -> bool:
        """True for a ``model:`` spec whose GPU count the planner has yet to choose."""
        return self.gpus is None

    def _resolved_gpus(self) -> int:
        if self.gpus is None:
            raise JobSpecError(
                "gpus", "not chosen yet: the planner picks it for a model: spec; call resolve()"
            )
        return self.gpus

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data with every field (null where unset); `from_dict` reads it back."""
        out: dict[str, Any] = {}
        for name in FIELDS:
            out[name] = _thaw(getattr(self, name))
        return out

    def to_json(self) -> str:
        """`to_dict` as compact JSON with sorted keys (for storing in the database)."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "stored spec") -> JobSpec:
        """Read back `to_dict` output: every check except the size limits (which may change)."""
        return parse_job_spec(data, source=source, limits=Limits.none())

    @classmethod
    def from_json(cls, text: str, *, source: str = "stored spec") -> JobSpec:
        """Read back `to_json` output."""
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
        return parse_job_spec(data, source=source, limits=Limits.none())

    def resolve(
        self,
        *,
        base_dir: Path | None = None,
        limits: Limits | None = None,
        plan: PlanFunction | None = None,
    ) -> JobSpec:
        """The spec with the planner's choices applied (itself when it has no ``model:``).

        See `resolve_plan`, which also returns the planner's answer.
        """
        return self.resolve_plan(base_dir=base_dir, limits=limits, plan=plan)[0]

    def resolve_plan(
        self,
        *,
        base_dir: Path | None = None,
        limits: Limits | None = None,
        plan: PlanFunction | None = None,
    ) -> tuple[JobSpec, JobPlan | None]:
        """Run the planner for a ``model:`` spec: returns the resolved spec and the `JobPlan`.

        Without ``gpus:`` the planner chooses the count; the resolved spec then runs one worker
        per GPU, ``planner.nodes_of`` (default 8) per node, and with ``planner.tokens`` an unset
        `expected_duration_s` becomes the predicted training time. Its `env` gains the plan's
        variables (``TRAINYARD_PLAN_*`` always replaced by the new plan; ``NCCL_*`` only where
        the spec does not set them). `base_dir` is where a ``model:`` file is looked up; `plan`
        replaces `plan_job_spec` (tests, caching); `limits` re-checks the result (default: none).
        Errors are `JobSpecError` naming the spec field (``planner.max_gpus``, ``model``...).
        """
        if self.model is None:
            return self, None
        request: dict[str, Any] = {
            "model": _thaw(self.model),
            "gpu_type": self.gpu_type,
            "planner": _thaw(self.planner) if self.planner is not None else {},
        }
        if self.gpus is not None:
            request["gpus"] = self.gpus
        try:
            result = (plan or plan_job_spec)(request, base_dir)
        except PlannerError as exc:
            raise _from_planner(exc) from None
        data = self.to_dict()
        data["gpus"] = result.gpus
        if self.gpus is None:
            nodes_of = int((self.planner or {}).get("nodes_of", DEFAULT_NODES_OF))
            per_node = min(result.gpus, nodes_of)
            if result.gpus % per_node:
                raise JobSpecError(
                    "gpus",
                    f"the planner chose {result.gpus} GPUs, not a multiple of "
                    f"planner.nodes_of = {nodes_of}; give gpus: yourself",
                )
            data["workers"], data["nodes"] = per_node, result.gpus // per_node
        tokens_given = self.planner is not None and "tokens" in self.planner
        if self.expected_duration_s is None and tokens_given and result.options:
            hours = result.options[0].hours  # the chosen option: the time to train `tokens`
            if math.isfinite(hours) and hours > 0:
                data["expected_duration_s"] = hours * 3600.0
        env = {k: v for k, v in self.env.items() if not k.startswith(PLAN_ENV_PREFIX)}
        for key, value in result.env.items():
            if key.startswith(PLAN_ENV_PREFIX) or key not in env:
                env[key] = value
        data["env"] = env
        resolved = parse_job_spec(data, source="resolved spec", limits=limits or Limits.none())
        return resolved, result

    def to_core_job(self, job_id: str, submit_time: float, attained_service: float = 0.0) -> Job:
        """The scheduling core's view of this job (needs a resolved spec: `gpus` set)."""
        return Job(
            id=job_id,
            name=self.name,
            queue=self.queue,
            gpus=self._resolved_gpus(),
            priority=self.priority,
            submit_time=submit_time,
            gpu_types=(self.gpu_type,) if self.gpu_type else (),
            gpu_memory_gb=self.gpu_memory_gb or 0.0,
            cpus=self.cpus or 0.0,
            memory_gb=self.memory_gb or 0.0,
            preemptible=self.preemptible,
            min_runtime=self.min_runtime_s,
            expected_duration=self.expected_duration_s,
            attained_service=attained_service,
            topology=self.topology,
        )


def _from_planner(exc: PlannerError) -> JobSpecError:
    """A planner error as a `JobSpecError` naming the job spec field."""
    name, message = exc.field, exc.message
    if name == "gpu":
        name = "gpu_type"
    elif name == "num_gpus":
        name = "gpus"
    elif name in ("model", "gpu_type", "gpus", "planner") or name.startswith(
        ("model.", "planner.")
    ):
        pass
    elif name in _MODEL_FIELDS or name == "preset":
        name = f"model.{name}"
    else:
        name, message = "model", f"{name}: {message}"
    return JobSpecError(name, message)


# -- parsing ----------------------------------------------------------------------------------


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
    for key in ("cpus", "memory_gb", "gpu_memory_gb", "expected_duration_s"):
        if key in values:
            out[key] = number(values[key], paths[key], positive=True)
    if "min_runtime_s" in values:
        out["min_runtime_s"] = number(values["min_runtime_s"], "min_runtime_s", low=0)
    if "preemptible" in values:
        out["preemptible"] = boolean(values["preemptible"], "preemptible")
    if "checkpoint_every" in values:
        out["checkpoint_every"] = integer(values["checkpoint_every"], "checkpoint_every", low=1)
    if "working_dir" in values:
        out["working_dir"] = _bounded(values["working_dir"], "working_dir", 4096)
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

    spec = JobSpec(**out)
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
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
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
