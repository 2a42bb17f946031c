"""The persistence layer: typed SQLAlchemy 2 models, sessions, migrations and tokens.

The database is the source of truth of the control plane: after a crash, the server rebuilds
everything it knows from it. Modules:

- `base`: declarative base, naming convention, enums (`Role`, `JobState`, `Health`).
- `tenancy`: `Tenant`, `User`, `ApiToken`.  `tokens`: issue, verify, revoke tokens (hashed).
- `cluster`: `Queue` (hierarchical), `Node`, `Device`.
- `jobs`: `Job`, `JobEvent` (state changes go through `trainyard.server.lifecycle`).
- `usage`: `UsageRecord`, one run interval of a job (accounting).
- `reports`: `JobObservation`, `JobProgress`, `JobReportSample`: what running jobs report
  (steps, progress, and over time).
- `logins`: `LoginCode`, the console's one-time login codes.
- `audit`: `AuditEvent`, the append-only audit trail.
- `session`: `make_engine`, `make_session_factory`, `init_db` (Alembic to head).
"""

from trainyard.server.db.audit import AuditEvent
from trainyard.server.db.base import Base, Health, JobState, Role
from trainyard.server.db.cluster import Device, Node, Queue
from trainyard.server.db.jobs import Job, JobEvent
from trainyard.server.db.logins import LoginCode
from trainyard.server.db.reports import JobObservation, JobProgress, JobReportSample
from trainyard.server.db.session import (
    init_db,
    make_engine,
    make_session_factory,
    normalize_url,
    shown_url,
)
from trainyard.server.db.tenancy import ApiToken, Tenant, User
from trainyard.server.db.usage import UsageRecord

__all__ = [
    "ApiToken",
    "AuditEvent",
    "Base",
    "Device",
    "Health",
    "Job",
    "JobEvent",
    "JobObservation",
    "JobProgress",
    "JobReportSample",
    "JobState",
    "LoginCode",
    "Node",
    "Queue",
    "Role",
    "Tenant",
    "UsageRecord",
    "User",
    "init_db",
    "make_engine",
    "make_session_factory",
    "normalize_url",
    "shown_url",
]
