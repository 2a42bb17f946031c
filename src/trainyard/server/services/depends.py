"""Dependencies between jobs, and job arrays: checked at submit, kept by the scheduler loop.

At submit (`check`), every job or array a spec's ``after:`` names must exist in the
submitter's tenant (else 422 on `after[i].job`: a tenant cannot learn of, or wait on,
another tenant's jobs), and an `ok` dependency must still be able to succeed (a job that
already FAILED with no restart left, or was CANCELLED, is a 422 naming `:any`). Each round,
before the core runs (`gate`), the loop:
- holds a pending job whose dependencies are not met yet, with the reason
  `dependency: waiting for job J to succeed (it is RUNNING)`;
- cancels a pending job whose `ok` dependency can no longer be met (the job failed or was
  cancelled, or an array member did), with the event reason `dependency failed: J FAILED`,
  as Slurm does with `kill_invalid_depend` (a job that waited forever would hide the
  failure from the user and from `trainyard wait`);
- holds the members of an array beyond its `%N` throttle, with the reason
  `array: A has N of its jobs running (at most N at once)`.
A dependency on an array (`a-...`) is met when every member is (ok: all succeeded; any: all
ended) and fails when one member fails. A dependency that no longer exists (removed by
`admin gc`, which removes only ended jobs) counts as ended, and as failed for `ok`: its
outcome is unknown.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from trainyard.server.api.auth import Principal
from trainyard.server.api.errors import ApiError
from trainyard.server.db.base import JobState
from trainyard.server.db.jobs import Job

S = JobState
ENDED = frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED})
# states in which an array member counts against its array's throttle
ACTIVE = frozenset({S.STARTING, S.RUNNING, S.RESIZING, S.PREEMPTED})


def check(sessions: sessionmaker[Session], who: Principal, after: list[dict[str, str]]) -> None:
    """Refuse (422 on `after[i].job`) a dependency on a job or array not in the tenant."""
    ids = [d["job"] for d in after]
    with sessions() as s:
        jobs = set(s.scalars(select(Job.id).where(Job.id.in_(ids), Job.tenant_id == who.tenant_id)))
        arrays = set(
            s.scalars(
                select(Job.array_id)
                .where(Job.array_id.in_(ids), Job.tenant_id == who.tenant_id)
                .distinct()
            )
        )
        found = _states(s, ids)
    for k, dep in enumerate(after):
        if dep["job"] not in jobs and dep["job"] not in arrays:
            raise ApiError(
                422,
                f"no job or array {dep['job']!r} of yours exists; give the id `trainyard "
                "submit` printed (see `trainyard jobs`)",
                field=f"after[{k}].job",
            )
        states = found.get(dep["job"], [])
        if dep["condition"] == "ok" and _outcome([st for _j, st in states], "ok") == "failed":
            j, st = next((j, st) for j, st in states if st in (S.FAILED, S.CANCELLED))
            raise ApiError(
                422,
                f"job {j} already ended {S(st).value}, so a dependency on its success can "
                f"never be met; use {dep['job']}:any to run after it anyway, or resubmit it",
                field=f"after[{k}].job",
            )  # as Slurm refuses a dependency that can never be satisfied


def check_resume(sessions: sessionmaker[Session], who: Principal, job_id: str) -> None:
    """Refuse (422 on `resume_from`) a job to start from that is not the caller's own, or
    has not ended (its checkpoints would change under the copy)."""
    with sessions() as s:
        job = s.get(Job, job_id)
        mine = job is not None and job.tenant_id == who.tenant_id and job.user_id == who.user_id
        state = S(job.state) if job is not None else None
    if not mine:
        raise ApiError(
            422, f"no job {job_id!r} of yours exists; give the id of a job you submitted "
            "(see `trainyard jobs --all`)",
            field="resume_from",
        )  # fmt: skip
    if state not in ENDED:
        raise ApiError(
            422, f"job {job_id} is {state.value if state else '?'}: its checkpoints are still "
            f"being written; cancel it first (trainyard cancel {job_id}), or wait for it",
            field="resume_from",
        )  # fmt: skip


@dataclass
class Gate:
    """One round's outcome: reasons of the jobs held, and the jobs to cancel (id -> why)."""

    held: dict[str, str] = field(default_factory=dict)
    cancel: dict[str, str] = field(default_factory=dict)


