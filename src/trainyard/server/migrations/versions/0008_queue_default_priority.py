"""Default priority: what a job of a queue gets when its spec names none
(`queues.default_priority`).

Revision ID: 0008
Revises: 0007

Nullable: a queue without it uses its nearest ancestor's, else 0.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision: str | None = "0007"
branch_labels: tuple[str, ...] | None = None
depends_on: tuple[str, ...] | None = None


def upgrade() -> None:
    with op.batch_alter_table("queues") as batch:
        batch.add_column(sa.Column("default_priority", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("queues") as batch:
        batch.drop_column("default_priority")
