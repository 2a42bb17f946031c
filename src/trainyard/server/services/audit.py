"""The audit trail: an append-only record of who did what and when.

Recorded in the same transaction as the change itself (so a change and its entry stand or
fall together): through the API, job submits (with the group commit), cancels, token
creation and revocation; through `trainyard admin`, every command that changes something
(tenants, users and their roles, enabling and disabling, tokens, queues, node drains).
Rows are never updated or deleted (database triggers refuse it). Read with `GET /v1/audit`
(an admin sees its tenant's entries: an operator's change is its tenant's when it concerns
the tenant, one of its users or their tokens, or one of its queues) and `trainyard admin
audit` (every entry).
"""

from __future__ import annotations

import getpass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from trainyard.server.db.audit import AuditEvent


def operator() -> str:
    """The actor name of a `trainyard admin` command: the OS login running it."""
    try:
        return f"os:{getpass.getuser()}"
    except (KeyError, OSError):
        return "os:unknown"


def row(
    *,
    actor: str,
    action: str,
    target: str,
    now: float,
    user_id: int | None = None,
    tenant_id: int | None = None,
    details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An entry as a plain row (for bulk inserts)."""
    return {
        "time": now, "actor": actor[:128], "user_id": user_id, "tenant_id": tenant_id,
        "action": action, "target": target[:255], "details": details or {},
    }  # fmt: skip


def record(session: Session, **fields: Any) -> None:
    """Add an entry to the caller's transaction (the arguments of `row`)."""
    session.add(AuditEvent(**row(**fields)))


def events(
    session: Session, *, tenant_id: int | None, since: float = 0.0, limit: int = 100
) -> tuple[list[AuditEvent], bool]:
    """Entries from `since`, oldest first, at most `limit`, and whether more exist (all
    tenants' and the operator's when `tenant_id` is None)."""
    query = select(AuditEvent).where(AuditEvent.time >= since)
    if tenant_id is not None:
        query = query.where(AuditEvent.tenant_id == tenant_id)
    rows = list(session.scalars(query.order_by(AuditEvent.id).limit(limit + 1)))
    return rows[:limit], len(rows) > limit
