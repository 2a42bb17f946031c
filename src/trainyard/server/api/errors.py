"""API errors: every 4xx answer is `{"error": {"field": ..., "message": ...}}`.

`field` is the dotted path of the input at fault (``queue``, ``resources.gpus``, ``state``),
or None when no single field is (a missing token, an unknown job).
"""

from __future__ import annotations

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
