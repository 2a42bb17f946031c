"""Node health (issue 16): `nodes.drain_reason`.

Revision ID: 0013
Revises: 0012

Why a node is drained: the operator's `--reason`, or the GPU fault that drained it (e.g.
"GPU 3: XID 79 (GPU has fallen off the bus)"). Nodes stored before have none.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision: str | None = "0012"
branch_labels: tuple[str, ...] | None = None
depends_on: tuple[str, ...] | None = None


def upgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("drain_reason", sa.String(255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("drain_reason")
