"""The field kinds and checks of the scenario format (see `trainyard.scenario`).

Owns `ScenarioError`, the field kinds of each record and `convert`, which turns raw YAML/JSON
values into dataclass fields through the checks shared with job specs (`trainyard.fields`):
each names the path of the value it checks (`pending[3].gpus`) so that every error says
where and how to fix it. Also owns the `{i}` templates of `count` entries.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from typing import Any

from trainyard import fields
from trainyard.core import Elastic, StepSample
from trainyard.errors import FieldError, suggest
from trainyard.fields import describe


class ScenarioError(FieldError):
    """A scenario cannot be loaded. `field` is where (`pending[3].gpus`), `message` the fix;
    `source` (the file), when known, leads the text."""

    def __init__(self, field: str, message: str, source: str = "") -> None:
        super().__init__(field, message)
        if source:
            self.args = (f"{source}: {self.args[0]}",)
        self.source = source


# -- field kinds ---------------------------------------------------------------------------
# kind: "str", "int", "float", "bool", or a list "strs" / "ints" / "floats"; a trailing "?" also
# allows null. `low`: smallest allowed value for numbers (None: any).

Spec = tuple[str, float | None]

JOB: dict[str, Spec] = {
    "id": ("str", None),
    "queue": ("str", None),
    "gpus": ("int", 0),
    "priority": ("int", None),
    "submit_time": ("float", None),
    "gpu_types": ("strs", None),
    "gpu_memory_gb": ("float", 0),
    "cpus": ("float", 0),
    "memory_gb": ("float", 0),
    "preemptible": ("bool", None),
    "min_runtime": ("float", 0),
    "expected_duration": ("float?", 0),
    "attained_service": ("float", 0),
    "topology": ("str?", None),
    "min_gpus": ("int?", 0),
    "max_gpus": ("int?", 0),
    "name": ("str", None),
    "elastic": ("elastic", None),  # a mapping of ELASTIC fields (`elastic` below)
    "restarts": ("int", 0),
    "recovering": ("bool", None),
    "nodes": ("int", 0),
}
ELASTIC: dict[str, Spec] = {
    "batch": ("int", 0),
    "max_batch": ("int", 0),
    "max_local_batch": ("int", 0),
    "grad_sqr": ("float", 0),
    "grad_var": ("float", 0),
    "remaining": ("float", 0),
}
STEP_SAMPLE: dict[str, Spec] = {
    "gpus": ("int", 1),
    "nodes": ("int", 1),
    "batch": ("int", 1),
    "step_time": ("float", 0),
}
NODE: dict[str, Spec] = {
    "name": ("str", None),
    "gpus": ("int", 0),
    "gpu_type": ("str", None),
    "gpu_memory_gb": ("float", 0),
    "cpus": ("float", 0),
    "memory_gb": ("float", 0),
    "island_size": ("int", 0),
    "schedulable": ("bool", None),
    "unavailable": ("ints", 0),
    "virtual": ("bool", None),
    "spare": ("bool", None),
    "down": ("str", None),
}
QUEUE: dict[str, Spec] = {
    "name": ("str", None),
    "parent": ("str?", None),
    "guaranteed": ("int", 0),
    "limit": ("int?", 0),
    "weight": ("float", 0),
    "usage": ("float", 0),
}
PROFILE: dict[str, Spec] = {
    "base": ("str", None),
    "name": ("str", None),
    "actions": ("strs", None),
    "job_order": ("str", None),
    "queue_order": ("str", None),
    "strict_order": ("bool", None),
    "las_thresholds": ("floats", 0),
    "usage_weight": ("float", 0),
    "max_reservations": ("int", 0),
    "reserve_unknown_after_s": ("float?", 0),
    "reserve_gang_after_s": ("float?", 0),
    "split_small_jobs": ("bool", None),
    "locality_wait_s": ("float", 0),
    "las_preempt_filled": ("bool", None),
    "queue_tie_break": ("str", None),
    "resize_min_gain": ("float", 0),
    "resize_hold_s": ("float", 0),
    "resize_restart_s": ("float", 0),
    "resize_horizon_s": ("float", 0),
}
_FORMATTER = string.Formatter()


def unknown_key(key: str, where: str, allowed: list[str]) -> ScenarioError:
    """Error for a key not in `allowed`, with the closest allowed key as a hint."""
    close = suggest(key, allowed)
    hint = f"did you mean {close[0]!r}? " if close else ""
    path = f"{where}.{key}" if where else key
    return ScenarioError(path, f"unknown key; {hint}allowed: {', '.join(allowed)}")


def as_mapping(raw: object, where: str, allowed: list[str]) -> dict[str, Any]:
    """`raw` as a dict whose keys are all in `allowed` (`where` is "" at the top level)."""
    if not isinstance(raw, Mapping):
        what = "must" if where else "the scenario must"
        raise ScenarioError(where, f"{what} be a mapping (key: value), got {describe(raw)}")
    for key in raw:
        if not isinstance(key, str):
            hint = " (YAML reads on/off/yes/no as booleans: quote them)"
            raise ScenarioError(where, f"keys must be strings, got {key!r}{hint}")
        if key not in allowed:
            raise unknown_key(key, where, allowed)
    return dict(raw)


def as_list(raw: object, where: str) -> list[Any]:
    if not isinstance(raw, list):
        raise ScenarioError(where, f"must be a list, got {describe(raw)}")
    return raw


def scalar(kind: str, raw: object, where: str, low: float | None) -> Any:
    """One value of `kind` ("str", "int", "float", "bool"), by the shared `trainyard.fields`
    checks (the same words as a job spec's)."""
    if kind == "bool":
        return fields.boolean(raw, where, ScenarioError)
    if kind == "str":
        return fields.string(raw, where, ScenarioError)
    if kind == "int":
        return fields.integer(raw, where, ScenarioError, low=low)
    return fields.number(raw, where, ScenarioError, low=low)


def elastic(raw: object, where: str) -> Elastic:
    """An elastic job's goodput data: ELASTIC fields plus `samples` (STEP_SAMPLE mappings)."""
    data = as_mapping(raw, where, [*ELASTIC, "samples"])
    values = convert_fields(data, ELASTIC, where)
    samples = []
    for k, entry in enumerate(as_list(data.get("samples", []), f"{where}.samples")):
        at = f"{where}.samples[{k}]"
        fields_ = convert_fields(as_mapping(entry, at, list(STEP_SAMPLE)), STEP_SAMPLE, at)
        for key in STEP_SAMPLE:
            if key not in fields_:
                raise ScenarioError(f"{at}.{key}", f"is required; give {', '.join(STEP_SAMPLE)}")
        samples.append(StepSample(**fields_))
    return Elastic(samples=tuple(samples), **values)


def convert(spec: Spec, raw: object, where: str) -> Any:
    kind, low = spec
    if kind == "elastic":
        return None if raw is None else elastic(raw, where)
    if kind.endswith("?"):
        return None if raw is None else scalar(kind[:-1], raw, where, low)
    if kind in ("strs", "ints", "floats"):
        if kind == "strs" and isinstance(raw, str):
            return (raw,)
        if kind == "ints" and isinstance(raw, str):
            return device_ranges(raw, where)
        item = {"strs": "str", "ints": "int", "floats": "float"}[kind]
        return tuple(
            scalar(item, x, f"{where}[{k}]", low) for k, x in enumerate(as_list(raw, where))
        )
    return scalar(kind, raw, where, low)


def device_ranges(text: str, where: str) -> tuple[int, ...]:
    """`"0-3,6"` -> (0, 1, 2, 3, 6)."""
    out: list[int] = []
    for part in text.replace(" ", "").split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if m is None or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
            raise ScenarioError(where, f"bad device range {text!r}; write e.g. [0, 1] or '0-3,6'")
        out.extend(range(int(m.group(1)), int(m.group(2) or m.group(1)) + 1))
    return tuple(out)


def convert_fields(raw: dict[str, Any], specs: dict[str, Spec], where: str) -> dict[str, Any]:
    return {k: convert(specs[k], v, f"{where}.{k}") for k, v in raw.items() if k in specs}


def fill_template(template: str, where: str, names: Mapping[str, int]) -> str:
    """Format `template` with only the given integer variables (e.g. `n{i:03d}`)."""
    try:
        used = [name for _t, name, _s, _c in _FORMATTER.parse(template) if name is not None]
    except ValueError as exc:
        raise ScenarioError(where, f"bad template {template!r}: {exc}") from None
    for name in used:
        if name not in names:
            known = ", ".join("{" + n + "}" for n in names)
            raise ScenarioError(where, f"unknown template field {{{name}}}; use {known}")
    try:
        return template.format_map(dict(names))
    except (ValueError, IndexError) as exc:
        raise ScenarioError(where, f"bad template {template!r}: {exc}") from None


def copies(raw: dict[str, Any], where: str) -> list[int]:
    """Values of `{i}` for an entry with optional `count` / `start`."""
    count = scalar("int", raw.get("count", 1), f"{where}.count", 1)
    start = scalar("int", raw.get("start", 0), f"{where}.start", 0)
    return list(range(start, start + count))


def require(raw: dict[str, Any], key: str, where: str, hint: str) -> None:
    if key not in raw:
        raise ScenarioError(f"{where}.{key}", f"is required; {hint}")
