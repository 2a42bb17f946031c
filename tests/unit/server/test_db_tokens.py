"""API tokens are stored as a lookup id plus a SHA-256 hash, never in clear, on both databases."""

from __future__ import annotations

import hashlib

from server_factories import World
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from trainyard.server.db import ApiToken, JobState
from trainyard.server.db.tokens import (
    hash_token,
    issue_token,
    parse_token_id,
    revoke_token,
    verify_token,
)


def _all_stored_text(session: Session) -> str:
    rows = session.execute(text("SELECT * FROM api_tokens")).all()
    return " ".join(str(value) for row in rows for value in row)


def test_tokens_are_stored_hashed_and_verify(session: Session, world: World) -> None:
    row, token = issue_token(session, world.user, now=10.0, name="laptop")
    other_row, other = issue_token(session, world.user, now=10.0)
    session.commit()
    assert token != other and row.token_id != other_row.token_id
    assert token.startswith(f"ty_{row.token_id}_") and len(token) > 50
    secret = token.split("_", 2)[2]
    stored = _all_stored_text(session)
    assert token not in stored and secret not in stored
    assert row.secret_hash == hashlib.sha256(token.encode()).hexdigest() == hash_token(token)

    found = verify_token(session, token, now=20.0)
    assert found is not None and found.id == row.id and found.user.name == "ada"
    assert found.last_used_at == 20.0
    assert verify_token(session, other, now=20.0) is other_row


def test_wrong_or_malformed_tokens_are_refused(session: Session, world: World) -> None:
    _, token = issue_token(session, world.user, now=10.0)
    session.commit()
    token_id = parse_token_id(token)
    assert token_id is not None
    tampered = token[:-1] + ("A" if token[-1] != "A" else "B")
    for bad in [tampered, f"ty_{'0' * 12}_{token.split('_', 2)[2]}", "", "Bearer x",
                f"ty_{token_id}_", "ty_short_secret", token + "x"]:  # fmt: skip
        assert verify_token(session, bad, now=11.0) is None, bad


def test_expired_revoked_and_disabled(session: Session, world: World) -> None:
    _, expiring = issue_token(session, world.user, now=10.0, expires_at=100.0)
    revoked_row, revoked = issue_token(session, world.user, now=10.0)
    _, plain = issue_token(session, world.user, now=10.0)
    session.commit()
    assert verify_token(session, expiring, now=99.0) is not None
    assert verify_token(session, expiring, now=100.0) is None
    revoke_token(session, revoked_row, now=50.0)
    session.commit()
    assert verify_token(session, revoked, now=51.0) is None
    assert session.scalars(select(ApiToken).where(ApiToken.id == revoked_row.id)).one()
    world.user.disabled = True
    session.commit()
    assert verify_token(session, plain, now=60.0) is None


def test_job_scoped_tokens_die_with_their_job(session: Session, world: World) -> None:
    job = world.job(session)
    _, token = issue_token(session, world.user, now=10.0, job_id=job.id, name="job")
    session.commit()
    assert verify_token(session, token, now=11.0) is None  # PENDING: not running yet
    for state in (JobState.STARTING, JobState.RUNNING):
        job.state = state
        session.commit()
        found = verify_token(session, token, now=11.0)
        assert found is not None and found.job_id == job.id
    job.state = JobState.SUCCEEDED
    session.commit()
    assert verify_token(session, token, now=11.5) is None  # finished: the token is dead
    session.delete(job)
    session.commit()
    session.expire_all()
    assert verify_token(session, token, now=12.0) is None
    assert session.scalars(select(ApiToken)).all() == []
