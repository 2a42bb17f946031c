"""What a job has left (issue 13): `job_progress.remaining_samples`.

Revision ID: 0016
Revises: 0015

A job that knows its total steps reports the samples it still has to train; the scheduler
weighs it by the time it has left when it shares GPUs among elastic jobs. Reports stored
before have none.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision: str | None = "0015"
branch_labels: tuple[str, ...] | None = None
depends_on: tuple[str, ...] | None = None


def upgrade() -> None:
    with op.batch_alter_table("job_progress") as batch:
        batch.add_column(sa.Column("remaining_samples", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job_progress") as batch:
        batch.drop_column("remaining_samples")
