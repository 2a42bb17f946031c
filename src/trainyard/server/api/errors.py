"""API errors: every 4xx answer is `{"error": {"field": ..., "message": ...}}`.

`field` is the dotted path of the input at fault (``queue``, ``resources.gpus``, ``state``),
or None when no single field is (a missing token, an unknown job).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class ApiError(Exception):
    """An answer with `status` and an error body naming `field`; the transaction is rolled back."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        field: str | None = None,
        extra: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field
        self.extra = dict(extra or {})
        self.headers = headers

    def body(self) -> dict[str, Any]:
        return error_body(self.field, self.message, **self.extra)


def error_body(field: str | None, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"field": field, "message": message, **extra}}


def unauthorized(message: str) -> ApiError:
    return ApiError(401, message, headers={"WWW-Authenticate": "Bearer"})


def forbidden(message: str) -> ApiError:
    return ApiError(403, message)


def not_found(what: str) -> ApiError:
    return ApiError(404, f"{what} not found")


def _field(loc: Sequence[object]) -> str:
    """The field an error names: `spec.gpus`; a repeated query parameter by its name only
    (`state`, not `state.0`: the client gave `?state=` and knows no index)."""
    if len(loc) == 3 and loc[0] == "query" and isinstance(loc[2], int):
        return str(loc[1])
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts)


def validation_error(errors: Sequence[Any]) -> ApiError:
    """The 422 for a request FastAPI's validation refused: its first error, by field."""
    import trainyard.server.api.schemas as schemas  # (pydantic: loaded with the app only)

    first = errors[0] if errors else {}
    field = _field(tuple(first.get("loc", ())))
    message = str(first.get("msg", "invalid request"))
    if first.get("type") == "string_pattern_mismatch":
        pattern = str((first.get("ctx") or {}).get("pattern"))
        message = schemas.PATTERN_MESSAGES.get(pattern, message)
    value = first.get("input")
    if isinstance(value, str | float) and str(value).strip().lower().lstrip("+-") in _NOT_FINITE:
        message = f"must be a finite number, got {value!r} ({message.lower()})"
    return ApiError(422, message, field=field)


_NOT_FINITE = ("nan", "inf", "infinity")
