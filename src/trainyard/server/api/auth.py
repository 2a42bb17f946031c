"""Who is calling: `Authorization: Bearer <token>`, verified against the stored hash.

Roles act inside the caller's tenant: a viewer reads, a member also submits and cancels, an
admin may do everything. Another tenant's jobs do not exist for the caller (404, never 403,
so their existence does not leak).

`TokenCache` keeps verified user tokens for a few seconds (keyed by the token's hash, never
the token), so a burst of requests verifies once. A token revoked through this server is
dropped at once; one revoked or a user disabled elsewhere (`trainyard admin`) stops working
within `ttl_s`. Job-scoped tokens are never cached: they end with their job.

The web console's browsers send their session token (an API token, `services/logins.py`) in
the HttpOnly cookie `SESSION_COOKIE` instead of the header: `authorization` turns it into
the same `Bearer` credential, so the console is the API's callers with the API's rules. The
cookie holds a console session and nothing else (`check_cookie`): an API token or a job's own
token set as the cookie by hand is refused with 401, so a job-scoped token cannot reach the
console's pages, which show what the tenant may read (found by an outside review: a job's
token read its tenant's usage through the Usage page). A write (any method but GET, HEAD,
OPTIONS) made with the cookie must carry the session's CSRF token in `CSRF_HEADER` and must
not come from another origin; otherwise 403.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from sqlalchemy.orm import Session
from starlette.requests import HTTPConnection

from trainyard.server.api.errors import forbidden, unauthorized
from trainyard.server.db.base import Role
from trainyard.server.db.tokens import hash_token, verify_token

_WRITE_ROLES = frozenset({Role.MEMBER, Role.ADMIN})
SESSION_COOKIE = "trainyard_session"
CSRF_HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# The name of the API token a console login issues (`services/logins.py`).
CONSOLE_SESSION = "console session"


@dataclass(frozen=True)
class Principal:
    """The authenticated caller."""

    user_id: int
    user_name: str
    tenant_id: int
    tenant_name: str
    role: Role
    job_id: str | None = None  # set for a job-scoped token
    console_session: bool = False  # the token is a console session (`services/logins.py`)

    def require_write(self, action: str) -> None:
        if self.role not in _WRITE_ROLES:
            raise forbidden(f"role {self.role.value} may not {action}; a member or admin may")
        if self.job_id is not None:
            raise forbidden(f"a job-scoped token may not {action}")

    def require_admin(self, action: str) -> None:
        if self.role != Role.ADMIN or self.job_id is not None:
            raise forbidden(f"only a tenant admin may {action}")


def authorization(request: HTTPConnection) -> str | None:
    """The request's credential as an `Authorization` header value: the header itself, else
    the console's session cookie (a write with the cookie must pass `check_csrf`)."""
    header = request.headers.get("authorization")
    if header:
        return header
    token = request.cookies.get(SESSION_COOKIE)
    if not token:
        return None
    method = request.scope.get("method", "GET")
    if method not in SAFE_METHODS:
        check_csrf(request, token)
    return f"Bearer {token}"


def check_cookie(request: HTTPConnection, who: Principal) -> None:
    """A 401 `ApiError` when the credential came in the session cookie and is not a console
    session (an API token or a job's token put there by hand)."""
    if request.headers.get("authorization") or not request.cookies.get(SESSION_COOKIE):
        return
    if not who.console_session:
        raise unauthorized(
            f"the {SESSION_COOKIE} cookie holds only a console session: open a login link "
            "(`trainyard console`); an API token goes in the Authorization header"
        )


def same_origin(request: HTTPConnection) -> bool:
    """False when the browser says the request comes from another site or origin."""
    if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is None:
        return True
    host = request.headers.get("host", "")
    return origin.split("://", 1)[-1] == host


def check_csrf(request: HTTPConnection, session_token: str) -> None:
    """A 403 `ApiError` unless a write made with the session cookie carries the session's
    CSRF token and comes from the console's own origin."""
    from trainyard.server.services.logins import csrf_ok  # (it imports this package)

    if not same_origin(request):
        raise forbidden("cross-origin write refused: use the console's own pages")
    if not csrf_ok(session_token, request.headers.get(CSRF_HEADER)):
        raise forbidden(
            f"missing or wrong {CSRF_HEADER}: a write made with the console's cookie must "
            "send the token of the page it comes from (reload the page)"
        )


def bearer(authorization: str | None) -> str:
    """The token in an `Authorization` header, or a 401 `ApiError`."""
    if not authorization:
        raise unauthorized("missing Authorization header; send 'Authorization: Bearer <token>'")
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise unauthorized("the Authorization header must read 'Bearer <token>'")
    return token.strip()


class TokenCache:
    """Recently verified user tokens (see the module docstring)."""

    def __init__(self, ttl_s: float = 10.0, max_entries: int = 10_000) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        # hash -> (monotonic deadline, the token's expires_at, principal)
        self._entries: dict[str, tuple[float, float | None, Principal]] = {}
        self._lock = threading.Lock()

    def get(self, token: str, *, now: float | None = None) -> Principal | None:
        """The cached principal; None once the entry aged out, or once `now` (the caller's
        clock, the one `expires_at` is measured by) reached the token's expiry."""
        key = hash_token(token)
        with self._lock:
            hit = self._entries.get(key)
        if hit is None or time.monotonic() >= hit[0]:
            return None
        if now is not None and hit[1] is not None and now >= hit[1]:
            return None
        return hit[2]

    def put(self, token: str, who: Principal, *, expires_at: float | None, now: float) -> None:
        if who.job_id is not None:
            return
        ttl = self.ttl_s if expires_at is None else min(self.ttl_s, expires_at - now)
        if ttl <= 0:
            return
        with self._lock:
            if len(self._entries) >= self.max_entries:
                self._entries.clear()
            self._entries[hash_token(token)] = (time.monotonic() + ttl, expires_at, who)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def authenticate(
    session: Session,
    authorization: str | None,
    *,
    now: float,
    cache: TokenCache | None = None,
) -> Principal:
    """The caller behind an `Authorization` header, or a 401 `ApiError`."""
    token = bearer(authorization)
    if cache is not None and (hit := cache.get(token, now=now)) is not None:
        return hit
    row = verify_token(session, token, now=now)
    if row is None:
        raise unauthorized("invalid, expired or revoked token")
    user = row.user
    who = Principal(
        user_id=user.id,
        user_name=user.name,
        tenant_id=user.tenant_id,
        tenant_name=user.tenant.name,
        role=Role(user.role),
        job_id=row.job_id,
        console_session=row.name == CONSOLE_SESSION and row.job_id is None,
    )
    if cache is not None:
        cache.put(token, who, expires_at=row.expires_at, now=now)
    return who
