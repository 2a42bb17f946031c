"""Jobs of exactly N nodes (issue 11, item 5): `jobs.nodes`.

Revision ID: 0014
Revises: 0013

`nodes: N` in a spec means N distinct machines with `gpus / N` GPUs on each; the scheduler
reads it from this column (`JobSpec.core_nodes`: 0 for any shape). Jobs stored before get it
from their stored spec (a rigid GPU job of several nodes), so a pending one is placed as it
asked from now on.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision: str | None = "0013"
branch_labels: tuple[str, ...] | None = None
depends_on: tuple[str, ...] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("nodes", sa.Integer(), nullable=False, server_default="0"))
    jobs = sa.table("jobs", sa.column("id", sa.String), sa.column("spec", sa.JSON),
                    sa.column("gpus", sa.Integer), sa.column("min_gpus", sa.Integer),
                    sa.column("nodes", sa.Integer))  # fmt: skip
    bind = op.get_bind()
    rows = bind.execute(sa.select(jobs.c.id, jobs.c.spec, jobs.c.gpus, jobs.c.min_gpus))
    for job_id, spec, gpus, min_gpus in rows.fetchall():
        nodes = spec.get("nodes", 1) if isinstance(spec, dict) else 1
        if isinstance(nodes, int) and nodes > 1 and gpus and min_gpus is None:
            bind.execute(sa.update(jobs).where(jobs.c.id == job_id).values(nodes=nodes))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("nodes")
