"""The console's plumbing: templates, who is looking (the session cookie, login by link),
page responses with their security headers, and `install`, which adds the console to the
API's app.

A page route depends on `page_user`: the caller from the session cookie, verified as any API
token is (`ApiContext.caller`); without one the browser is sent to `/login`. A link with
`?token=` (a login code or an API token) logs the browser in first and redirects to the same
address without the token, as Jupyter does (`login.py`).

Query parameters are validated by FastAPI with the same declarations as the API's; a refusal
becomes the API's error (`api/errors.validation_error`) rendered on the page by its field
(`ConsoleRoute`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import math
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup
from sqlalchemy.orm import Session

from trainyard import __version__
from trainyard.server.api.auth import SESSION_COOKIE, Principal
from trainyard.server.api.errors import ApiError, validation_error
from trainyard.server.api.routes import ApiContext, context
from trainyard.server.services.logins import csrf_token

HERE = Path(__file__).resolve().parent
STATIC_PATH = "/console-static"
SECURITY_HEADERS = {
    # no script, style sheet, image or connection from anywhere but this server (inline
    # style attributes carry the job colours of the cluster map)
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; "
        "frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # (no-referrer would make forms send `Origin: null`)
    "Cache-Control": "no-store",
}


@dataclass(frozen=True)
class ConsoleSettings:
    """What the console needs beyond the API's context: where simulator reports are
    (`trainyard up --sim-reports`) and the weight of past use in the fair-share key."""

    sim_reports: tuple[Path, ...] = ()
    usage_weight: float = 0.5
    live_poll_s: float = 0.5  # how often the change watcher asks the database
    live_refresh_s: float = 5.0  # a live page re-renders at least this often (ages, ETAs)


class Respond(Exception):
    """Raised by a dependency to answer with `response` instead of the page."""

    def __init__(self, response: Response) -> None:
        super().__init__("respond")
        self.response = response


# ---- templates ------------------------------------------------------------------------------


def _when(ts: float | None) -> Markup:
    """A point in time: `<time>` in UTC (the page's script shows it in local time)."""
    if ts is None:
        return Markup("&ndash;")
    moment = dt.datetime.fromtimestamp(ts, dt.UTC)
    return Markup('<time datetime="{}">{}</time>').format(
        moment.isoformat(timespec="seconds"), moment.strftime("%Y-%m-%d %H:%M:%S UTC")
    )


def duration(seconds: float | None) -> str:
    """`45 s`, `12 min`, `3.5 h`, `2.1 d`."""
    if seconds is None or not math.isfinite(seconds):
        return "–"
    s = abs(seconds)
    if s < 90:
        text = f"{s:.0f} s"
    elif s < 90 * 60:
        text = f"{s / 60:.0f} min"
    elif s < 48 * 3600:
        text = f"{s / 3600:.1f} h"
    else:
        text = f"{s / 86400:.1f} d"
    return f"-{text}" if seconds < 0 else text


def _number(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "–"
    if abs(value) >= 1e6:
        return f"{value:.3g}"
    return f"{value:,.{digits}f}" if value != int(value) else f"{int(value):,}"


def job_hue(job_id: str) -> int:
    """A stable hue (0-359) per job, for its colour on the cluster map."""
    return int(hashlib.sha1(job_id.encode()).hexdigest()[:6], 16) % 360


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(when=_when, duration=duration, number=_number, hue=job_hue)
    env.globals.update(static=STATIC_PATH, version=__version__)
    return env


TEMPLATES = _environment()


def render_block(name: str, block: str, values: dict[str, Any]) -> str:
    """One block of a template (a live region), rendered with the page's values."""
    template = TEMPLATES.get_template(name)
    return "".join(template.blocks[block](template.new_context(values)))


# ---- who is looking -------------------------------------------------------------------------


def settings(request: Request) -> ConsoleSettings:
    found: ConsoleSettings = request.app.state.console
    return found


def _login_redirect(request: Request, message: str = "") -> RedirectResponse:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    from urllib.parse import urlencode

    query = {"next": target} | ({"message": message} if message else {})
    return RedirectResponse(f"/login?{urlencode(query)}", status_code=303)


async def page_user(request: Request) -> Principal:
    """The caller of a page: from the session cookie (after logging in by `?token=`)."""
    if "token" in request.query_params:
        from trainyard.server.console.login import login_by_link

        raise Respond(await login_by_link(request))
    if not request.cookies.get(SESSION_COOKIE):
        raise Respond(_login_redirect(request))
    ctx = context(request)
    try:
        return await ctx.caller(request, ctx.clock())
    except ApiError:
        response = _login_redirect(request, "your session has ended; log in again")
        response.delete_cookie(SESSION_COOKIE, path="/")
        raise Respond(response) from None


# ---- pages ----------------------------------------------------------------------------------


@dataclass
class Page:
    """A page to render: its template, what it shows, and which of its blocks are live."""

    template: str
    build: Callable[[Session, float], dict[str, Any]]
    live: tuple[str, ...] = ()
    title: str = ""
    nav: str = ""
    status: int = 200
    extra: dict[str, Any] = field(default_factory=dict)


def base_values(request: Request, who: Principal, page: Page) -> dict[str, Any]:
    cookie = request.cookies.get(SESSION_COOKIE, "")
    return {
        "who": who,
        "csrf": csrf_token(cookie) if cookie else "",
        "title": page.title,
        "nav": page.nav,
        "path": request.url.path,
        "query": request.url.query,
        "live_blocks": page.live,
        **page.extra,
    }


def build_values(ctx: ApiContext, page: Page) -> dict[str, Any]:
    now = ctx.clock()
    with ctx.sessions() as session:
        values = page.build(session, now)
    values["now"] = now
    return values


async def show(request: Request, who: Principal, page: Page) -> Response:
    """The page, or its live stream when the browser asks for `text/event-stream`."""
    ctx = context(request)
    base = base_values(request, who, page)
    if "text/event-stream" in request.headers.get("accept", "") and page.live:
        from trainyard.server.console.live import stream_page

        return stream_page(request, page, base)
    started = time.perf_counter()
    values = await run_in_threadpool(build_values, ctx, page)
    body = TEMPLATES.get_template(page.template).render(**base, **values)
    headers = dict(SECURITY_HEADERS)
    headers["Server-Timing"] = f"render;dur={(time.perf_counter() - started) * 1000:.1f}"
    return HTMLResponse(body, status_code=page.status, headers=headers)


def message_page(
    request: Request, who: Principal | None, status: int, title: str, message: str
) -> HTMLResponse:
    """A page saying what went wrong (a job that does not exist, a refused action)."""
    base = base_values(request, who, Page("message.html", lambda s, n: {}, title=title)) if who \
        else {"who": None, "csrf": "", "title": title, "nav": "", "live_blocks": ()}  # fmt: skip
    body = TEMPLATES.get_template("message.html").render(**base, status=status, message=message)
    return HTMLResponse(body, status_code=status, headers=SECURITY_HEADERS)


# ---- the router -----------------------------------------------------------------------------

# path -> what a page shows when its query parameters are refused (the error by its field)
InvalidHandler = Callable[[Request, ApiError], Awaitable[Response]]
ON_INVALID: dict[str, InvalidHandler] = {}


class ConsoleRoute(APIRoute):
    """A console route: refused query parameters render the page with the API's error
    (through `ON_INVALID`, as does a service's error naming a field: a filter naming an
    unknown user), any other `ApiError` of a service becomes a message page."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        path = self.path

        async def handle(request: Request) -> Response:
            try:
                return await handler(request)
            except Respond as answer:
                return answer.response
            except RequestValidationError as exc:
                error = validation_error(exc.errors())
                fallback = ON_INVALID.get(path)
                if fallback is not None:
                    return await fallback(request, error)
                return message_page(request, None, error.status, "Bad request",
                                    f"{error.field}: {error.message}")  # fmt: skip
            except ApiError as error:
                fallback = ON_INVALID.get(path) if error.field else None
                if fallback is not None:  # a filter the service refused (an unknown user)
                    return await fallback(request, error)
                who = None
                with contextlib.suppress(Respond):
                    who = await page_user(request)
                title = {403: "Not allowed", 404: "Not found"}.get(error.status, "Error")
                return message_page(request, who, error.status, title, error.message)

        return handle


def install(app: FastAPI, console: ConsoleSettings | None = None) -> None:
    """Add the console's pages, live streams and static files to the API's app."""
    from trainyard.server.console.login import router as login_router
    from trainyard.server.console.pages import router as pages_router

    app.state.console = console or ConsoleSettings()
    app.include_router(login_router)
    app.include_router(pages_router)
    app.mount(STATIC_PATH, StaticFiles(directory=HERE / "static"), name="console-static")
