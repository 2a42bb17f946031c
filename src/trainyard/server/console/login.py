"""Logging in and out of the console.

- `/?token=T` (any page, in fact): T is a one-time login code (`trainyard up`,
  `trainyard console`) or an API token; the browser gets a console session
  (`services/logins.py`) in an HttpOnly, SameSite=Lax cookie and is redirected to the same
  address without the token, so it stays out of the history, bookmarks and screenshots.
  Only a link opened from outside the browser (a terminal, a mail client: `Sec-Fetch-Site:
  none`) or from this site logs in at once. One that another site opened, a page of another
  port of the same host included, shows the login form with the token filled in instead: a
  click on this site's button logs in. Otherwise any page could log a visitor in as the
  page's author, whose account would then receive what the visitor submits (login CSRF).
- `/login`: a form for the same (a token pasted rather than put in a link). Its POST must
  come from this origin (no login forced on a browser by another site).
- `POST /logout`: revokes the session (a form of this origin with the page's CSRF token) and
  clears the cookie; from another origin it is refused and changes nothing.
- A login link that is not followed leaves the address at once all the same: the page's
  script takes `token` out of it (`history.replaceState`).
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from trainyard.server.api.auth import SESSION_COOKIE, same_origin
from trainyard.server.api.errors import ApiError
from trainyard.server.api.routes import ApiContext, context
from trainyard.server.console.web import SECURITY_HEADERS, TEMPLATES, ConsoleRoute
from trainyard.server.services import logins

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)
MAX_FORM_BYTES = 16 * 1024


def _safe_next(target: str | None) -> str:
    """Where to go after logging in: a path of this site only (never `//elsewhere`)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def _login_page(
    status: int, *, message: str = "", error: str = "", next_: str = "/", token: str = ""
) -> Response:
    body = TEMPLATES.get_template("login.html").render(
        who=None, csrf="", title="Log in", nav="", live_blocks=(), message=message, error=error,
        next=_safe_next(next_), token=token,
    )  # fmt: skip
    return HTMLResponse(body, status_code=status, headers=SECURITY_HEADERS)


def _start(ctx: ApiContext, credential: str) -> logins.Login:
    now = ctx.clock()
    with ctx.sessions() as session:
        try:
            login = logins.log_in(session, credential, now=now)
            session.commit()
        except BaseException:
            session.rollback()
            raise
    return login


def _with_cookie(request: Request, response: Response, login: logins.Login, now: float) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        login.token,
        max_age=max(1, int(login.expires_at - now)),
        path="/",
        httponly=True,
        samesite="lax",
        secure=request.url.scheme == "https",
    )


async def login_by_link(request: Request) -> Response:
    """Log in with the link's `token`, then go to the same address without it."""
    ctx = context(request)
    credential = request.query_params.get("token", "")
    rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
    target = request.url.path + (f"?{urlencode(rest)}" if rest else "")
    if request.headers.get("sec-fetch-site", "none") not in ("none", "same-origin"):
        message = (
            "This login link was opened by another site, so it did not log you in. Log in "
            "below only if you meant to: the console then shows the token's user."
        )
        return _login_page(200, message=message, next_=target, token=credential)
    try:
        login = await run_in_threadpool(_start, ctx, credential)
    except ApiError as error:
        return _login_page(401, error=f"This link did not log you in: {error.message}.",
                           next_=target)  # fmt: skip
    response = RedirectResponse(target, status_code=303)
    _with_cookie(request, response, login, ctx.clock())
    response.headers.update(SECURITY_HEADERS)
    return response


@router.get("/login")
async def login_form(request: Request) -> Response:
    params = request.query_params
    return _login_page(200, message=params.get("message", ""), next_=params.get("next", "/"))


async def _form(request: Request) -> dict[str, str]:
    """The fields of an urlencoded form body (first value of each)."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise ApiError(413, f"the form is larger than {MAX_FORM_BYTES} bytes", field="")
    fields = parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True)
    return {k: v[0] for k, v in fields.items()}


@router.post("/login")
async def login_submit(request: Request) -> Response:
    ctx = context(request)
    form = await _form(request)
    next_ = _safe_next(form.get("next"))
    if not same_origin(request):
        return _login_page(403, error="A login from another site was refused.", next_=next_)
    credential = form.get("token", "").strip()
    if not credential:
        return _login_page(422, error="token: paste an API token or a login code",
                           next_=next_)  # fmt: skip
    try:
        login = await run_in_threadpool(_start, ctx, credential)
    except ApiError as error:
        return _login_page(401, error=f"token: {error.message}", next_=next_)
    response = RedirectResponse(next_, status_code=303)
    _with_cookie(request, response, login, ctx.clock())
    return response


def _end(ctx: ApiContext, token: str) -> None:
    with ctx.sessions() as session:
        if logins.log_out(session, token, now=ctx.clock()):
            session.commit()
    ctx.tokens.clear()  # a cached copy must not outlive the session


@router.post("/logout")
async def logout(request: Request) -> Response:
    ctx = context(request)
    token = request.cookies.get(SESSION_COOKIE, "")
    form = await _form(request)
    if not same_origin(request) or (token and not logins.csrf_ok(token, form.get("csrf"))):
        # (another site's form arrives without the cookie, SameSite=Lax: clearing it then
        # would log the visitor out without ending the session; outside review 11, F2)
        return _login_page(403, error="A logout without this page's CSRF token was refused.")
    if token:
        await run_in_threadpool(_end, ctx, token)
    response = RedirectResponse("/login?message=" + "you+are+logged+out", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="lax")
    return response
