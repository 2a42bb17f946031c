"""Accounting: one row per run interval of a job (`usage_records`).

Revision ID: 0005
Revises: 0004

Written by `lifecycle.transition` when a job leaves RUNNING (for any reason: it finished,
failed, was preempted, cancelled, lost its node or was resized). The tenant, user and queue
are copied as plain ids, without foreign keys: usage outlives the jobs, users and queues it
was recorded for.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision: str | None = "0004"
branch_labels: tuple[str, ...] | None = None
depends_on: tuple[str, ...] | None = None

TIME: sa.Double[float] = sa.Double()


def upgrade() -> None:
    op.create_table(
        "usage_records",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.String(32), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=True),
        sa.Column("queue_id", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("started_at", TIME, nullable=False),
        sa.Column("ended_at", TIME, nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("cpus", sa.Double(), nullable=False),
        sa.Column("memory_gb", sa.Double(), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_usage_records"),
    )
    op.create_index(
        "ix_usage_records_tenant_id_ended_at", "usage_records", ["tenant_id", "ended_at"]
    )
    op.create_index("ix_usage_records_ended_at", "usage_records", ["ended_at"])


def downgrade() -> None:
    op.drop_index("ix_usage_records_ended_at", "usage_records")
    op.drop_index("ix_usage_records_tenant_id_ended_at", "usage_records")
    op.drop_table("usage_records")
