"""Raw document values (YAML/JSON) into typed fields: the checks every document reader shares.

Job specs (`trainyard.jobspec.fields`) and scenarios (`trainyard.scenario.schema`) read their
values through these converters, so the same mistake gets the same words in both. Each
converter names the path of the value it checks (`pending[3].gpus`, `resources.gpus`) and
raises the reader's own `FieldError` subclass, passed as `error` (a `(field, message)`
constructor). `describe` is the one wording of what a wrong value is, and `yaml_hint` adds
what YAML made of an unquoted value: `on`/`off`/`yes`/`no` are booleans, and a value that
starts with a brace (`{i}`) is a mapping. A number in exponent form without a dot (`1e3`,
a string to YAML 1.1, a number to JSON) is read as the number it means.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping

from trainyard.errors import FieldError

__all__ = [
    "MAX_DURATION_S",
    "ErrorType",
    "boolean",
    "describe",
    "integer",
    "number",
    "string",
    "yaml_hint",
]

ErrorType = Callable[[str, str], FieldError]

# The longest time a job may state (`expected_duration_s`, `min_runtime_s`, `submit --time`):
# ten years, as a token's lifetime. Estimated starts add up the durations of the jobs ahead,
# and unbounded ones overflowed the clocks that show them.
MAX_DURATION_S = 10 * 365 * 86400

# YAML 1.1 reads 1e3 or 2.5E-4 (no dot, or no sign in the exponent) as strings; JSON does not.
_EXPONENT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def describe(raw: object) -> str:
    """A few words for a raw value, for messages ("a string 'x'", "the number 3")."""
    if raw is None:
        return "null"
    if isinstance(raw, bool):
        return f"a boolean ({str(raw).lower()})"
    if isinstance(raw, Mapping):
        return "a mapping"
    if isinstance(raw, list | tuple):
        return "a list"
    if isinstance(raw, str):
        shown = raw if len(raw) <= 40 else raw[:37] + "..."
        return f"a string {shown!r}"
    if isinstance(raw, int | float):
        return f"the number {raw!r}"
    return type(raw).__name__


def yaml_hint(raw: object) -> str:
    """What YAML made of an unquoted value, as a clause to add to an error ("" if nothing)."""
    if isinstance(raw, bool):
        return " (YAML reads unquoted on/off/yes/no/true/false as booleans: quote the value)"
    if isinstance(raw, Mapping) and raw and all(v is None for v in raw.values()):
        return ' (YAML reads an unquoted {...} as a mapping: quote a value with braces, "n{i}")'
    return ""


def _exponent(raw: object) -> object:
    if isinstance(raw, str) and _EXPONENT.fullmatch(raw.strip()):
        return float(raw)
    return raw


def number(
    raw: object,
    where: str,
    error: ErrorType,
    *,
    low: float | None = None,
    positive: bool = False,
) -> float:
    """A finite number; `low` is the smallest allowed value, `positive` requires > 0."""
    raw = _exponent(raw)
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise error(where, f"must be a number, got {describe(raw)}{yaml_hint(raw)}")
    value = float(raw)
    if not math.isfinite(value):
        raise error(where, f"must be a finite number, got {raw!r}")
    if positive and value <= 0:
        raise error(where, f"must be greater than 0, got {raw!r}")
    if low is not None and value < low:
        raise error(where, f"must be >= {low:g}, got {raw!r}")
    return value


def integer(
    raw: object,
    where: str,
    error: ErrorType,
    *,
    low: float | None = None,
    bounds: tuple[int, int] | None = None,
) -> int:
    """A whole number (``2.0`` and ``1e3`` are read as 2 and 1000); `low` is the smallest
    allowed value, `bounds` (when given) what can be stored."""
    raw = _exponent(raw)
    if isinstance(raw, float) and math.isfinite(raw) and raw == int(raw):
        raw = int(raw)
    if isinstance(raw, bool) or not isinstance(raw, int):
        hint = " (remove the quotes)" if isinstance(raw, str) and raw.strip().isdigit() else ""
        raise error(where, f"must be a whole number, got {describe(raw)}{hint or yaml_hint(raw)}")
    if low is not None and raw < low:
        raise error(where, f"must be >= {low:g}, got {raw}")
    if bounds is not None and not bounds[0] <= raw <= bounds[1]:
        least = bounds[0] if low is None else max(bounds[0], math.ceil(low))
        raise error(where, f"is out of range: must be between {least} and {bounds[1]}")
    return raw


def boolean(raw: object, where: str, error: ErrorType) -> bool:
    """`true` or `false`."""
    if not isinstance(raw, bool):
        raise error(where, f"must be true or false, got {describe(raw)}")
    return raw


def string(raw: object, where: str, error: ErrorType) -> str:
    """A string, as written (numbers are not silently converted)."""
    if not isinstance(raw, str):
        raise error(where, f"must be a string, got {describe(raw)}{yaml_hint(raw)}")
    return raw
