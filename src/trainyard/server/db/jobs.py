"""The work: jobs and the events of their lifecycle.

Invariants:
- `Job.state` and the counters and times that go with it (`attempt`, `restart_count`,
  `next_retry_at`, `started_at`, `finished_at`, `state_changed_at`, `attained_service`) are
  written only by `trainyard.server.lifecycle.transition`, which also appends the `JobEvent`.
  Others write the scheduler's outputs (`placement`, `pending_reason`, `estimated_start`) and
  the executor's results (`exit_code`, `exit_message`).
- `version` is an optimistic lock: a write based on a stale read of the job fails
  (`sqlalchemy.orm.exc.StaleDataError`) instead of silently overwriting a concurrent change,
  so the scheduler loop and an API cancel can never both win.
- Events are append-only; their order is `id` (monotonic in both databases).
- `placement` is `[{"node": name, "devices": [index, ...]}, ...]`; `spec` is the submitted
  job spec as JSON; `gpu_types` the acceptable device types, preferred first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    JSON,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    bindparam,
    false,
    update,
)
from sqlalchemy.orm import Mapped, Session, mapped_column, relationship

from trainyard.server.db.base import Base, JobState, Timestamp, new_id, str_enum

if TYPE_CHECKING:
    from trainyard.server.db.cluster import Queue
    from trainyard.server.db.tenancy import Tenant, User


def _job_id() -> str:
    return new_id("j")


class Job(Base):
    """A gang of workers submitted to a queue, and where it is in its lifecycle."""

    __tablename__ = "jobs"
    __table_args__ = (
        Index("ix_jobs_state_queue_id", "state", "queue_id"),
        Index("ix_jobs_queue_id_state", "queue_id", "state"),
        Index("ix_jobs_tenant_id_submitted_at", "tenant_id", "submitted_at"),
        Index("ix_jobs_user_id_submit_key", "user_id", "submit_key", unique=True),
        Index("ix_jobs_array_id", "array_id"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=_job_id)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="RESTRICT"))
    user_id: Mapped[int | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL"), index=True, default=None
    )
    queue_id: Mapped[int] = mapped_column(ForeignKey("queues.id", ondelete="RESTRICT"))
    name: Mapped[str] = mapped_column(String(128), default="")
    spec: Mapped[dict[str, Any]] = mapped_column(default=dict)

    # What the job asks for (copied out of the spec for the scheduler's queries).
    gpus: Mapped[int] = mapped_column(default=0)
    gpu_types: Mapped[list[Any]] = mapped_column(default=list)
    gpu_memory_gb: Mapped[float] = mapped_column(default=0.0)
    cpus: Mapped[float] = mapped_column(default=0.0)
    memory_gb: Mapped[float] = mapped_column(default=0.0)
    priority: Mapped[int] = mapped_column(default=0)
    preemptible: Mapped[bool] = mapped_column(default=True)
    min_runtime: Mapped[float] = mapped_column(default=0.0)
    expected_duration: Mapped[float | None] = mapped_column(default=None)
    topology: Mapped[str | None] = mapped_column(String(32), default=None)
    # Exactly this many nodes, `gpus / nodes` GPUs each (0: any shape; `JobSpec.core_nodes`)
    nodes: Mapped[int] = mapped_column(default=0, server_default="0")
    # An elastic job's size range (None: rigid); `gpus` is then the size it asks for while
    # pending and the size it was started at once placed.
    min_gpus: Mapped[int | None] = mapped_column(default=None)
    max_gpus: Mapped[int | None] = mapped_column(default=None)
    # Dependencies (`[{"job": id, "condition": "ok"|"any"}]`, None: none) and, for a member
    # of a job array, the array's id, its index and the array's at-most-at-once throttle.
    # (SQL NULL for none, not JSON `null`: the loop's query reads `after IS NOT NULL` only)
    after: Mapped[list[Any] | None] = mapped_column(JSON(none_as_null=True), default=None)
    array_id: Mapped[str | None] = mapped_column(String(32), default=None)
    array_index: Mapped[int | None] = mapped_column(default=None)
    array_limit: Mapped[int | None] = mapped_column(default=None)
    # A RESIZING job: the placement it restarts on once its run has stopped (None otherwise).
    resize_to: Mapped[list[Any] | None] = mapped_column(JSON(none_as_null=True), default=None)
    # The `Idempotency-Key` it was submitted with (unique per user) and a digest of the body.
    submit_key: Mapped[str | None] = mapped_column(String(255), default=None)
    submit_digest: Mapped[str | None] = mapped_column(String(64), default=None)

    # Lifecycle (written by lifecycle.transition only).
    state: Mapped[JobState] = mapped_column(str_enum(JobState, 16), default=JobState.PENDING)
    attempt: Mapped[int] = mapped_column(default=0)  # times the job entered STARTING
    restart_count: Mapped[int] = mapped_column(default=0)  # involuntary restarts so far
    failure_streak: Mapped[int] = mapped_column(default=0)  # own failures in a row
    recover_first: Mapped[bool] = mapped_column(default=False)  # requeued after a failure
    # a failure no restart can change (its command could not start): never requeued
    failed_for_good: Mapped[bool] = mapped_column(default=False, server_default=false())
    max_restarts: Mapped[int] = mapped_column(default=0)
    next_retry_at: Mapped[float | None] = mapped_column(Timestamp, default=None)
    attained_service: Mapped[float] = mapped_column(default=0.0)  # GPU-seconds
    submitted_at: Mapped[float] = mapped_column(Timestamp)
    state_changed_at: Mapped[float] = mapped_column(Timestamp)
    started_at: Mapped[float | None] = mapped_column(Timestamp, default=None)  # this run
    finished_at: Mapped[float | None] = mapped_column(Timestamp, default=None)

    # Scheduler output and executor results.
    placement: Mapped[list[Any] | None] = mapped_column(default=None)
    pending_reason: Mapped[str | None] = mapped_column(Text, default=None)
    estimated_start: Mapped[float | None] = mapped_column(Timestamp, default=None)
    # A RUNNING elastic job: why the latest round did not grow it into idle GPUs, and when
    # the rule that held it back lifts (`core.NotGrown`; loop/scheduling.py writes them).
    resize_note: Mapped[str | None] = mapped_column(Text, default=None)
    resize_note_until: Mapped[float | None] = mapped_column(Timestamp, default=None)
    exit_code: Mapped[int | None] = mapped_column(default=None)
    exit_message: Mapped[str | None] = mapped_column(Text, default=None)

    version: Mapped[int] = mapped_column(Integer, default=1)

    __mapper_args__ = {"version_id_col": version}  # noqa: RUF012 (SQLAlchemy reads it)

    tenant: Mapped[Tenant] = relationship()
    user: Mapped[User | None] = relationship()
    queue: Mapped[Queue] = relationship()
    events: Mapped[list[JobEvent]] = relationship(
        back_populates="job",
        cascade="all, delete-orphan",
        passive_deletes=True,
        order_by="JobEvent.id",
    )


class JobEvent(Base):
    """One state change of a job; `from_state` is None for the submission."""

    __tablename__ = "job_events"
    __table_args__ = (Index("ix_job_events_job_id_id", "job_id", "id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    time: Mapped[float] = mapped_column(Timestamp)
    from_state: Mapped[JobState | None] = mapped_column(str_enum(JobState, 16))
    to_state: Mapped[JobState] = mapped_column(str_enum(JobState, 16))
    reason: Mapped[str] = mapped_column(String(64))
    details: Mapped[dict[str, Any]] = mapped_column(default=dict)

    job: Mapped[Job] = relationship(back_populates="events")


def set_while(session: Session, state: JobState, changes: list[dict[str, Any]]) -> None:
    """Set columns of many jobs in one UPDATE, each row only while the job is still in
    `state`, and without touching its version: what the scheduling loop keeps on jobs
    (pending reasons, growth notes) is no change a user's request should retry for. Each
    change is `{"id": job id, column: value, ...}`, the same columns in every one."""
    if not changes:
        return
    table = Job.__table__
    assert isinstance(table, Table)
    columns = [c for c in changes[0] if c != "id"]
    statement = (
        update(table)
        .where(table.c.id == bindparam("b_id"), table.c.state == state)
        .values({c: bindparam(f"b_{c}", type_=table.c[c].type) for c in columns})
    )
    session.execute(statement, [{f"b_{k}": v for k, v in row.items()} for row in changes])
