"""The one error of the job specification: `JobSpecError`, naming the field at fault and the fix.

Owned by `trainyard.jobspec`. Every check of user input raises it (never another exception), so
the CLI prints it as is and the API turns it into a 4xx answer whose body names the field.
"""

from __future__ import annotations

from collections.abc import Iterable

from trainyard.errors import FieldError, suggest

__all__ = ["JobSpecError", "unknown_field"]


class JobSpecError(FieldError):
    """A job spec is invalid.

    `field` is the dotted path of the value at fault (``"resources.gpus"``, ``"command[2]"``,
    ``"env.RANK"``; ``""`` for the document as a whole), `message` what is wrong and how to fix
    it. ``str(error)`` is ``"field: message"``. `source` names the document (``job.yaml``);
    `line` and `column` (1-based) are set when the YAML itself is malformed.
    """

    def __init__(
        self,
        field: str,
        message: str,
        *,
        source: str = "",
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        super().__init__(_printable(field), _printable(message))
        self.source = source
        self.line = line
        self.column = column

    def to_dict(self) -> dict[str, object]:
        """Plain data for an API error body: field, message, and line/column when known."""
        out: dict[str, object] = {"field": self.field, "message": self.message}
        if self.line is not None:
            out["line"] = self.line
            out["column"] = self.column
        return out


def _printable(text: str) -> str:
    """`text` safe to encode as UTF-8 (a lone surrogate from the input becomes ``\\udXXX``)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def unknown_field(key: str, where: str, known: Iterable[str]) -> JobSpecError:
    """The error for a key that is not a field here, suggesting the closest known name."""
    names = sorted(known)
    if len(key) > 60:
        key = key[:57] + "..."
    close = suggest(key.lower().replace("-", "_"), names)
    hint = f"did you mean {close[0]!r}? " if close else ""
    path = f"{where}.{key}" if where else key
    return JobSpecError(path, f"unknown field; {hint}known fields: {', '.join(names)}")
