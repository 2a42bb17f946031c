"""Recovery (issue 16): `jobs.failure_streak` and `jobs.recover_first`.

Revision ID: 0012
Revises: 0011

`failure_streak` counts the job's own failures in a row (a healthy run resets it): the
first restart after a failure is immediate, back-off is for the ones after. `recover_first`
puts a job requeued after a failure at the front of its queue until it starts again. Every
job stored before starts with no streak and in its usual place.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision: str | None = "0011"
branch_labels: tuple[str, ...] | None = None
depends_on: tuple[str, ...] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(
            sa.Column("failure_streak", sa.Integer(), nullable=False, server_default="0")
        )
        batch.add_column(
            sa.Column("recover_first", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("recover_first")
        batch.drop_column("failure_streak")
