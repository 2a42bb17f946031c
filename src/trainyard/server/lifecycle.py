"""The job state machine: the only code that changes `Job.state`.

```
PENDING -> STARTING -> RUNNING -> SUCCEEDED | FAILED | CANCELLED
PENDING -> CANCELLED              STARTING -> FAILED | CANCELLED
RUNNING -> PREEMPTED -> PENDING   (stopped for another job; resumes from its checkpoint)
RUNNING -> RESIZING -> STARTING   (elastic resize: stopped, restarted on a new placement)
RESIZING -> SUCCEEDED             (it finished before the resize stopped it)
FAILED -> PENDING                 (restart, while restarts remain, after a back-off)
STARTING | RUNNING | RESIZING -> PENDING   (node lost: a restart, with back-off)
PREEMPTED | RESIZING -> CANCELLED | FAILED
```

`transition(session, job, to_state, reason=..., now=...)` checks the edge (an
`IllegalTransition` names both states and what is allowed), updates the times and counters
that go with the state, appends a `JobEvent` in the caller's transaction and flushes, so a
concurrent change of the same job fails here (`StaleDataError`, the job's optimistic lock).
Nothing is committed: the caller commits or rolls back the whole unit of work. Time is
always passed in; this module never reads a clock.

Every interval a job spends RUNNING is recorded when it leaves RUNNING, whatever for (a
`UsageRecord`: the unit of accounting, `services/usage.py`).

Restarts after a failure of the job itself are involuntary: they count in
`restart_count` and are allowed while `restart_count < max_restarts` (when none remain, the
caller moves the job to FAILED instead). The first restart after a healthy run is immediate;
back-off is for repeated failures: with `failure_streak` = n failures in a row (this one
included) the restart waits `RetryPolicy.after_failures(n)` = 0 for n = 1, else
`min(cap_s, base_s * 2**(n - 2))`. A run is healthy, and resets the streak, when it was
RUNNING for `RetryPolicy.healthy_s` or its event says `healthy` (it reported progress).

An infrastructure failure (the requeue's details say `infra`: a node lost, a rank's
supervisor gone, a launch on a node that left) is not the job's fault: it costs no restart,
needs none left, waits no back-off, and leaves the streak as it was. Every requeue after a
failure sets `recover_first`: the core puts the job at the front of its queue
(`core.Job.recovering`) until it starts again. Preemption is not a restart: the job goes
back to PENDING at once and keeps its count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from trainyard.accounting import billed_cpus
from trainyard.server.db.base import JobState
from trainyard.server.db.jobs import Job, JobEvent
from trainyard.server.db.usage import UsageRecord

__all__ = [
    "DEFAULT_RETRY",
    "EDGES",
    "HOLDS_DEVICES",
    "TERMINAL",
    "IllegalTransition",
    "RetryPolicy",
    "restarts_left",
    "submit",
    "transition",
]

S = JobState

TERMINAL = frozenset({S.SUCCEEDED, S.CANCELLED})
"""States no transition leaves. FAILED is final only once its restarts are used up."""

HOLDS_DEVICES = frozenset({S.STARTING, S.RUNNING, S.RESIZING, S.PREEMPTED})
"""States in which a job's placement is (still) in use: PREEMPTED jobs are stopping."""

EDGES: dict[JobState, frozenset[JobState]] = {
    S.PENDING: frozenset({S.STARTING, S.CANCELLED}),
    S.STARTING: frozenset({S.RUNNING, S.FAILED, S.CANCELLED, S.PENDING}),
    S.RUNNING: frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED, S.PREEMPTED, S.RESIZING, S.PENDING}),
    S.RESIZING: frozenset({S.STARTING, S.SUCCEEDED, S.FAILED, S.CANCELLED, S.PENDING}),
    S.PREEMPTED: frozenset({S.PENDING, S.FAILED, S.CANCELLED}),
    S.FAILED: frozenset({S.PENDING}),
    S.SUCCEEDED: frozenset(),
    S.CANCELLED: frozenset(),
}

