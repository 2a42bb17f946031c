"""Hot spares shown to operators: `nodes.spare`.

Revision ID: 0017
Revises: 0016

The loop picks its hot spares (`trainyard up --spares N`) among idle nodes each round and
now stores them on the nodes, so that `trainyard nodes` and `trainyard admin node list` show
which they are (an outside review found them named only in pending reasons). Nodes stored
before are no spares until the next round says so.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision: str | None = "0016"
branch_labels: tuple[str, ...] | None = None
depends_on: tuple[str, ...] | None = None


def upgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(
            sa.Column("spare", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("spare")
