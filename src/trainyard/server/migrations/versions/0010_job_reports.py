"""What jobs report (issue 15): `job_observations`, `job_progress`; and `jobs.resize_to`.

Revision ID: 0010
Revises: 0009

`job_observations` keeps a job's mean step time per (GPUs, nodes, global batch) it ran at,
`job_progress` its latest report (steps, samples, loss, gradient statistics); both are
deleted with their job. `jobs.resize_to` is the placement a RESIZING job restarts on once
its run has stopped (null otherwise).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision: str | None = "0009"
branch_labels: tuple[str, ...] | None = None
depends_on: tuple[str, ...] | None = None

TIME: sa.Double[float] = sa.Double()


def upgrade() -> None:
    op.create_table(
        "job_observations",
        sa.Column("job_id", sa.String(32), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("nodes", sa.Integer(), nullable=False),
        sa.Column("batch", sa.Integer(), nullable=False),
        sa.Column("step_time", sa.Double(), nullable=False),
        sa.Column("steps", sa.Integer(), nullable=False),
        sa.Column("updated_at", TIME, nullable=False),
        sa.PrimaryKeyConstraint("job_id", "gpus", "nodes", "batch", name="pk_job_observations"),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name="fk_job_observations_job_id_jobs", ondelete="CASCADE"
        ),
    )
    op.create_table(
        "job_progress",
        sa.Column("job_id", sa.String(32), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("world_size", sa.Integer(), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("samples", sa.BigInteger(), nullable=False),
        sa.Column("loss", sa.Double(), nullable=True),
        sa.Column("grad_sqr", sa.Double(), nullable=True),
        sa.Column("grad_var", sa.Double(), nullable=True),
        sa.Column("updated_at", TIME, nullable=False),
        sa.PrimaryKeyConstraint("job_id", name="pk_job_progress"),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name="fk_job_progress_job_id_jobs", ondelete="CASCADE"
        ),
    )
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("resize_to", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("resize_to")
    op.drop_table("job_progress")
    op.drop_table("job_observations")
