"""Initial schema: tenants, users, API tokens, queues, nodes, devices, jobs, job events.

Revision ID: 0001
Revises: (none)

Written by hand to match the models in `trainyard.server.db` as first released; a test checks
that a database migrated to head has exactly the models' schema.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision: str | None = None
branch_labels: tuple[str, ...] | None = None
depends_on: tuple[str, ...] | None = None

TIME: sa.Double[float] = sa.Double()


def upgrade() -> None:
    op.create_table(
        "tenants",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_tenants"),
        sa.UniqueConstraint("name", name="uq_tenants_name"),
    )
    op.create_table(
        "users",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("disabled", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_users"),
        sa.UniqueConstraint("name", name="uq_users_name"),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name="fk_users_tenant_id_tenants", ondelete="CASCADE"
        ),
    )
    op.create_index("ix_users_tenant_id", "users", ["tenant_id"])
    op.create_table(
        "queues",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=True),
        sa.Column("parent_id", sa.Integer(), nullable=True),
        sa.Column("guaranteed", sa.Integer(), nullable=False),
        sa.Column("limit", sa.Integer(), nullable=True),
        sa.Column("weight", sa.Double(), nullable=False),
        sa.Column("usage", sa.Double(), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_queues"),
        sa.UniqueConstraint("name", name="uq_queues_name"),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name="fk_queues_tenant_id_tenants", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["parent_id"], ["queues.id"], name="fk_queues_parent_id_queues", ondelete="RESTRICT"
        ),
    )
    op.create_index("ix_queues_tenant_id", "queues", ["tenant_id"])
    op.create_index("ix_queues_parent_id", "queues", ["parent_id"])
    op.create_table(
        "nodes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("address", sa.String(255), nullable=False),
        sa.Column("executor", sa.String(32), nullable=False),
        sa.Column("cpus", sa.Double(), nullable=False),
        sa.Column("memory_gb", sa.Double(), nullable=False),
        sa.Column("topology_path", sa.JSON(), nullable=False),
        sa.Column("island_size", sa.Integer(), nullable=False),
        sa.Column("schedulable", sa.Boolean(), nullable=False),
        sa.Column("virtual", sa.Boolean(), nullable=False),
        sa.Column("health", sa.String(16), nullable=False),
        sa.Column("registered_at", TIME, nullable=False),
        sa.Column("last_heartbeat_at", TIME, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_nodes"),
        sa.UniqueConstraint("name", name="uq_nodes_name"),
    )
    op.create_table(
        "devices",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("gpu_type", sa.String(64), nullable=False),
        sa.Column("memory_gb", sa.Double(), nullable=False),
        sa.Column("uuid", sa.String(64), nullable=True),
        sa.Column("virtual", sa.Boolean(), nullable=False),
        sa.Column("health", sa.String(16), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_devices"),
        sa.UniqueConstraint("node_id", "index", name="uq_devices_node_id_index"),
        sa.ForeignKeyConstraint(
            ["node_id"], ["nodes.id"], name="fk_devices_node_id_nodes", ondelete="CASCADE"
        ),
    )
    _create_jobs()
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("token_id", sa.String(16), nullable=False),
        sa.Column("secret_hash", sa.String(64), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.String(32), nullable=True),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("expires_at", TIME, nullable=True),
        sa.Column("revoked_at", TIME, nullable=True),
        sa.Column("last_used_at", TIME, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_api_tokens"),
        sa.UniqueConstraint("token_id", name="uq_api_tokens_token_id"),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name="fk_api_tokens_user_id_users", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name="fk_api_tokens_job_id_jobs", ondelete="CASCADE"
        ),
    )
    op.create_index("ix_api_tokens_user_id", "api_tokens", ["user_id"])
    op.create_index("ix_api_tokens_job_id", "api_tokens", ["job_id"])
    op.create_table(
        "job_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.String(32), nullable=False),
        sa.Column("time", TIME, nullable=False),
        sa.Column("from_state", sa.String(16), nullable=True),
        sa.Column("to_state", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(64), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_job_events"),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name="fk_job_events_job_id_jobs", ondelete="CASCADE"
        ),
    )
    op.create_index("ix_job_events_job_id_id", "job_events", ["job_id", "id"])


def _create_jobs() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(32), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=True),
        sa.Column("queue_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("gpu_types", sa.JSON(), nullable=False),
        sa.Column("gpu_memory_gb", sa.Double(), nullable=False),
        sa.Column("cpus", sa.Double(), nullable=False),
        sa.Column("memory_gb", sa.Double(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("preemptible", sa.Boolean(), nullable=False),
        sa.Column("min_runtime", sa.Double(), nullable=False),
        sa.Column("expected_duration", sa.Double(), nullable=True),
        sa.Column("topology", sa.String(32), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("restart_count", sa.Integer(), nullable=False),
        sa.Column("max_restarts", sa.Integer(), nullable=False),
        sa.Column("next_retry_at", TIME, nullable=True),
        sa.Column("attained_service", sa.Double(), nullable=False),
        sa.Column("submitted_at", TIME, nullable=False),
        sa.Column("state_changed_at", TIME, nullable=False),
        sa.Column("started_at", TIME, nullable=True),
        sa.Column("finished_at", TIME, nullable=True),
        sa.Column("placement", sa.JSON(), nullable=True),
        sa.Column("pending_reason", sa.Text(), nullable=True),
        sa.Column("estimated_start", TIME, nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("exit_message", sa.Text(), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_jobs"),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name="fk_jobs_tenant_id_tenants", ondelete="RESTRICT"
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name="fk_jobs_user_id_users", ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["queue_id"], ["queues.id"], name="fk_jobs_queue_id_queues", ondelete="RESTRICT"
        ),
    )
    op.create_index("ix_jobs_user_id", "jobs", ["user_id"])
    op.create_index("ix_jobs_state_queue_id", "jobs", ["state", "queue_id"])
    op.create_index("ix_jobs_queue_id_state", "jobs", ["queue_id", "state"])
    op.create_index("ix_jobs_tenant_id_submitted_at", "jobs", ["tenant_id", "submitted_at"])


def downgrade() -> None:
    for table in (
        "job_events",
        "api_tokens",
        "jobs",
        "devices",
        "nodes",
        "queues",
        "users",
        "tenants",
    ):
        op.drop_table(table)
