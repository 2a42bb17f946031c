"""Idempotent submit: a retried `POST /v1/jobs` with the same `Idempotency-Key` gets the job
its first attempt created, never a second one.

Keys are per user: 1 to 255 visible ASCII characters, chosen by the client (the CLI sends a
random UUID and retries with it when an answer is lost). The job row keeps the key and a
digest of the request (content type and body). A submission whose key its user already used:
- with the same digest, is answered 201 with that job's id and current state, and the header
  `Idempotent-Replayed: true` (nothing is stored);
- with another digest, is refused (422 on `Idempotency-Key`): a key names one request.
Two racing submissions with one key meet at the unique index on (user_id, submit_key): the
loser is answered as a replay of the winner.
"""

from __future__ import annotations

import hashlib
from typing import Final

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from trainyard.server.api.errors import ApiError
from trainyard.server.db.base import JobState
from trainyard.server.db.jobs import Job

HEADER: Final = "Idempotency-Key"
PATTERN: Final = r"^[!-~]{1,255}$"


def digest(body: bytes, content_type: str) -> str:
    media = content_type.split(";", 1)[0].strip().lower().encode()
    return hashlib.sha256(media + b"\n" + body).hexdigest()


def find(
    sessions: sessionmaker[Session], user_id: int | None, key: str, request_digest: str
) -> tuple[str, JobState, list[str] | None] | None:
    """The job `user_id` submitted with `key` (id, state, and for an array its member ids:
    the id is then the array's), or None; 422 if that submission was another request."""
    if user_id is None:
        return None
    with sessions() as s:
        row = s.execute(
            select(Job.id, Job.state, Job.submit_digest, Job.array_id).where(
                Job.user_id == user_id, Job.submit_key == key
            )
        ).first()
        members = None
        if row is not None and row.array_id is not None:
            query = select(Job.id).where(Job.array_id == row.array_id)
            members = list(s.scalars(query.order_by(Job.array_index)))
    if row is None:
        return None
    if row.submit_digest != request_digest:
        raise ApiError(
            422,
            f"this key was used for another submission (job {row.id}); send a new key for a "
            "new job",
            field=HEADER,
        )
    if row.array_id is not None:
        return str(row.array_id), JobState.PENDING, members
    return str(row.id), JobState(row.state), None
