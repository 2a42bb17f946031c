"""Guards that run before an API operation looks at its inputs (router and operation
dependencies of `trainyard.server.api.routes`).

- `known_query`: refuses query parameters the operation does not take (a typo such as
  `?stat=RUNNING` would otherwise be silently ignored), and one of a single value given more
  than once.
- `caller_first`: the caller is authenticated before a JSON body is validated as a model, so
  an unauthenticated request gets 401, not the body's schema in a 422 (outside review 11).
"""

from __future__ import annotations

from typing import Any, get_args, get_origin

from fastapi import Request

from trainyard.server.api.errors import ApiError

__all__ = ["caller_first", "known_query"]


def _takes_many(annotation: Any) -> bool:
    """Whether a parameter of this type may be repeated (`list[X]`, `list[X] | None`)."""
    if get_origin(annotation) in (list, tuple, set, frozenset):
        return True
    return any(_takes_many(arg) for arg in get_args(annotation))


def _query_names(dependant: Any) -> dict[str, bool]:
    """The query parameters an operation declares (its dependencies' included), each with
    whether it may be repeated."""
    names = {p.alias: _takes_many(p.field_info.annotation) for p in dependant.query_params}
    for sub in dependant.dependencies:
        names.update(_query_names(sub))
    return names


def known_query(request: Request) -> None:
    """Refuse query parameters the operation does not take (a typo such as `?stat=RUNNING`
    would otherwise be silently ignored), and one of a single value given more than once
    (`?queue=a&queue=b` would otherwise keep the last one silently)."""
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return
    allowed = _query_names(dependant)
    for name in request.query_params:
        if name not in allowed:
            known = ", ".join(sorted(allowed)) or "none"
            raise ApiError(
                422, f"unknown query parameter {name!r}; this operation takes: {known}",
                field=name,
            )  # fmt: skip
        given = len(request.query_params.getlist(name))
        if given > 1 and not allowed[name]:
            raise ApiError(
                422, f"{name!r} takes one value and was given {given} times; give it once",
                field=name,
            )  # fmt: skip


async def caller_first(request: Request) -> None:
    """A 401 before a request's body is looked at: an operation that validates a JSON body
    as a model lists this dependency, so that an unauthenticated caller is told to
    authenticate, not how the body should look (outside review 11, F5). The principal is
    kept on the request, so the operation's own `ApiContext.unit` does not look it up again
    (a job's token is never cached: it would be read from the database twice)."""
    ctx = request.app.state.trainyard  # the `ApiContext` (routes.context)
    request.state.caller = await ctx.caller(request, ctx.clock())