# a FAILED job with restarts left is waiting out its back-off: it will run again
RETRYING = "restarting"


def _outcome(states: list[JobState | str], condition: str) -> str:
    """`met`, `failed` or `waiting` for a dependency whose job(s) are in `states` (a job
    FAILED with restarts left is `RETRYING`: not ended)."""
    if not states:
        return "met" if condition == "any" else "failed"  # gone: ended, outcome unknown
    if condition == "ok" and any(s in (S.FAILED, S.CANCELLED) for s in states):
        return "failed"
    if condition == "ok":
        return "met" if all(s == S.SUCCEEDED for s in states) else "waiting"
    return "met" if all(s in ENDED for s in states) else "waiting"


def _states(session: Session, ids: Iterable[str]) -> dict[str, list[tuple[str, JobState | str]]]:
    """Dependency id -> [(job id, state)] of the job, or of an array's members; a job FAILED
    with restarts left is `RETRYING` (found by an outside review: an `ok` dependent was
    cancelled while its dependency waited to be restarted)."""
    wanted = sorted(set(ids))
    out: dict[str, list[tuple[str, JobState | str]]] = defaultdict(list)
    if not wanted:
        return out
    query = select(Job.id, Job.state, Job.array_id, Job.restart_count, Job.max_restarts).where(
        Job.id.in_(wanted) | Job.array_id.in_(wanted)
    )
    for job_id, state, array_id, restarts, most in session.execute(query):
        seen: JobState | str = JobState(state)
        if seen == S.FAILED and restarts < most:
            seen = RETRYING
        if job_id in wanted:
            out[job_id].append((job_id, seen))
        if array_id in wanted:
            out[array_id].append((job_id, seen))
    return out


def gate(session: Session, pending: Iterable[str] | None = None) -> Gate:
    """What the round must hold back or cancel among the PENDING jobs (see the module
    docstring); `pending` restricts it to these ids (None: every pending job)."""
    out = Gate()
    query = select(Job.id, Job.after).where(Job.state == S.PENDING, Job.after.is_not(None))
    rows: list[Any] = list(session.execute(query))
    wanted = set(pending) if pending is not None else None
    deps = _states(session, (d["job"] for _id, after in rows for d in after or ()))
    for job_id, after in rows:
        if wanted is not None and job_id not in wanted:
            continue
        for dep in after or ():
            found = deps.get(dep["job"], [])
            verdict = _outcome([state for _j, state in found], dep["condition"])
            if verdict == "failed":
                bad = next((f"{j} {S(s).value}" for j, s in found if s in (S.FAILED, S.CANCELLED)),
                           f"{dep['job']} (no longer stored)")  # fmt: skip
                out.cancel[job_id] = f"dependency failed: {bad}"
                break
            if verdict == "waiting":
                first = next(((j, s) for j, s in found if s not in ENDED), found[0])
                need = "succeed" if dep["condition"] == "ok" else "end"
                what = f"job {first[0]}" if first[0] == dep["job"] else (
                    f"array {dep['job']} (job {first[0]})"
                )  # fmt: skip
                shown = "FAILED, to be restarted" if first[1] == RETRYING else str(first[1])
                out.held[job_id] = f"dependency: waiting for {what} to {need} (it is {shown})"
                break
    _throttle(session, out)
    return out


def _throttle(session: Session, out: Gate) -> None:
    """Hold the members of arrays beyond their `%N` throttle (lowest indexes go first)."""
    query = (
        select(Job.id, Job.array_id, Job.array_limit, Job.state)
        .where(Job.array_limit.is_not(None), Job.state.in_([S.PENDING, *ACTIVE]))
        .order_by(Job.array_id, Job.array_index)
    )
    members: dict[str, list[tuple[str, int, JobState]]] = defaultdict(list)
    for job_id, array_id, limit, state in session.execute(query):
        if array_id is not None and limit is not None:
            members[array_id].append((job_id, int(limit), JobState(state)))
    for array_id, rows in members.items():
        limit = rows[0][1]
        active = sum(1 for _j, _l, state in rows if state in ACTIVE)
        room = limit - active
        for job_id, _limit, state in rows:
            if state != S.PENDING or job_id in out.cancel or job_id in out.held:
                continue
            if room > 0:
                room -= 1
                continue
            out.held[job_id] = (
                f"array: {array_id} has {active} of its jobs started (at most "
                f"{limit} at once: --array ...%{limit})"
            )
