"""`UsageRecord`: one run interval of a job, the unit of accounting (`services/usage.py`)."""

from __future__ import annotations

from sqlalchemy import Index, String
from sqlalchemy.orm import Mapped, mapped_column

from trainyard.server.db.base import Base, Timestamp


class UsageRecord(Base):
    """A job ran from `started_at` to `ended_at` on `gpus` GPUs (and `cpus`, `memory_gb`),
    attempt `attempt`, and then `outcome` (the state it left RUNNING for). Ids are copied,
    not foreign keys: usage outlives the rows it names."""

    __tablename__ = "usage_records"
    __table_args__ = (
        Index("ix_usage_records_tenant_id_ended_at", "tenant_id", "ended_at"),
        Index("ix_usage_records_ended_at", "ended_at"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[str] = mapped_column(String(32))
    tenant_id: Mapped[int]
    user_id: Mapped[int | None]
    queue_id: Mapped[int]
    attempt: Mapped[int]
    started_at: Mapped[float] = mapped_column(Timestamp)
    ended_at: Mapped[float] = mapped_column(Timestamp)
    gpus: Mapped[int]
    cpus: Mapped[float]
    memory_gb: Mapped[float]
    outcome: Mapped[str] = mapped_column(String(16))
