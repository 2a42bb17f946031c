"""Budgets: the GPU-hours a tenant may use per rolling period (`tenants.budget_gpu_hours`,
`tenants.budget_period_s`).

Revision ID: 0007
Revises: 0006

Nullable: a tenant without a budget (every tenant stored before) is not limited.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision: str | None = "0006"
branch_labels: tuple[str, ...] | None = None
depends_on: tuple[str, ...] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("budget_gpu_hours", sa.Double(), nullable=True))
        batch.add_column(sa.Column("budget_period_s", sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("budget_period_s")
        batch.drop_column("budget_gpu_hours")
