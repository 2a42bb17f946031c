"""A failure no restart can change: `jobs.failed_for_good`.

Revision ID: 0019
Revises: 0018

A job whose command could not start (not found, not executable, a working directory its
user may not enter) is failed once and not requeued, whatever restarts it has left: the
loop marks it so that it is no longer watched for a restart (an outside review saw such a
job retried with back-off, each attempt "exit code 127"). Jobs stored before are not marked.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision: str | None = "0018"
branch_labels: tuple[str, ...] | None = None
depends_on: tuple[str, ...] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(
            sa.Column("failed_for_good", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("failed_for_good")
