"""Who may use the platform: tenants, their users, and the users' API tokens.

Invariants:
- A user belongs to exactly one tenant and has one `Role` there.
- An API token is never stored: only `token_id` (a public lookup key that is also part of the
  token text) and the SHA-256 of the whole token. `trainyard.server.db.tokens` issues and
  verifies tokens; nothing else writes `secret_hash`.
- A token with `job_id` set is job-scoped (handed to a job's processes) and dies with the job.
"""

from __future__ import annotations

from sqlalchemy import ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column, relationship

from trainyard.server.db.base import Base, Role, Timestamp, str_enum


class Tenant(Base):
    """An organisation or team whose jobs, queues and users are kept apart from others'."""

    __tablename__ = "tenants"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[float] = mapped_column(Timestamp)
    # GPU-hours it may use per rolling period (None: no budget); new work waits when spent
    budget_gpu_hours: Mapped[float | None] = mapped_column(default=None)
    budget_period_s: Mapped[float | None] = mapped_column(default=None)

    users: Mapped[list[User]] = relationship(back_populates="tenant")


class User(Base):
    """A person or a service account of a tenant."""

    __tablename__ = "users"

    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    role: Mapped[Role] = mapped_column(str_enum(Role, 16), default=Role.MEMBER)
    created_at: Mapped[float] = mapped_column(Timestamp)
    disabled: Mapped[bool] = mapped_column(default=False)

    tenant: Mapped[Tenant] = relationship(back_populates="users")
    tokens: Mapped[list[ApiToken]] = relationship(
        back_populates="user", cascade="all, delete-orphan", passive_deletes=True
    )


class ApiToken(Base):
    """A bearer token of a user, stored as a lookup id plus a hash (never the token)."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    token_id: Mapped[str] = mapped_column(String(16), unique=True)
    secret_hash: Mapped[str] = mapped_column(String(64))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    job_id: Mapped[str | None] = mapped_column(
        ForeignKey("jobs.id", ondelete="CASCADE"), index=True, default=None
    )
    name: Mapped[str] = mapped_column(String(64), default="")
    created_at: Mapped[float] = mapped_column(Timestamp)
    expires_at: Mapped[float | None] = mapped_column(Timestamp, default=None)
    revoked_at: Mapped[float | None] = mapped_column(Timestamp, default=None)
    last_used_at: Mapped[float | None] = mapped_column(Timestamp, default=None)

    user: Mapped[User] = relationship(back_populates="tokens")
