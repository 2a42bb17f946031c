"""A bound on request bodies, enforced while they stream in, before anything buffers them.

`BodyLimit` is a plain ASGI middleware in front of the whole app, so it runs before
authentication and before FastAPI reads a body: a request announcing more than `max_bytes`
(`Content-Length`) is answered 413 at once, without reading it; one that streams more
(chunked, or lying about its length) is answered 413 as soon as the count passes the bound.
Nothing beyond `max_bytes` is ever held, for authenticated and anonymous callers alike, so a
burst of huge bodies costs the server at most `max_bytes` each. A body within the bound is
handed to the app unchanged (buffered, at most `max_bytes`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from trainyard.server.api.errors import error_body


class BodyLimit:
    """`on_refuse(scope)` is called for every request refused (to count it)."""

    def __init__(
        self, app: ASGIApp, max_bytes: int, on_refuse: Callable[[Scope], None] | None = None
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.on_refuse = on_refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        announced = _content_length(scope)
        if announced is not None and announced > self.max_bytes:
            await self._refuse(scope, send, announced)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            size += len(body)
            if size > self.max_bytes:
                await self._refuse(scope, send, None)
                return
            chunks.append(body)
            more = bool(message.get("more_body", False))
        replay: list[Message] = [{"type": "http.request", "body": b"".join(chunks)}]
        del chunks

        async def replayed() -> Message:
            if replay:
                return replay.pop()
            return await receive()  # after the body: a disconnect, when it comes

        await self.app(scope, replayed, send)

    async def _refuse(self, scope: Scope, send: Send, announced: int | None) -> None:
        if self.on_refuse is not None:
            self.on_refuse(scope)
        size = f"{announced} bytes" if announced is not None else "more than that"
        message = (
            f"the request body is {size}; at most {self.max_bytes} bytes are accepted (a job "
            "spec is far smaller)"
        )
        raw = json.dumps(error_body("", message)).encode()
        headers: list[Any] = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(raw)).encode()),
            (b"connection", b"close"),
        ]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": raw})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
