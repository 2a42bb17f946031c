"""Elastic jobs: the size range a job may run at (`jobs.min_gpus`, `jobs.max_gpus`).

Revision ID: 0002
Revises: 0001

Both are nullable: a job without them (every job stored before) is rigid.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision: str | None = "0001"
branch_labels: tuple[str, ...] | None = None
depends_on: tuple[str, ...] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("min_gpus", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("max_gpus", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("max_gpus")
        batch.drop_column("min_gpus")
