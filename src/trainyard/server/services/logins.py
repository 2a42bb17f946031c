"""Logging a browser in to the web console: one-time login codes and console sessions.

- A **login code** (`tyc_<secret>`) logs a browser in once, within `CODE_TTL_S` of being
  issued: `trainyard up` prints a link with one at start, `trainyard console` prints a new
  one. Only its SHA-256 is stored (`db/logins.py`); redeeming it marks it used in the same
  statement that checks it is unused, so two browsers racing with one code get one session.
- An **API token** in the link (`/?token=ty_...`) logs the browser in as the token's user;
  a job-scoped token may not (it reads one job, while that job runs).
- A **console session** is an API token of its own (named `CONSOLE_SESSION`, valid
  `SESSION_TTL_S`), kept in the browser's HttpOnly cookie: verifying it is the API's own
  token check (expiry, revocation, disabled users, the token cache), its principal has the
  user's role and tenant, and it shows up in the user's token list, where it can be revoked.
  Logging out revokes it. The token the browser was opened with never reaches the cookie.
- The **CSRF token** of a session is derived from it (`csrf_token`), so it needs no storage:
  a page carries it, and every write made with the cookie must send it back
  (`api/auth.py` checks it).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from trainyard.server.api.auth import CONSOLE_SESSION
from trainyard.server.api.errors import ApiError, unauthorized
from trainyard.server.db.base import Role
from trainyard.server.db.logins import LoginCode
from trainyard.server.db.tenancy import ApiToken, User
from trainyard.server.db.tokens import hash_token, issue_token, revoke_token, verify_token
from trainyard.server.services import audit

CODE_PREFIX = "tyc_"
CODE_TTL_S = 15 * 60.0
SESSION_TTL_S = 12 * 3600.0
_CSRF_LABEL = b"trainyard console csrf v1"


@dataclass(frozen=True)
class Login:
    """A new console session: the token for the cookie, its lifetime, who it is."""

    token: str
    expires_at: float
    user: str
    role: Role


def issue_code(session: Session, user_name: str, *, now: float, ttl_s: float = CODE_TTL_S) -> str:
    """A new one-time login code for `user_name` (committed by the caller); an `ApiError`
    naming `user` when there is no such enabled user."""
    user = session.scalars(select(User).where(User.name == user_name)).one_or_none()
    if user is None or user.disabled:
        state = "is disabled" if user is not None else "does not exist"
        raise ApiError(422, f"user {user_name!r} {state}", field="user")
    code = CODE_PREFIX + secrets.token_urlsafe(24)
    session.add(
        LoginCode(code_hash=hash_token(code), user=user, created_at=now, expires_at=now + ttl_s)
    )
    session.flush()
    return code


def link_user(session: Session, admin_token: str, *, now: float) -> str:
    """Whom a login link is for by default: the user of the server's admin token (the
    bootstrapped `admin`, unless the operator replaced it), else `admin`."""
    row = verify_token(session, admin_token, now=now) if admin_token else None
    return row.user.name if row is not None else "admin"


def _redeem_code(session: Session, code: str, *, now: float) -> User:
    digest = hash_token(code)
    spent = session.execute(
        update(LoginCode)
        .where(LoginCode.code_hash == digest, LoginCode.used_at.is_(None))
        .where(LoginCode.expires_at > now)
        .values(used_at=now)
    )
    row = session.scalars(select(LoginCode).where(LoginCode.code_hash == digest)).one_or_none()
    if not spent.rowcount or row is None or row.user.disabled:  # type: ignore[attr-defined]
        raise unauthorized("invalid, expired or already used login code")
    return row.user


def log_in(session: Session, credential: str, *, now: float) -> Login:
    """A console session for whoever `credential` (a login code or an API token) names;
    a 401 `ApiError` for anything else (committed by the caller)."""
    credential = credential.strip()
    if credential.startswith(CODE_PREFIX):
        user = _redeem_code(session, credential, now=now)
        how = "login code"
    else:
        row = verify_token(session, credential, now=now)
        if row is None:
            raise unauthorized("invalid, expired or revoked token")
        if row.job_id is not None:
            raise unauthorized("a job-scoped token cannot log in to the console")
        user = row.user
        how = f"token {row.token_id}"
    expires = now + SESSION_TTL_S
    token_row, token = issue_token(session, user, now=now, name=CONSOLE_SESSION, expires_at=expires)
    audit.record(
        session, actor=user.name, user_id=user.id, tenant_id=user.tenant_id,
        action="console.login", target=token_row.token_id, now=now, details={"with": how},
    )  # fmt: skip
    return Login(token=token, expires_at=expires, user=user.name, role=Role(user.role))


def log_out(session: Session, token: str, *, now: float) -> bool:
    """Revoke the console session `token`; False when it is no live console session (an
    API token sent as a cookie is never revoked here)."""
    row = verify_token(session, token, now=now)
    if row is None or row.name != CONSOLE_SESSION or row.job_id is not None:
        return False
    revoke_token(session, row, now=now)
    audit.record(
        session, actor=row.user.name, user_id=row.user_id, tenant_id=row.user.tenant_id,
        action="console.logout", target=row.token_id, now=now,
    )  # fmt: skip
    return True


def csrf_token(session_token: str) -> str:
    """The CSRF token of a console session: an HMAC of a fixed label keyed by the session
    token, so only a page served to this session can know it."""
    return hmac.new(session_token.encode(), _CSRF_LABEL, hashlib.sha256).hexdigest()


def csrf_ok(session_token: str, sent: str | None) -> bool:
    return bool(sent) and hmac.compare_digest(csrf_token(session_token), str(sent))


def is_console_session(row: ApiToken) -> bool:
    return row.name == CONSOLE_SESSION and row.job_id is None
