"""The web console (issue 17): `login_codes` and `job_report_samples`.

Revision ID: 0015
Revises: 0014

`login_codes` holds the one-time codes of console login links (their SHA-256 only), deleted
with their user. `job_report_samples` keeps what running jobs report over time (at most one
row every 30 s per job, and one per change of world size), deleted with their job, for the
console's charts.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision: str | None = "0014"
branch_labels: tuple[str, ...] | None = None
depends_on: tuple[str, ...] | None = None

TIME: sa.Double[float] = sa.Double()


def upgrade() -> None:
    op.create_table(
        "login_codes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("code_hash", sa.String(64), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("expires_at", TIME, nullable=False),
        sa.Column("used_at", TIME, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_login_codes"),
        sa.UniqueConstraint("code_hash", name="uq_login_codes_code_hash"),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name="fk_login_codes_user_id_users", ondelete="CASCADE"
        ),
    )
    op.create_index("ix_login_codes_user_id", "login_codes", ["user_id"])
    op.create_table(
        "job_report_samples",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.String(32), nullable=False),
        sa.Column("time", TIME, nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("world_size", sa.Integer(), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("batch", sa.Integer(), nullable=False),
        sa.Column("step_time", sa.Double(), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("samples", sa.BigInteger(), nullable=False),
        sa.Column("loss", sa.Double(), nullable=True),
        sa.Column("grad_sqr", sa.Double(), nullable=True),
        sa.Column("grad_var", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_job_report_samples"),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name="fk_job_report_samples_job_id_jobs", ondelete="CASCADE"
        ),
    )
    op.create_index("ix_job_report_samples_job_id_time", "job_report_samples", ["job_id", "time"])


def downgrade() -> None:
    op.drop_index("ix_job_report_samples_job_id_time", "job_report_samples")
    op.drop_table("job_report_samples")
    op.drop_index("ix_login_codes_user_id", "login_codes")
    op.drop_table("login_codes")
