"""A tenant as its admin sees it through the API's callers (the console's admin page): the
tenant's budget and users. Only a tenant admin may read it; operators manage tenants and
users with `trainyard admin` (`services/admin.py`)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from trainyard.server.api.auth import Principal
from trainyard.server.db.base import Role
from trainyard.server.db.tenancy import ApiToken, Tenant, User


@dataclass(frozen=True)
class UserRow:
    name: str
    role: Role
    disabled: bool
    created_at: float
    tokens: int  # live API tokens (not revoked, not expired, not job-scoped)


@dataclass(frozen=True)
class TenantView:
    name: str
    created_at: float
    budget_gpu_hours: float | None
    budget_period_s: float | None
    users: list[UserRow]


def tenant_view(session: Session, who: Principal, *, now: float) -> TenantView:
    """The caller's tenant with its users (a 403 for anyone but its admins)."""
    who.require_admin("see the tenant's users")
    tenant = session.get(Tenant, who.tenant_id)
    assert tenant is not None
    live = (
        select(ApiToken.user_id, func.count())
        .where(ApiToken.revoked_at.is_(None), ApiToken.job_id.is_(None))
        .where((ApiToken.expires_at.is_(None)) | (ApiToken.expires_at > now))
        .group_by(ApiToken.user_id)
    )
    counts = {user_id: int(n) for user_id, n in session.execute(live)}
    users = session.scalars(select(User).where(User.tenant_id == who.tenant_id).order_by(User.name))
    return TenantView(
        name=tenant.name,
        created_at=tenant.created_at,
        budget_gpu_hours=tenant.budget_gpu_hours,
        budget_period_s=tenant.budget_period_s,
        users=[
            UserRow(u.name, Role(u.role), u.disabled, u.created_at, counts.get(u.id, 0))
            for u in users
        ],
    )