_FINISHED = frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED})
_RESTARTS_FROM = frozenset({S.FAILED, S.STARTING, S.RUNNING, S.RESIZING})


class IllegalTransition(ValueError):
    """A state change the lifecycle does not allow; the job and the database are unchanged."""

    def __init__(self, job_id: str, from_state: JobState, to_state: JobState, why: str) -> None:
        self.job_id = job_id
        self.from_state = from_state
        self.to_state = to_state
        super().__init__(
            f"job {job_id}: illegal transition {from_state.value} -> {to_state.value}: {why}"
        )


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential back-off between restarts: `min(cap_s, base_s * 2**restarts_done)`."""

    base_s: float = 10.0
    cap_s: float = 600.0
    healthy_s: float = 300.0  # a run this long resets the failure streak

    def delay(self, restarts_done: int) -> float:
        if restarts_done >= 64:  # 2**64 * base is past any cap
            return self.cap_s
        return min(self.cap_s, self.base_s * 2.0**restarts_done)

    def after_failures(self, streak: int) -> float:
        """The back-off before a restart after `streak` failures in a row (this one
        included): none for the first, then `base_s`, doubling up to `cap_s`."""
        return 0.0 if streak <= 1 else self.delay(streak - 2)


DEFAULT_RETRY = RetryPolicy()


def restarts_left(job: Job) -> int:
    """How many more involuntary restarts the job may have."""
    return max(0, job.max_restarts - job.restart_count)


def submit(session: Session, job: Job, *, now: float, reason: str = "submitted") -> JobEvent:
    """Add a new job in PENDING and record its first event (from no state)."""
    job.state = S.PENDING
    job.submitted_at = now
    job.state_changed_at = now
    event = JobEvent(job=job, time=now, from_state=None, to_state=S.PENDING, reason=reason)
    event.details = {}
    session.add(job)
    session.add(event)
    session.flush()
    return event


def submission_rows(
    job: dict[str, Any], *, now: float, reason: str = "submitted"
) -> tuple[dict[str, Any], dict[str, Any]]:
    """What `submit` writes, as plain rows for a bulk insert (the API's group commit): the
    job (`job` holds its columns, `id` included) in PENDING, and its first event."""
    row = {
        **job,
        "state": S.PENDING,
        "attempt": 0,
        "restart_count": 0,
        "attained_service": 0.0,
        "submitted_at": now,
        "state_changed_at": now,
        "version": 1,
    }
    event = {
        "job_id": job["id"],
        "time": now,
        "from_state": None,
        "to_state": S.PENDING,
        "reason": reason,
        "details": {},
    }
    return row, event


def transition(
    session: Session,
    job: Job,
    to_state: JobState,
    *,
    reason: str,
    now: float,
    details: dict[str, Any] | None = None,
    retry: RetryPolicy = DEFAULT_RETRY,
) -> JobEvent:
    """Move `job` to `to_state` at `now`, recording why; returns the event (flushed, not
    committed). `details` (JSON) are stored on the event; `exit_code` and `message` in them
    also become the job's exit information. Raises `IllegalTransition` before changing
    anything when the edge is not allowed."""
    from_state = JobState(job.state)
    to_state = JobState(to_state)
    _check(job, from_state, to_state, reason, now, details)
    facts: dict[str, Any] = dict(details or {})

    if from_state == S.RUNNING and job.started_at is not None:
        if facts.get("healthy") or now - job.started_at >= retry.healthy_s:
            job.failure_streak = 0  # a healthy run: the next failure restarts at once
        job.attained_service += job.gpus * max(0.0, now - job.started_at)
        session.add(
            UsageRecord(
                job_id=job.id, tenant_id=job.tenant_id, user_id=job.user_id,
                queue_id=job.queue_id, attempt=max(0, job.attempt - 1),
                started_at=job.started_at, ended_at=max(now, job.started_at), gpus=job.gpus,
                cpus=billed_cpus(job.cpus, job.spec, job.gpus), memory_gb=job.memory_gb,
                outcome=to_state.value,
            )
        )  # fmt: skip

    if to_state == S.PENDING:
        _requeue(job, from_state, reason, now, retry, facts)
    elif to_state == S.STARTING:
        job.attempt += 1
        job.recover_first = False
        job.next_retry_at = None
        job.pending_reason = None
        job.estimated_start = None
        job.exit_code = None
        job.exit_message = None
        job.finished_at = None
        facts.setdefault("attempt", job.attempt - 1)  # the run's index, as logs and run dirs
    elif to_state == S.RUNNING:
        job.started_at = now
        job.pending_reason = None  # what a deferred or refused launch waited for
    if to_state == S.FAILED:  # an infrastructure failure is requeued at no cost (`_requeue`)
        job.recover_first = bool(facts.get("infra"))
    if to_state in _FINISHED:
        job.finished_at = now
    if "exit_code" in facts and facts["exit_code"] is not None:
        job.exit_code = int(facts["exit_code"])
    if "message" in facts and facts["message"] is not None:
        job.exit_message = str(facts["message"])

    job.state = to_state
    job.state_changed_at = now
    event = JobEvent(job=job, time=now, from_state=from_state, to_state=to_state, reason=reason)
    event.details = facts
    session.add(event)
    session.flush()
    return event


def _check(
    job: Job,
    from_state: JobState,
    to_state: JobState,
    reason: str,
    now: float,
    details: dict[str, Any] | None,
) -> None:
    def illegal(why: str) -> IllegalTransition:
        return IllegalTransition(job.id, from_state, to_state, why)

    if not reason or len(reason) > 64:
        raise illegal("a reason of 1 to 64 characters is required")
    if to_state not in EDGES[from_state]:
        allowed = ", ".join(sorted(s.value for s in EDGES[from_state])) or "nothing"
        raise illegal(f"from {from_state.value} the job may go to {allowed}")
    if to_state == S.STARTING:
        if job.placement is None:
            raise illegal("a job starts only with a placement (set job.placement first)")
        if job.next_retry_at is not None and now < job.next_retry_at:
            raise illegal(f"restart back-off lasts until t={job.next_retry_at:.3f} (now {now:.3f})")
    infra = False if details is None else bool(details.get("infra"))
    if (
        to_state == S.PENDING
        and from_state in _RESTARTS_FROM
        and not infra
        and restarts_left(job) == 0
    ):
        raise illegal(
            f"no restarts left ({job.restart_count} of max_restarts={job.max_restarts}); "
            "move it to FAILED instead"
        )


def _requeue(
    job: Job,
    from_state: JobState,
    reason: str,
    now: float,
    retry: RetryPolicy,
    facts: dict[str, Any],
) -> None:
    job.placement = None
    job.finished_at = None
    job.estimated_start = None
    job.pending_reason = None
    job.next_retry_at = None
    if from_state not in _RESTARTS_FROM:  # preempted: back in line at once, not a restart
        return
    job.recover_first = True  # at the front of its queue until it starts again
    if facts.get("infra"):  # not the job's fault: no restart used, no back-off
        job.pending_reason = f"requeued after an infrastructure failure ({reason}), first in line"
        facts["infra"] = True
        return
    job.failure_streak += 1
    delay = retry.after_failures(job.failure_streak)
    job.restart_count += 1
    if delay > 0:
        job.next_retry_at = now + delay
        job.estimated_start = job.next_retry_at
        job.pending_reason = (
            f"restart {job.restart_count} of {job.max_restarts} after a failure: "
            f"waiting {delay:g} s of back-off ({job.failure_streak} failures in a row)"
        )
    else:
        job.pending_reason = f"restart {job.restart_count} of {job.max_restarts}, first in line"
    facts.setdefault("failure_streak", job.failure_streak)
    facts.setdefault("restart", job.restart_count)
    facts.setdefault("next_retry_at", job.next_retry_at)
