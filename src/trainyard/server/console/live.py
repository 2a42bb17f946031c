"""Live pages over server-sent events (`text/event-stream`).

A page's own address, asked for with `Accept: text/event-stream` (the browser's
`EventSource`), streams that page's live regions: the page is built again (its view
function, the same as for the first render) whenever the database changed and at least every
`ConsoleSettings.live_refresh_s` (ages, estimated starts, usage that grows); each live block
of its template is rendered and sent as an `update` event (`{"id", "html", "ms"}`) only when
it differs from what this page last received. `ms` is the server's time to build and render.

Noticing a change costs one `Watcher` per app, not one per page: while any page listens it
asks the database every `live_poll_s` for a fingerprint read through primary keys and small
tables (the newest job event, report sample and audit event; the nodes and the devices that
are not healthy), and wakes every listener when it changed. With 10,000 queued jobs that
fingerprint still reads a handful of rows (`bench/console.py`, docs/benchmarks.md).

Job logs (`log_events`) are followed per rank and attempt from the log files, as `GET
/v1/jobs/{id}/logs?follow=true` does (`services/logs.open_logs`), starting with the last
`LOG_TAIL_BYTES` already written; lines go out in batches (`lines` events), and `end` says
the attempt is over. When the page goes away the follower stops within a poll.

Both kinds of stream check their caller again at least every `REVERIFY_S` (through the token
cache, `ApiContext.caller`): a console session revoked or logged out elsewhere, a user
disabled or removed, ends every stream of theirs within seconds with a `gone` event, as it
ends their next request (an outside review found streams that went on for minutes).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from trainyard.server.api.errors import ApiError
from trainyard.server.api.routes import context
from trainyard.server.db import AuditEvent, Device, Health, JobEvent, JobReportSample, Node
from trainyard.server.services.logs import open_logs

LOG_TAIL_BYTES = 256 * 1024
LOG_BATCH = 500  # lines per event at most
PING_S = 15.0
REVERIFY_S = 5.0  # how often an open stream checks that its caller may still read
HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


def fingerprint(session: Session) -> tuple[Any, ...]:
    """What changes when anything a console page shows changed (but ages and reasons)."""
    return (
        session.scalar(select(func.max(JobEvent.id))),
        session.scalar(select(func.max(JobReportSample.id))),
        session.scalar(select(func.max(AuditEvent.id))),
        tuple(session.execute(select(Node.id, Node.schedulable, Node.health, Node.drained_at))),
        tuple(session.execute(select(Device.id).where(Device.health != Health.HEALTHY))),
    )


class Watcher:
    """Notices changes in the database for every live page of one app (see the module)."""

    def __init__(self, sessions: sessionmaker[Session], poll_s: float) -> None:
        self.sessions = sessions
        self.poll_s = poll_s
        self.generation = 0
        self.listeners = 0
        self._seen: tuple[Any, ...] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()

    def _read(self) -> tuple[Any, ...]:
        with self.sessions() as session:
            return fingerprint(session)

    def _ensure(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._task is None or self._task.done():
            self._loop = loop
            self._changed = asyncio.Event()
            self._task = loop.create_task(self._run())

    async def _run(self) -> None:
        while self.listeners > 0:
            seen: tuple[Any, ...] | None
            try:
                seen = await run_in_threadpool(self._read)
            except Exception:  # a database hiccup: the pages refresh on their own timer
                seen = self._seen
            if seen != self._seen:
                self._seen = seen
                self.generation += 1
                changed, self._changed = self._changed, asyncio.Event()
                changed.set()
            await asyncio.sleep(self.poll_s)

    async def wait(self, timeout: float) -> None:
        """Until the next change, or `timeout` seconds."""
        self._ensure()
        changed = self._changed
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), timeout)


def watcher_of(app: FastAPI) -> Watcher:
    found: Watcher | None = getattr(app.state, "console_watcher", None)
    if found is None:
        ctx = app.state.trainyard
        found = Watcher(ctx.sessions, app.state.console.live_poll_s)
        app.state.console_watcher = found
    return found


def _event(kind: str, data: Any) -> str:
    return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


async def _ended(request: Request) -> str | None:
    """A `gone` event when the stream's caller may no longer read (revoked, expired,
    disabled), else None."""
    ctx = context(request)
    try:
        await ctx.caller(request, ctx.clock())
    except ApiError as error:
        return _event("gone", {"message": f"your session has ended ({error.message})"})
    return None


def stream_page(request: Request, page: Any, base: dict[str, Any]) -> StreamingResponse:
    """The live regions of `page` (a `web.Page`), as they change."""
    from trainyard.server.console.web import build_values, render_block

    ctx = context(request)
    watcher = watcher_of(request.app)
    refresh_s = request.app.state.console.live_refresh_s

    def render() -> tuple[dict[str, str], float]:
        began = time.perf_counter()
        values = build_values(ctx, page)
        blocks = {b: render_block(page.template, b, {**base, **values}) for b in page.live}
        return blocks, (time.perf_counter() - began) * 1000

    async def events() -> AsyncIterator[str]:
        watcher.listeners += 1
        sent: dict[str, str] = {}
        last = time.monotonic()
        checked = time.monotonic()
        try:
            yield "retry: 3000\n\n"
            while not await request.is_disconnected():
                if time.monotonic() - checked >= REVERIFY_S:
                    checked = time.monotonic()
                    if (gone := await _ended(request)) is not None:
                        yield gone
                        return
                try:
                    blocks, ms = await run_in_threadpool(render)
                except ApiError as error:  # the job is gone (retention), say so and stop
                    yield _event("gone", {"message": error.message})
                    return
                for block, html in blocks.items():
                    if sent.get(block) != html:
                        sent[block] = html
                        yield _event("update", {"id": block, "html": html, "ms": round(ms, 2)})
                        last = time.monotonic()
                if time.monotonic() - last > PING_S:
                    yield ": ping\n\n"
                    last = time.monotonic()
                await watcher.wait(refresh_s)
        finally:
            watcher.listeners -= 1

    return StreamingResponse(events(), media_type="text/event-stream", headers=HEADERS)


def log_events(request: Request, job_id: str, rank: int, attempt: int | None) -> StreamingResponse:
    """A rank's log lines as they are written (a 404/422 `ApiError` before streaming)."""
    ctx = context(request)
    stop = threading.Event()
    with ctx.unit(request) as (session, who, _now):
        lines = open_logs(
            session, who, ctx.logs, ctx.sessions, job_id, rank=rank, attempt=attempt,
            follow=True, stop=stop.is_set, tail_bytes=LOG_TAIL_BYTES,
        )  # fmt: skip
    return StreamingResponse(
        _pump(request, lines, stop), media_type="text/event-stream", headers=HEADERS
    )


