"""The declarative base, shared column types and the enumerations stored in the database.

Conventions for every model in `trainyard.server.db`:

- Times are seconds since the Unix epoch as floats (`Timestamp`), the same clock as the
  scheduling core's `Snapshot.now`; the database never supplies a time (no server defaults),
  so callers pass `now` and tests control the clock.
- Enumerations are stored as short strings (portable across SQLite and PostgreSQL).
- Constraint names follow `NAMING_CONVENTION`, so migrations can refer to them by name.
"""

from __future__ import annotations

import enum
import uuid
from typing import Any

from sqlalchemy import JSON, Double, Enum, MetaData
from sqlalchemy.orm import DeclarativeBase

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

Timestamp = Double
"""Column type of every point in time: epoch seconds."""

JsonDoc = JSON
"""Column type of JSON documents (a job's spec, placement, event details)."""


class Base(DeclarativeBase):
    """Base of all trainyard tables."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}  # noqa: RUF012


class Role(enum.StrEnum):
    """What a user may do inside their tenant."""

    ADMIN = "admin"  # everything, including users, queues and nodes
    MEMBER = "member"  # submit, read and cancel jobs of their tenant
    VIEWER = "viewer"  # read only


class JobState(enum.StrEnum):
    """States of a job; the legal moves between them live in `trainyard.server.lifecycle`."""

    PENDING = "PENDING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    RESIZING = "RESIZING"
    PREEMPTED = "PREEMPTED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class Health(enum.StrEnum):
    """Health of a node or a device as last reported by its executor."""

    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"  # reachable but must not get new work (failed GPU, drained)
    LOST = "lost"  # stopped reporting; its jobs are requeued


def str_enum(cls: type[enum.StrEnum], length: int) -> Enum:
    """A portable enum column: a VARCHAR holding the member's value (no native PG enum)."""
    return Enum(
        cls,
        native_enum=False,
        create_constraint=False,
        length=length,
        values_callable=lambda members: [m.value for m in members],
        validate_strings=True,
    )


def new_id(prefix: str) -> str:
    """A random identifier with a readable prefix (`j-3f2a...` for jobs)."""
    return f"{prefix}-{uuid.uuid4().hex[:20]}"
