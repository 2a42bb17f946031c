"""Why a running elastic job was not grown: `jobs.resize_note`, `jobs.resize_note_until`.

Revision ID: 0018
Revises: 0017

The resize action says why a running elastic job below its maximum was not grown into GPUs
left idle (`core.NotGrown`: the resize hold, a restart its gain does not yet repay, a gain
below the minimum, ...), and when the rule lifts where a time does. The loop stores the note
of its latest round on the job, and `trainyard describe` shows it (two outside reviews found
an elastic job that did not grow and nothing saying why). Jobs stored before have no note
until the next round gives one.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision: str | None = "0017"
branch_labels: tuple[str, ...] | None = None
depends_on: tuple[str, ...] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("resize_note", sa.Text(), nullable=True))
        batch.add_column(sa.Column("resize_note_until", sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("resize_note_until")
        batch.drop_column("resize_note")
