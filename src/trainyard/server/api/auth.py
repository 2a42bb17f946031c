"""Who is calling: `Authorization: Bearer <token>`, verified against the stored hash.

Roles act inside the caller's tenant: a viewer reads, a member also submits and cancels, an
admin may do everything. Another tenant's jobs do not exist for the caller (404, never 403,
so their existence does not leak).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from trainyard.server.api.errors import forbidden, unauthorized
from trainyard.server.db.base import Role
from trainyard.server.db.tokens import verify_token

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


def authenticate(session: Session, authorization: str | None, *, now: float) -> Principal:
    """The caller behind an `Authorization` header, or a 401 `ApiError`."""
    if not authorization:
        raise unauthorized("missing Authorization header; send 'Authorization: Bearer <token>'")
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise unauthorized("the Authorization header must read 'Bearer <token>'")
    row = verify_token(session, token.strip(), now=now)
    if row is None:
        raise unauthorized("invalid, expired or revoked token")
    user = row.user
    return Principal(
        user_id=user.id,
        user_name=user.name,
        tenant_id=user.tenant_id,
        tenant_name=user.tenant.name,
        role=Role(user.role),
        job_id=row.job_id,
    )
