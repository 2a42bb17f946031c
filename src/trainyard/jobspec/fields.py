"""Reading a job spec document and converting its raw values, each check naming its path.

Owned by `trainyard.jobspec`: reading the document (`trainyard.yamlio`, the one YAML loader:
safe, rejects duplicate keys, reports line and column), and small typed converters
(`integer`, `number`, `text`, `boolean`, `string_map`) that raise `JobSpecError` with the
field path and the fix. No knowledge of which fields exist.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from trainyard import yamlio
from trainyard.jobspec.errors import JobSpecError

__all__ = ["boolean", "describe", "integer", "load_yaml", "number", "string_map", "text"]


INT_MIN, INT_MAX = -(2**31), 2**31 - 1  # what every database stores as an integer


def load_yaml(text: str, source: str) -> object:
    """Parse one YAML document (`trainyard.yamlio`: duplicate keys refused); a problem becomes
    `JobSpecError` with line and column."""
    try:
        return yamlio.load_yaml(text)
    except yamlio.YamlError as exc:
        if exc.line is None:
            message = f"{source}: malformed YAML: {exc.problem}"
        else:
            message = f"{source}: malformed YAML at {exc}"
        raise JobSpecError("", message, source=source, line=exc.line, column=exc.column) from None
    except RecursionError:
        raise JobSpecError(
            "", f"{source}: nested too deeply to be a job spec", source=source
        ) from None


def describe(raw: object) -> str:
    """A few words for the type of a raw value, for messages ("a string 'x'")."""
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


# YAML 1.1 reads 1e3 or 2.5E-4 (no dot, or no sign in the exponent) as strings; JSON does not.
_EXPONENT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def number(raw: object, where: str, *, low: float | None = None, positive: bool = False) -> float:
    """A finite number; `low` is the smallest allowed value, `positive` requires > 0.
    A string in exponent form (``1e3``, which YAML 1.1 leaves a string) is read as a number."""
    if isinstance(raw, str) and _EXPONENT.fullmatch(raw.strip()):
        raw = float(raw)
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise JobSpecError(where, f"must be a number, got {describe(raw)}")
    value = float(raw)
    if not math.isfinite(value):
        raise JobSpecError(where, f"must be a finite number, got {raw!r}")
    if positive and value <= 0:
        raise JobSpecError(where, f"must be greater than 0, got {raw!r}")
    if low is not None and value < low:
        raise JobSpecError(where, f"must be >= {low:g}, got {raw!r}")
    return value


def integer(raw: object, where: str, *, low: int | None = None) -> int:
    """A whole number (``2.0`` and ``1e3`` are read as 2 and 1000); `low` is the smallest
    allowed value."""
    if isinstance(raw, str) and _EXPONENT.fullmatch(raw.strip()):
        raw = float(raw)  # 1e3: a string to YAML 1.1
    if isinstance(raw, float) and math.isfinite(raw) and raw == int(raw):
        raw = int(raw)
    if isinstance(raw, bool) or not isinstance(raw, int):
        hint = " (remove the quotes)" if isinstance(raw, str) and raw.strip().isdigit() else ""
        raise JobSpecError(where, f"must be a whole number, got {describe(raw)}{hint}")
    if low is not None and raw < low:
        raise JobSpecError(where, f"must be >= {low}, got {raw}")
    if not INT_MIN <= raw <= INT_MAX:
        raise JobSpecError(where, f"is out of range: must be between {INT_MIN} and {INT_MAX}")
    return raw


def unicode_text(raw: str, where: str) -> str:
    """`raw` as valid Unicode without NUL: surrogate pairs (PyYAML leaves JSON's ``\\ud83d\\ude00``
    escapes split) are joined; a lone surrogate or a NUL is an error."""
    if "\0" in raw:
        raise JobSpecError(where, "must not contain NUL characters")
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError:
        try:
            raw = raw.encode("utf-16", "surrogatepass").decode("utf-16")
        except UnicodeDecodeError:
            raise JobSpecError(where, "is not valid Unicode text (a lone surrogate)") from None
    return raw


def text(raw: object, where: str) -> str:
    """A non-empty string without NUL characters (numbers are not silently converted)."""
    if not isinstance(raw, str):
        raise JobSpecError(where, f"must be a string, got {describe(raw)}")
    if not raw.strip():
        raise JobSpecError(where, "must not be empty")
    return unicode_text(raw, where)


def boolean(raw: object, where: str) -> bool:
    """`true` or `false`."""
    if not isinstance(raw, bool):
        raise JobSpecError(where, f"must be true or false, got {describe(raw)}")
    return raw


def scalar_string(raw: object, where: str) -> str:
    """A string value where numbers are accepted as written (``OMP_NUM_THREADS: 4``)."""
    if isinstance(raw, bool):
        word = str(raw).lower()
        raise JobSpecError(
            where, f"must be a string, got a boolean; quote it if you mean the text: '{word}'"
        )
    if isinstance(raw, int | float):
        return str(raw)
    if not isinstance(raw, str):
        raise JobSpecError(where, f"must be a string, got {describe(raw)}")
    return unicode_text(raw, where)


def string_map(raw: object, where: str) -> dict[str, str]:
    """A mapping of string keys to string values (numbers are accepted as values)."""
    if not isinstance(raw, Mapping):
        raise JobSpecError(where, f"must be a mapping of NAME: value, got {describe(raw)}")
    out: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str):
            raise JobSpecError(where, f"names must be strings, got {describe(key)}; quote it")
        out[key] = scalar_string(value, f"{where}.{key}")
    return out


def mapping(raw: object, where: str, what: str) -> dict[str, Any]:
    """`raw` as a dict with string keys; `what` describes the expected content for the message."""
    if not isinstance(raw, Mapping):
        what_where = where or "the job spec"
        raise JobSpecError(where, f"{what_where} must be {what}, got {describe(raw)}")
    for key in raw:
        if not isinstance(key, str):
            hint = " (YAML reads on/off/yes/no as booleans: quote them)"
            raise JobSpecError(where, f"field names must be strings, got {describe(key)}{hint}")
    return dict(raw)
