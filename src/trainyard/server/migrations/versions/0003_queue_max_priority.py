"""Priority limits: the highest priority a job of a queue may ask for (`queues.max_priority`).

Revision ID: 0003
Revises: 0002

Nullable: a queue without it (every queue stored before) sets no limit of its own; a job's
limit is the lowest of its queue's and every ancestor's.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision: str | None = "0002"
branch_labels: tuple[str, ...] | None = None
depends_on: tuple[str, ...] | None = None


def upgrade() -> None:
    with op.batch_alter_table("queues") as batch:
        batch.add_column(sa.Column("max_priority", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("queues") as batch:
        batch.drop_column("max_priority")
