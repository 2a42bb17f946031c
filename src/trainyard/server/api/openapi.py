"""The API's OpenAPI document as its requests are read: FastAPI's, with query parameters
stated as the text a query string can carry.

FastAPI states an optional query parameter (`str | None = None`) as "a string or null", but
a query string cannot carry null: a parameter is absent (its default) or text (`?user=null`
is the user "null"). The `null` alternative is dropped from each query parameter's schema,
so that clients and fuzzers see what is checked. Found by the fuzzing: schemathesis judged
`?user=True` (sent from a boolean) invalid, because it did not read "string or null" as a
string, and failed the API for accepting a valid request.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

_NULL = {"type": "null"}


def without_null(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` less its `null` alternative, where it is "one schema or null"."""
    choices = schema.get("anyOf")
    if not isinstance(choices, list) or _NULL not in choices:
        return schema
    rest = [choice for choice in choices if choice != _NULL]
    if len(rest) != 1:
        return {**schema, "anyOf": rest}
    stated = {key: value for key, value in schema.items() if key != "anyOf"}
    return {**rest[0], **stated}


def query_text_only(document: dict[str, Any]) -> dict[str, Any]:
    """`document` with every query parameter's schema less its `null` alternative."""
    for operations in document.get("paths", {}).values():
        for operation in operations.values():
            for parameter in operation.get("parameters", []):
                if parameter.get("in") == "query" and "schema" in parameter:
                    parameter["schema"] = without_null(parameter["schema"])
    return document


def install(app: FastAPI) -> None:
    """Serve `query_text_only` of the app's generated document (built once, as FastAPI does)."""
    generate: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = query_text_only(generate())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
