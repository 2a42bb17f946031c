"""Reading a job spec document and converting its raw values, each check naming its path.

Owned by `trainyard.jobspec`: reading the document (`trainyard.yamlio`, the one YAML loader:
safe, rejects duplicate keys, reports line and column), and small typed converters
(`integer`, `number`, `text`, `boolean`, `string_map`) that raise `JobSpecError` with the
field path and the fix. The checks shared with scenarios, and `describe`, are
`trainyard.fields`'; this module adds the job spec's own (database integer range, non-empty
Unicode text, environment maps). No knowledge of which fields exist.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainyard import fields, yamlio
from trainyard.fields import describe
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


def number(raw: object, where: str, *, low: float | None = None, positive: bool = False) -> float:
    """A finite number (`trainyard.fields.number`); `low` is the smallest allowed value,
    `positive` requires > 0."""
    return fields.number(raw, where, JobSpecError, low=low, positive=positive)


def integer(raw: object, where: str, *, low: int | None = None) -> int:
    """A whole number that a database stores (`trainyard.fields.integer`)."""
    return fields.integer(raw, where, JobSpecError, low=low, bounds=(INT_MIN, INT_MAX))


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
    raw = fields.string(raw, where, JobSpecError)
    if not raw.strip():
        raise JobSpecError(where, "must not be empty")
    return unicode_text(raw, where)


def boolean(raw: object, where: str) -> bool:
    """`true` or `false`."""
    return fields.boolean(raw, where, JobSpecError)


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
