"""`AuditEvent`: one entry of the append-only audit trail (`services/audit.py`)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Index, String
from sqlalchemy.orm import Mapped, mapped_column

from trainyard.server.db.base import Base, Timestamp


class AuditEvent(Base):
    """`actor` did `action` to `target` at `time`. `actor` is an API user's name (`user_id`
    set) or `os:<login>` for an operator's `trainyard admin` command; `tenant_id` is the
    tenant the action was made in (None for operator commands)."""

    __tablename__ = "audit_events"
    __table_args__ = (
        Index("ix_audit_events_time", "time"),
        Index("ix_audit_events_tenant_id_time", "tenant_id", "time"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    time: Mapped[float] = mapped_column(Timestamp)
    actor: Mapped[str] = mapped_column(String(128))
    user_id: Mapped[int | None]
    tenant_id: Mapped[int | None]
    action: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(255))
    details: Mapped[dict[str, Any]] = mapped_column(default=dict)
