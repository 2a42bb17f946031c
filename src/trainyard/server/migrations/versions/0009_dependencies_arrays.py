"""Dependencies and job arrays (issue 19): `jobs.after`, `jobs.array_id`, `array_index`,
`array_limit`.

Revision ID: 0009
Revises: 0008

`after` is the spec's dependency list (`[{"job": id, "condition": "ok"|"any"}]`, null for
none), copied out for the scheduler loop's query; `array_id` (indexed) groups the members of
an array, `array_index` is each one's index and `array_limit` the array's `%N` throttle. All
nullable: every job stored before is a plain job without dependencies.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision: str | None = "0008"
branch_labels: tuple[str, ...] | None = None
depends_on: tuple[str, ...] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("after", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("array_id", sa.String(32), nullable=True))
        batch.add_column(sa.Column("array_index", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("array_limit", sa.Integer(), nullable=True))
        batch.create_index("ix_jobs_array_id", ["array_id"])


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index("ix_jobs_array_id")
        batch.drop_column("array_limit")
        batch.drop_column("array_index")
        batch.drop_column("array_id")
        batch.drop_column("after")
