"""API tokens: issuing, verifying and revoking, storing only a hash.

A token reads `ty_<token_id>_<secret>`: `token_id` (12 hex characters) is a public lookup key
stored in clear, `secret` 32 random bytes (URL-safe base64). The database keeps
`sha256(token)` only, so a stolen database yields no usable token; verification looks the row
up by `token_id` and compares hashes in constant time. Time is passed in (`now`).
`last_used_at` is kept to the minute. A job-scoped token (`job_id` set, issued at launch)
is valid only while its job is STARTING or RUNNING.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from sqlalchemy import select
from sqlalchemy.orm import Session

from trainyard.server.db.base import JobState
from trainyard.server.db.jobs import Job
from trainyard.server.db.tenancy import ApiToken, User

PREFIX = "ty"
LAST_USED_RESOLUTION_S = 60.0


def hash_token(token: str) -> str:
    """The stored form of a token: its SHA-256, hex."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def parse_token_id(token: str) -> str | None:
    """The lookup id inside a token, or None when the text is not shaped like a token."""
    parts = token.split("_", 2)
    if len(parts) != 3 or parts[0] != PREFIX or len(parts[1]) != 12 or not parts[2]:
        return None
    return parts[1]


def issue_token(
    session: Session,
    user: User,
    *,
    now: float,
    name: str = "",
    expires_at: float | None = None,
    job_id: str | None = None,
) -> tuple[ApiToken, str]:
    """Create a token for `user`; returns the row and the token text (shown once, never stored)."""
    token_id = secrets.token_hex(6)
    token = f"{PREFIX}_{token_id}_{secrets.token_urlsafe(32)}"
    row = ApiToken(
        token_id=token_id,
        secret_hash=hash_token(token),
        user=user,
        job_id=job_id,
        name=name,
        created_at=now,
        expires_at=expires_at,
    )
    session.add(row)
    session.flush()
    return row, token


def verify_token(session: Session, token: str, *, now: float) -> ApiToken | None:
    """The live token row for this text, or None (unknown, wrong secret, expired, revoked,
    or its user disabled). Records `last_used_at`."""
    token_id = parse_token_id(token)
    if token_id is None:
        return None
    row = session.scalars(select(ApiToken).where(ApiToken.token_id == token_id)).one_or_none()
    if row is None or not hmac.compare_digest(row.secret_hash, hash_token(token)):
        return None
    if row.revoked_at is not None or (row.expires_at is not None and row.expires_at <= now):
        return None
    if row.user.disabled:
        return None
    if row.job_id is not None and not _job_live(session, row.job_id):
        return None  # a job's token works while that job runs, not before or after
    if row.last_used_at is None or now - row.last_used_at >= LAST_USED_RESOLUTION_S:
        row.last_used_at = now  # coarse, so that reads do not all turn into writes
    return row


def _job_live(session: Session, job_id: str) -> bool:
    state = session.scalar(select(Job.state).where(Job.id == job_id))
    return state in (JobState.STARTING, JobState.RUNNING)


def revoke_token(session: Session, row: ApiToken, *, now: float) -> None:
    """Make a token unusable from `now` on (the row stays for the audit trail)."""
    if row.revoked_at is None:
        row.revoked_at = now
    session.flush()
