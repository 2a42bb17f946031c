"""Who is calling: `Authorization: Bearer <token>`, verified against the stored hash.

Roles act inside the caller's tenant: a viewer reads, a member also submits and cancels, an
admin may do everything. Another tenant's jobs do not exist for the caller (404, never 403,
so their existence does not leak).

`TokenCache` keeps verified user tokens for a few seconds (keyed by the token's hash, never
the token), so a burst of requests verifies once. A token revoked through this server is
dropped at once; one revoked or a user disabled elsewhere (`trainyard admin`) stops working
within `ttl_s`. Job-scoped tokens are never cached: they end with their job.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from sqlalchemy.orm import Session

from trainyard.server.api.errors import forbidden, unauthorized
from trainyard.server.db.base import Role
from trainyard.server.db.tokens import hash_token, verify_token

_WRITE_ROLES = frozenset({Role.MEMBER, Role.ADMIN})


@dataclass(frozen=True)
class Principal:
    """The authenticated caller."""

    user_id: int
    user_name: str
    tenant_id: int
    tenant_name: str
    role: Role
    job_id: str | None = None  # set for a job-scoped token

    def require_write(self, action: str) -> None:
        if self.role not in _WRITE_ROLES:
            raise forbidden(f"role {self.role.value} may not {action}; a member or admin may")
        if self.job_id is not None:
            raise forbidden(f"a job-scoped token may not {action}")


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
    )
    if cache is not None:
        cache.put(token, who, expires_at=row.expires_at, now=now)
    return who
