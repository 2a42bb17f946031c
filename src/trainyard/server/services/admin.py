"""Operator administration on the database: tenants, users, roles, API tokens and queues.

Owns the service functions behind `trainyard admin` (run on the server's machine, straight on
the database, like `gitlab-rake` or `airflow users create`). Every function takes a
`Session`, checks all of its input before writing anything, flushes (never commits) and
returns plain dataclasses. Bad input raises `AdminError(field, message)`, the message naming
the fix; the caller then rolls back (`transaction` does both), so an error never changes the
database.

Queue rules, the core's (`trainyard.core.snapshot`) and the tree's: valid unique names;
`guaranteed >= 0`; `limit` None or `>= guaranteed`; `weight > 0`; the parent exists, outside
the queue's subtree (no cycle); under a parent with `guaranteed > 0` the children's guarantees
add up to at most the parent's; a queue under a tenant's queue is that tenant's. A queue is
deleted only without children and live jobs (FAILED with restarts left counts as live); its
finished jobs (history) go with it only when asked (`purge_finished`). A running server's
token cache (`trainyard.server.api.auth`) sees revocations and disabled users within seconds.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from trainyard.fields import MAX_DURATION_S
from trainyard.server.db import ApiToken, Queue, Role, Tenant, User
from trainyard.server.db.tokens import issue_token, revoke_token
from trainyard.server.services.admin_common import (
    NAME_PATTERN,
    NAME_RULE,
    UNSET,
    AdminError,
    Unset,
    check_name,
    transaction,
)
from trainyard.server.services.admin_common import find as _find
from trainyard.server.services.admin_common import flush as _flush
from trainyard.server.services.admin_queues import (
    QueueInfo,
    create_queue,
    delete_queue,
    list_queues,
    overcommit_warning,
    queue_warnings,
    unbacked_warning,
    update_queue,
)

TOKEN_NAME_MAX = 64
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw]?)")
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


@dataclass(frozen=True, slots=True)
class TenantInfo:
    name: str
    users: int
    queues: int
    created_at: float
    budget_gpu_hours: float | None = None  # per rolling `budget_period_s` (None: no budget)
    budget_period_s: float | None = None


@dataclass(frozen=True, slots=True)
class UserInfo:
    name: str
    tenant: str
    role: str
    disabled: bool
    tokens: int  # live personal tokens (not revoked, not expired)
    created_at: float


@dataclass(frozen=True, slots=True)
class IssuedToken:
    user: str
    tenant: str
    role: str
    token_id: str
    name: str
    expires_at: float | None
    token: str  # the only time the text exists outside its owner's hands


def _role(value: str | Role) -> Role:
    text = value.value if isinstance(value, Role) else str(value).strip().lower()
    try:
        return Role(text)
    except ValueError:
        known = ", ".join(r.value for r in Role)
        raise AdminError("role", f"unknown role {value!r}; use one of {known}") from None


def parse_duration(text: str, field: str = "expires_in") -> float:
    """Seconds in `30d`, `12h`, `90m`, `3600s`, `2w` or a plain number of seconds (> 0)."""
    match = _DURATION.fullmatch(str(text).strip().lower())
    seconds = float(match.group(1)) * _UNITS[match.group(2)] if match else 0.0
    if not match or seconds <= 0 or not math.isfinite(seconds):
        raise AdminError(field, f"write a positive duration such as 30d, 12h, 90m; got {text!r}")
    return seconds


def create_tenant(session: Session, name: str, *, now: float) -> TenantInfo:
    """A new tenant (no users, no queues yet)."""
    check_name("name", name, "tenant")
    if session.scalar(select(Tenant.id).where(Tenant.name == name)) is not None:
        raise AdminError("name", f"tenant {name!r} already exists; choose another name")
    session.add(Tenant(name=name, created_at=now))
    _flush(session, "name", f"tenant {name!r}")
    return TenantInfo(name=name, users=0, queues=0, created_at=now)


def list_tenants(session: Session) -> list[TenantInfo]:
    """Every tenant with its numbers of users and own queues, by name."""
    counts: Counter[tuple[str, int | None]] = Counter()
    for kind, column in (("users", User.tenant_id), ("queues", Queue.tenant_id)):
        for tenant_id, count in session.execute(select(column, func.count()).group_by(column)):
            counts[(kind, tenant_id)] = count
    return [
        TenantInfo(
            t.name,
            counts[("users", t.id)],
            counts[("queues", t.id)],
            t.created_at,
            t.budget_gpu_hours,
            t.budget_period_s,
        )
        for t in session.scalars(select(Tenant).order_by(Tenant.name))
    ]


def set_budget(
    session: Session, name: str, *, gpu_hours: float | None, period_s: float | None
) -> TenantInfo:
    """Give tenant `name` a budget of `gpu_hours` per rolling `period_s` (None: remove it).
    New work of the tenant waits while its usage in the period reaches it."""
    tenant = _find(session, Tenant, name, "tenant")
    if gpu_hours is not None and not (0 <= gpu_hours < 1e12 and math.isfinite(gpu_hours)):
        raise AdminError("gpu_hours", f"must be a number of GPU-hours >= 0, got {gpu_hours}")
    if period_s is not None and not (60 <= period_s <= 10 * 366 * 86_400):
        raise AdminError("period", "must be between a minute and ten years")
    tenant.budget_gpu_hours = gpu_hours
    tenant.budget_period_s = period_s if gpu_hours is not None else None
    session.flush()
    return next(t for t in list_tenants(session) if t.name == name)


def _live_tokens(session: Session, now: float) -> dict[int, int]:
    unexpired = or_(ApiToken.expires_at.is_(None), ApiToken.expires_at > now)
    live = (ApiToken.job_id.is_(None), ApiToken.revoked_at.is_(None), unexpired)
    query = select(ApiToken.user_id, func.count()).where(*live).group_by(ApiToken.user_id)
    return {user_id: count for user_id, count in session.execute(query)}


def _user_info(user: User, tokens: int) -> UserInfo:
    role = Role(user.role).value
    return UserInfo(user.name, user.tenant.name, role, user.disabled, tokens, user.created_at)


def create_user(
    session: Session, tenant: str, name: str, role: str | Role = Role.MEMBER, *, now: float
) -> UserInfo:
    """A new user of `tenant` with `role` (admin, member or viewer); user names are global."""
    check_name("name", name, "user")
    owner = _find(session, Tenant, tenant, "tenant")
    granted = _role(role)
    existing = session.scalars(select(User).where(User.name == name)).one_or_none()
    if existing is not None:
        raise AdminError(
            "name",
            f"user {name!r} already exists (tenant {existing.tenant.name!r}); user names are "
            "unique across tenants: choose another",
        )
    user = User(tenant=owner, name=name, role=granted, created_at=now)
    session.add(user)
    _flush(session, "name", f"user {name!r}")
    return _user_info(user, 0)


def list_users(session: Session, tenant: str | None = None, *, now: float) -> list[UserInfo]:
    """Users (of one tenant, or all), by tenant then name, with their live token counts."""
    query = select(User).join(Tenant, User.tenant_id == Tenant.id)
    if tenant is not None:
        query = query.where(User.tenant_id == _find(session, Tenant, tenant, "tenant").id)
    tokens = _live_tokens(session, now)
    rows = session.scalars(query.order_by(Tenant.name, User.name))
    return [_user_info(u, tokens.get(u.id, 0)) for u in rows]


def set_role(session: Session, user: str, role: str | Role, *, now: float) -> UserInfo:
    """Give `user` another role inside their tenant."""
    row = _find(session, User, user, "user")
    row.role = _role(role)
    session.flush()
    return _user_info(row, _live_tokens(session, now).get(row.id, 0))


def _set_disabled(session: Session, user: str, disabled: bool, now: float) -> UserInfo:
    row = _find(session, User, user, "user")
    row.disabled = disabled
    session.flush()
    return _user_info(row, _live_tokens(session, now).get(row.id, 0))


def disable_user(session: Session, user: str, *, now: float) -> UserInfo:
    """Lock `user` out: none of their tokens (job tokens included) authenticates any more."""
    return _set_disabled(session, user, True, now)


def enable_user(session: Session, user: str, *, now: float) -> UserInfo:
    """Let a disabled user in again (their unrevoked, unexpired tokens work again)."""
    return _set_disabled(session, user, False, now)


def issue_user_token(
    session: Session, user: str, *, now: float, name: str = "", expires_in_s: float | None = None
) -> IssuedToken:
    """A new personal API token of `user`; the text is in the result, and nowhere else."""
    row = _find(session, User, user, "user")
    if row.disabled:
        raise AdminError(
            "user",
            f"user {user!r} is disabled, so a token would not work; "
            f"enable it first: trainyard admin user enable {user}",
        )
    if len(name) > TOKEN_NAME_MAX:
        raise AdminError("name", f"a token name has at most {TOKEN_NAME_MAX} characters")
    if expires_in_s is not None and not 0 < expires_in_s <= MAX_DURATION_S:  # as the API's
        raise AdminError(
            "expires_in",
            f"must be a positive number of seconds up to ten years (3650d), got {expires_in_s:g}",
        )
    expires_at = now + expires_in_s if expires_in_s is not None else None
    token_row, token = issue_token(session, row, now=now, name=name, expires_at=expires_at)
    role = Role(row.role).value
    return IssuedToken(row.name, row.tenant.name, role, token_row.token_id, name, expires_at, token)


def revoke_user_tokens(
    session: Session, user: str, *, now: float, token_id: str | None = None
) -> list[str]:
    """Revoke `user`'s live personal tokens (or only `token_id`); returns the ids revoked.
    Job-scoped tokens are left to their jobs (disable the user to stop those too)."""
    row = _find(session, User, user, "user")
    query = select(ApiToken).where(
        ApiToken.user_id == row.id, ApiToken.job_id.is_(None), ApiToken.revoked_at.is_(None)
    )
    if token_id is not None:
        query = query.where(ApiToken.token_id == token_id)
        if session.scalars(query).first() is None:
            raise AdminError("token_id", f"user {user!r} has no live token {token_id!r}")
    revoked = []
    for token in session.scalars(query.order_by(ApiToken.id)):
        revoke_token(session, token, now=now)
        revoked.append(token.token_id)
    return revoked


__all__ = [
    "NAME_PATTERN",
    "NAME_RULE",
    "UNSET",
    "AdminError",
    "QueueInfo",
    "Unset",
    "check_name",
    "create_queue",
    "delete_queue",
    "list_queues",
    "overcommit_warning",
    "queue_warnings",
    "transaction",
    "unbacked_warning",
    "update_queue",
]
