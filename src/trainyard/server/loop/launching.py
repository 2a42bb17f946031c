"""What the platform hands an executor to launch one attempt of a job, and its fences.

`launch_spec(row, attempt, token, node_name, virtual)` builds the `LaunchSpec` from the
job's stored spec and placement: the `hosts` in placement order (rank 0's node first), each
with its devices and ranks (`workers` per node; an elastic job started at another size runs
`devices / GPUs per rank` ranks there, its CPU and memory scaled with its GPUs). For the
local executor (`node_name` set) `devices` are the devices on this machine.

`job_token` issues the token of attempt N (the job's user, scoped to the job); `fence_tokens`
revokes the tokens of the job's earlier attempts, so a rank of an old attempt that is still
alive somewhere cannot report progress or checkpoints as the new one. `deferred` says
whether a STARTING job waits for the jobs evicted for it to stop. `refused` is a launch the
executor's device ledger turned down (the job waits in STARTING, a bug signal logged once).
"""

from __future__ import annotations

import logging
from pathlib import Path

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from trainyard.exec.run import DeviceBusy, Host, LaunchSpec
from trainyard.jobspec import spec_from_dict
from trainyard.server.db import ApiToken, Job, JobEvent, JobState
from trainyard.server.db.tokens import issue_token
from trainyard.server.metrics import PlatformMetrics

log = logging.getLogger(__name__)


def launch_spec(
    row: Job, attempt: int, token: str, node_name: str | None, virtual: bool
) -> LaunchSpec:
    spec = spec_from_dict(row.spec or {}, source=f"job {row.id} spec")
    entries = [(str(e["node"]), tuple(int(d) for d in e["devices"])) for e in row.placement or ()]
    if node_name is not None:  # the local executor: this machine only
        entries = [(node_name, tuple(d for n, ds in entries if n == node_name for d in ds))]
    per_rank = spec.gpus // spec.ranks if spec.gpus else 0
    hosts = tuple(
        Host(node, devices, max(1, len(devices) // per_rank) if per_rank and devices
             else spec.workers)
        for node, devices in entries
    )  # fmt: skip
    devices = tuple(d for h in hosts for d in h.devices)
    workers, scale = spec.workers, 1.0
    if spec.elastic is not None and spec.gpus and devices:
        # started at another size in its range: each rank keeps its GPUs, the job's CPU
        # and memory scale with its GPUs (as the core sized them)
        workers = max(1, len(devices) // per_rank)
        scale = row.gpus / spec.gpus  # the size it was started at (`write_decision`)
    elif len(hosts) == 1:
        workers = hosts[0].workers
    return LaunchSpec(
        job_id=row.id,
        command=list(spec.command),
        attempt=attempt,
        workers=workers,
        devices=devices,
        env=dict(spec.env),
        cwd=Path(spec.working_dir) if spec.working_dir else None,
        token=token,
        cpus=spec.cpus * scale if spec.cpus else spec.cpus,
        memory_gb=spec.memory_gb * scale if spec.memory_gb else spec.memory_gb,
        virtual_gpus=virtual,
        array=(row.array_id, row.array_index or 0) if row.array_id is not None else None,
        visible_devices=spec.visible_devices,
        hosts=hosts,
        resume_from=spec.resume_from,
    )


def job_token(s: Session, row: Job, attempt: int, now: float) -> str:
    """A token of the job's user scoped to this job: it reads this job only and works
    while the job is STARTING or RUNNING (`verify_token`). The platform commits it before
    the executor starts the ranks, so no database lock is held while the executor works."""
    user = row.user
    if user is None:
        return ""
    _token_row, token = issue_token(
        s, user, now=now, name=f"job {row.id} attempt {attempt}", job_id=row.id
    )
    return token


def drop_token(s: Session, row: Job, attempt: int) -> None:
    """Delete the token made for `attempt` of the job (a launch the executor refused: no
    process ever had it; a new one is made when the launch is tried again)."""
    name = f"job {row.id} attempt {attempt}"
    s.execute(delete(ApiToken).where(ApiToken.job_id == row.id, ApiToken.name == name))


def fence_tokens(s: Session, row: Job, attempt: int, now: float) -> None:
    """Revoke the tokens of the job's attempts before `attempt` (in the caller's unit)."""
    s.execute(
        update(ApiToken)
        .where(
            ApiToken.job_id == row.id,
            ApiToken.revoked_at.is_(None),
            ApiToken.name != f"job {row.id} attempt {attempt}",
        )
        .values(revoked_at=now)
    )


def deferred(session: Session, row: Job) -> bool:
    """Whether a STARTING job waits for evicted jobs (`scheduling.ready_to_launch`)."""
    if row.state != JobState.STARTING:
        return False
    event = session.scalars(
        select(JobEvent)
        .where(JobEvent.job_id == row.id, JobEvent.to_state == JobState.STARTING)
        .order_by(JobEvent.id.desc())
        .limit(1)
    ).first()
    return bool(event is not None and (event.details or {}).get("after_evictions"))


def refused(
    s: Session, row: Job, busy: DeviceBusy, blocked: dict[str, str], metrics: PlatformMetrics
) -> None:
    """The executor would not start `row` on devices a live run holds: it waits in STARTING
    (its token dropped) with the reason, and is tried again every step. A bug signal of the
    scheduler's, logged and counted once per cause (`blocked`: job -> its last reason)."""
    held = ", ".join(f"{d} (job {j})" for d, (j, _a) in sorted(busy.holders.items()))
    reason = f"waiting for devices still held by live runs: {held}"
    if blocked.get(row.id) != reason:
        metrics.booking_conflicts.inc(stage="launch")
        log.error("bug signal: job %s was placed on devices a live run holds (%s); it "
                  "waits until they are free", row.id, held)  # fmt: skip
    blocked[row.id] = reason
    fresh = s.get(Job, row.id)
    if fresh is not None and fresh.state == JobState.STARTING:
        fresh.pending_reason = reason
