"""The wire format of the API (pydantic), kept apart from the database models."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from trainyard.fields import MAX_DURATION_S
from trainyard.server.db.base import Health, JobState, Role

# Free text that reaches the database: no control characters (PostgreSQL refuses NUL in text,
# and a label or a name has no use for the others). In the OpenAPI schema, so clients and the
# fuzzer know; `PATTERN_MESSAGES` gives its error a sentence a person can act on.
PRINTABLE = r"^[^\x00-\x1f\x7f]*$"
# the orders of `GET /v1/jobs?sort=` (`-` first: descending)
JOB_SORTS = ("id", "name", "state", "gpus", "submitted", "changed", "queue", "user")
JOB_SORT = "^-?(" + "|".join(JOB_SORTS) + ")$"
PATTERN_MESSAGES = {
    PRINTABLE: "must not contain control characters (NUL, newline, tab, ...)",
    JOB_SORT: f"must be one of {', '.join(JOB_SORTS)}, with `-` first for descending",
}


class ErrorDetail(BaseModel):
    field: str | None = Field(description="dotted path of the input at fault, or null")
    message: str


class ErrorOut(BaseModel):
    error: ErrorDetail


class SubmitOut(BaseModel):
    id: str = Field(description="the job's id (for an array: the array's, a-...)")
    state: JobState
    array_ids: list[str] | None = Field(
        default=None, description="an array's member jobs, in index order (None: not an array)"
    )


class Accepted(BaseModel):
    accepted: bool = True


class ReportIn(BaseModel):
    """One report of a running job: the steps it trained since its last report (issue 15;
    the SDK's `Reporter` sends it)."""

    model_config = {"extra": "forbid"}

    attempt: int = Field(ge=0, le=2**31 - 1, description="the run it comes from")
    gpus: int = Field(ge=0, le=1_000_000, description="GPUs the job trains on")
    nodes: int = Field(default=1, ge=1, le=100_000, description="nodes it spans")
    world_size: int = Field(ge=1, le=1_000_000, description="ranks")
    batch: int = Field(ge=1, le=2**31 - 1, description="the global batch of these steps")
    step_time: float = Field(ge=1e-6, le=86_400, description="mean seconds per step")
    steps: int = Field(ge=1, le=2**31 - 1, description="steps this mean covers")
    step: int = Field(ge=0, le=10**15, description="steps trained so far")
    samples: int = Field(ge=0, le=10**15, description="samples trained so far")
    loss: float | None = Field(default=None, allow_inf_nan=False)
    grad_sqr: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    grad_var: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    remaining_samples: int | None = Field(
        default=None, ge=0, le=10**15, description="samples the job still has to train"
    )


class ArrayCancelOut(BaseModel):
    id: str = Field(description="the array")
    cancelled: list[str] = Field(description="members cancelled now")
    ended: list[str] = Field(description="members that had ended already (left as they were)")


class JobSummary(BaseModel):
    id: str
    name: str
    queue: str
    state: JobState
    gpus: int = Field(
        description="GPUs the job holds once started (an elastic job: the size it was started "
        "at in its range), or asks for while pending"
    )
    min_gpus: int | None = Field(default=None, description="elastic jobs: the smallest size")
    max_gpus: int | None = Field(default=None, description="elastic jobs: the largest size")
    user: str | None
    submitted_at: float
    state_changed_at: float
    array_id: str | None = Field(default=None, description="the job array it belongs to")
    array_index: int | None = Field(default=None, description="its index in that array")
    pending_reason: str | None = Field(default=None, description="a pending job: why it waits")


class JobList(BaseModel):
    jobs: list[JobSummary]
    more: bool = False  # more jobs follow this page (ask with offset = offset + len(jobs))


class EventOut(BaseModel):
    time: float
    from_state: JobState | None
    to_state: JobState
    reason: str
    details: dict[str, Any]


class JobDetail(JobSummary):
    tenant: str
    after: list[dict[str, str]] = Field(
        default_factory=list, description="dependencies: [{job, condition: ok|any}]"
    )
    progress: dict[str, Any] | None = Field(
        default=None, description="the job's latest report and measured step times"
    )
    spec: dict[str, Any]
    placement: list[Any] | None
    pending_reason: str | None
    estimated_start: float | None
    not_grown: str | None = Field(
        default=None,
        description="a running elastic job below its max_gpus, with GPUs idle: why the "
        "scheduler did not grow it (resize hold, a restart its gain does not yet repay, ...)",
    )
    not_grown_until: float | None = Field(
        default=None, description="when the rule in not_grown lifts, if a time does"
    )
    attempt: int
    restart_count: int
    max_restarts: int
    next_retry_at: float | None
    started_at: float | None
    finished_at: float | None
    exit_code: int | None
    exit_message: str | None
    events: list[EventOut]


class QueueOut(BaseModel):
    name: str
    parent: str | None
    tenant: str | None
    guaranteed: int
    limit: int | None
    weight: float
    pending: int
    running: int  # jobs whose placement is in use (starting, running, resizing, stopping)
    gpus_in_use: int = 0  # GPUs those jobs hold (the queue's own jobs, not its children's)
    # GPUs its own jobs and its descendants' hold: what its guarantee and limit bound
    gpus_held: int = 0
    max_priority: int | None = None  # its own limit; ancestors' limits apply too
    default_priority: int | None = None  # for specs naming none (else the nearest ancestor's)
    usage: float = 0.0  # decayed past GPU use as a share of the cluster (fair-share history)


class QueueList(BaseModel):
    queues: list[QueueOut]


class DeviceOut(BaseModel):
    index: int
    gpu_type: str
    memory_gb: float
    virtual: bool
    health: Health
    busy: bool = Field(default=False, description="a job (of any tenant) holds it now")


class NodeOut(BaseModel):
    name: str
    executor: str
    cpus: float
    memory_gb: float
    schedulable: bool
    virtual: bool
    health: Health
    last_heartbeat_at: float | None
    drained_at: float | None = None  # draining: its jobs are moved away
    drain_reason: str | None = None  # the operator's reason, or the GPU fault
    spare: bool = False  # a hot spare this round (`trainyard up --spares N`)
    devices: list[DeviceOut]


class NodeList(BaseModel):
    nodes: list[NodeOut]


class WhoAmI(BaseModel):
    user: str
    tenant: str
    role: Role


class HealthOut(BaseModel):
    status: str
    database: str


class TokenIn(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # no unknown fields, no coercion

    name: str = Field(
        default="",
        max_length=64,
        pattern=PRINTABLE,
        description="a label, e.g. 'laptop' or 'ci'",
    )
    expires_in_s: float | None = Field(
        default=None, ge=1, le=MAX_DURATION_S, description="lifetime in seconds; null: none"
    )


class TokenOut(BaseModel):
    token_id: str
    name: str
    user: str
    job_id: str | None
    created_at: float
    expires_at: float | None
    revoked_at: float | None
    last_used_at: float | None


class NewTokenOut(TokenOut):
    token: str = Field(description="the token itself; shown once, only its hash is stored")


class TokenList(BaseModel):
    tokens: list[TokenOut]


class UsageRowOut(BaseModel):
    key: str  # the tenant, user, queue name or job id
    gpu_seconds: float
    gpu_hours: float
    cpu_seconds: float
    memory_gb_seconds: float
    intervals: int  # run intervals (attempts) counted
    jobs: int


class UsageOut(BaseModel):
    since: float
    until: float
    by: str
    rows: list[UsageRowOut]


class AuditEventOut(BaseModel):
    time: float
    actor: str
    action: str
    target: str
    details: dict[str, Any]


class AuditList(BaseModel):
    events: list[AuditEventOut]
    more: bool  # more entries exist after the last one (ask again with `since`)