async def _pump(
    request: Request, lines: Iterator[str], stop: threading.Event
) -> AsyncIterator[str]:
    """Lines from the blocking follower (a worker thread) to the browser, in batches."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str | None] = asyncio.Queue()

    def read() -> None:
        try:
            for line in lines:
                loop.call_soon_threadsafe(queue.put_nowait, line.rstrip("\n"))
                if stop.is_set():
                    break
        finally:
            loop.call_soon_threadsafe(queue.put_nowait, None)

    worker = threading.Thread(target=read, name="trainyard-console-log", daemon=True)
    worker.start()
    checked = sent = time.monotonic()
    try:
        yield "retry: 3000\n\n"
        while True:
            if time.monotonic() - checked >= REVERIFY_S:
                checked = time.monotonic()
                if (gone := await _ended(request)) is not None:
                    yield gone
                    return
            try:
                first = await asyncio.wait_for(queue.get(), REVERIFY_S)
            except TimeoutError:
                if await request.is_disconnected():
                    return
                if time.monotonic() - sent >= PING_S:  # a ping after PING_S of quiet
                    yield ": ping\n\n"
                    sent = time.monotonic()
                continue
            batch: list[str] = []
            item: str | None = first
            while item is not None:
                batch.append(item)
                if len(batch) >= LOG_BATCH or queue.empty():
                    break
                item = queue.get_nowait()
            if batch:
                yield _event("lines", batch)
                sent = time.monotonic()
            if item is None:
                yield _event("end", {})
                return
    finally:
        stop.set()
