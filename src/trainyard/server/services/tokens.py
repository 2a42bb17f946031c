"""API tokens through the API: a user creates, lists and revokes their own tokens; an admin
also those of their tenant's users. Job-scoped tokens (issued by the executor at launch) may
do none of this."""

from __future__ import annotations

import re

from sqlalchemy import select
from sqlalchemy.orm import Session

import trainyard.server.api.schemas as schemas
from trainyard.server.api.auth import Principal
from trainyard.server.api.errors import forbidden, not_found
from trainyard.server.db.base import Role
from trainyard.server.db.tenancy import ApiToken, User
from trainyard.server.db.tokens import issue_token, revoke_token
from trainyard.server.services import audit

_TOKEN_ID = re.compile(r"[0-9a-f]{12}")


def _out(row: ApiToken) -> schemas.TokenOut:
    return schemas.TokenOut(
        token_id=row.token_id,
        name=row.name,
        user=row.user.name,
        job_id=row.job_id,
        created_at=row.created_at,
        expires_at=row.expires_at,
        revoked_at=row.revoked_at,
        last_used_at=row.last_used_at,
    )


def _no_job_token(who: Principal, action: str) -> None:
    if who.job_id is not None:
        raise forbidden(f"a job-scoped token may not {action}")


def create_token(
    session: Session, who: Principal, body: schemas.TokenIn, *, now: float
) -> schemas.NewTokenOut:
    _no_job_token(who, "create tokens")
    user = session.get(User, who.user_id)
    assert user is not None
    expires = now + body.expires_in_s if body.expires_in_s is not None else None
    row, token = issue_token(session, user, now=now, name=body.name, expires_at=expires)
    audit.record(
        session, actor=who.user_name, user_id=who.user_id, tenant_id=who.tenant_id,
        action="token.create", target=row.token_id, now=now, details={"name": body.name},
    )  # fmt: skip
    return schemas.NewTokenOut(**_out(row).model_dump(), token=token)


def _visible(who: Principal) -> object:
    if who.role == Role.ADMIN:
        return User.tenant_id == who.tenant_id
    return User.id == who.user_id


def list_tokens(session: Session, who: Principal) -> schemas.TokenList:
    _no_job_token(who, "list tokens")
    query = (
        select(ApiToken)
        .join(User, ApiToken.user_id == User.id)
        .where(_visible(who))  # type: ignore[arg-type]
        .where(ApiToken.job_id.is_(None))
        .order_by(ApiToken.created_at, ApiToken.id)
    )
    return schemas.TokenList(tokens=[_out(row) for row in session.scalars(query)])


def revoke(session: Session, who: Principal, token_id: str, *, now: float) -> schemas.TokenOut:
    _no_job_token(who, "revoke tokens")
    row = None
    if _TOKEN_ID.fullmatch(token_id):
        row = session.scalars(
            select(ApiToken)
            .join(User, ApiToken.user_id == User.id)
            .where(ApiToken.token_id == token_id, _visible(who))  # type: ignore[arg-type]
        ).one_or_none()
    if row is None:
        raise not_found(f"token {token_id!r}")
    revoke_token(session, row, now=now)
    audit.record(
        session, actor=who.user_name, user_id=who.user_id, tenant_id=who.tenant_id,
        action="token.revoke", target=row.token_id, now=now,
    )  # fmt: skip
    return _out(row)
