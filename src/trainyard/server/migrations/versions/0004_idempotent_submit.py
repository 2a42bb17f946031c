"""Idempotent submit: the `Idempotency-Key` a job was submitted with, per user.

Revision ID: 0004
Revises: 0003

`jobs.submit_key` holds the key and `jobs.submit_digest` a digest of the request body; a
unique index on (user_id, submit_key) makes a retried submission find its job instead of
creating a second one. Both are nullable (jobs submitted without a key, and every job stored
before).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision: str | None = "0003"
branch_labels: tuple[str, ...] | None = None
depends_on: tuple[str, ...] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("submit_key", sa.String(255), nullable=True))
        batch.add_column(sa.Column("submit_digest", sa.String(64), nullable=True))
        batch.create_index("ix_jobs_user_id_submit_key", ["user_id", "submit_key"], unique=True)


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index("ix_jobs_user_id_submit_key")
        batch.drop_column("submit_digest")
        batch.drop_column("submit_key")
