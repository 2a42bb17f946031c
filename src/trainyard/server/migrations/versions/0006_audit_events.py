"""The audit trail: who did what and when (`audit_events`), append-only.

Revision ID: 0006
Revises: 0005

No foreign keys: the trail outlives the users, tenants and jobs it names. On PostgreSQL a
trigger refuses UPDATE and DELETE of its rows; on SQLite two triggers do the same.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision: str | None = "0005"
branch_labels: tuple[str, ...] | None = None
depends_on: tuple[str, ...] | None = None

TIME: sa.Double[float] = sa.Double()


def upgrade() -> None:
    op.create_table(
        "audit_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("time", TIME, nullable=False),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=True),
        sa.Column("tenant_id", sa.Integer(), nullable=True),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.String(255), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_audit_events"),
    )
    op.create_index("ix_audit_events_time", "audit_events", ["time"])
    op.create_index("ix_audit_events_tenant_id_time", "audit_events", ["tenant_id", "time"])
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "CREATE FUNCTION audit_events_append_only() RETURNS trigger AS $$ BEGIN "
            "RAISE EXCEPTION 'the audit trail is append-only'; END; $$ LANGUAGE plpgsql"
        )
        op.execute(
            "CREATE TRIGGER audit_events_append_only BEFORE UPDATE OR DELETE ON audit_events "
            "FOR EACH ROW EXECUTE FUNCTION audit_events_append_only()"
        )
    else:
        for verb in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER audit_events_no_{verb.lower()} BEFORE {verb} ON audit_events "
                "BEGIN SELECT RAISE(ABORT, 'the audit trail is append-only'); END"
            )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER audit_events_append_only ON audit_events")
        op.execute("DROP FUNCTION audit_events_append_only()")
    op.drop_index("ix_audit_events_tenant_id_time", "audit_events")
    op.drop_index("ix_audit_events_time", "audit_events")
    op.drop_table("audit_events")
