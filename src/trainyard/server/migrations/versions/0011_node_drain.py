"""Node drain (issue 16): `nodes.drained_at`.

Revision ID: 0011
Revises: 0010

A node is cordoned when `schedulable` is false (no new job is placed there; jobs running
there go on) and drained when `drained_at` is set as well: the platform then evicts the jobs
running there (they checkpoint on the notice `preempt` and are requeued, to run elsewhere).
Null for every node stored before: none was being drained.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision: str | None = "0010"
branch_labels: tuple[str, ...] | None = None
depends_on: tuple[str, ...] | None = None

TIME: sa.Double[float] = sa.Double()


def upgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("drained_at", TIME, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("drained_at")
