"""The one YAML loader: safe, and a key given twice in one mapping is an error.

PyYAML's `safe_load` keeps the last of two equal keys, silently; a job spec or a scenario that
says `gpus:` twice is a mistake to report, not to guess about. `load_yaml` parses one document
with `StrictLoader` and raises `YamlError` with the line and column (1-based, when known) of
the problem (and, when the line has a value that starts with an unquoted brace, how to quote
it: YAML opens a mapping there); each caller turns that into its own `FieldError` (`JobSpecError`,
`ScenarioError`), so every document the product reads is held to the same rules.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

__all__ = ["StrictLoader", "YamlError", "load_yaml"]


class YamlError(ValueError):
    """A document is not valid YAML: `problem`, at `line`/`column` (1-based) when known."""

    def __init__(self, problem: str, line: int | None = None, column: int | None = None) -> None:
        where = f"line {line}, column {column}: " if line is not None else ""
        super().__init__(f"{where}{problem}")
        self.problem = problem
        self.line = line
        self.column = column


class StrictLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that refuses a key given twice in one mapping (PyYAML keeps the last)."""


def _construct_mapping(loader: StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _value in node.value:
        key = loader.construct_object(key_node)
        try:
            duplicate = key in seen
        except TypeError:  # an unhashable key: the default constructor reports it
            break
        if duplicate:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found duplicate key {key!r}; give each field once",
                key_node.start_mark,
            )
        seen.add(key)
    return loader.construct_mapping(node)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


# A value that starts with an unquoted brace: `name: {i}-x` or `- {i}` (YAML opens a mapping).
_BRACE_VALUE = re.compile(r"(:|^\s*-)\s+\{")


def _brace_hint(text: str, line: int | None) -> str:
    """The quoting hint when the line at fault has a value that starts with a brace."""
    lines = text.splitlines()
    if line is not None and 1 <= line <= len(lines) and _BRACE_VALUE.search(lines[line - 1]):
        return '; a value that starts with a brace must be quoted ("{i}-x", "n{i}")'
    return ""


def load_yaml(text: str) -> object:
    """Parse one YAML document with `StrictLoader`; any problem is a `YamlError`."""
    try:
        return yaml.load(text, Loader=StrictLoader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "malformed YAML"
        line = mark.line + 1 if mark is not None else None
        column = mark.column + 1 if mark is not None else None
        raise YamlError(problem + _brace_hint(text, line), line, column) from None
    except yaml.YAMLError as exc:
        raise YamlError(" ".join(str(exc).split())) from None
