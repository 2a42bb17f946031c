"""How the platform judges a run that ended or stalled: whose fault, healthy, hung.

- `failure(row, status, attempt)`: the reason and event details of a job's failure. A run
  the executor lost (no record, a node gone, a rank's supervisor dead: `RunStatus.infra`)
  is an infrastructure failure (`infra: true`): the job is requeued first in line, at no
  cost (`lifecycle`). A rank that exited non-zero or was killed by a signal is the job's own
  failure: it uses a restart (the first one after a healthy run is immediate).
- `gpu_fault(session, row, reason, details)`: a run that failed while one of its GPUs is
  marked UNHEALTHY (a fault the GPU checks found, loop/nodewatch.py) failed because of the
  hardware: the failure becomes the infrastructure's, with the fault as its message.
- `progressed(session, row, attempt)`: the attempt reported training progress through the
  SDK (`POST /v1/jobs/{id}/reports`): a healthy run, which resets the failure streak.
- `stalled(session, row, now, timeout_s)`: for a job that reports progress, the reason it
  counts as hung when no report came for `timeout_s` (from the later of its last report in
  this attempt and its start), else "". Jobs that never reported are not judged (a
  SIGSTOPped or deadlocked rank of such a job is found by the operator, not here).
  The run is then asked to stop with that reason, and the job holds its devices until no
  process of the run is left; `hung_stop(run_dir)` reads the reason back from the run's
  `stop.json` (after a server restart too).
- `over_time(row, now)`: the reason an attempt is past its spec's `time_limit_s` (from this
  attempt's start; Slurm's TIMEOUT), stopped the same way; `stopped_for(status, why)` is the
  outcome of either stop: failed, and after a time limit not retried (`RunStatus.final`).
- `on_lost_nodes(session)`: RUNNING jobs placed on a node the executor reports LOST. Their
  runs are stopped everywhere and they fail as the infrastructure's failure, even when the
  engine has not (yet) reported their ranks gone (a node cut off keeps its processes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from trainyard.exec import jobdirs
from trainyard.exec.run import RunStatus
from trainyard.server.db import Health, Job, JobProgress, Node
from trainyard.server.loop import drain

HUNG = "hung:"  # how the reason of a stop for a stalled run begins
TIME_LIMIT = "time limit:"  # ... and of one for a run past its time limit (`spec.time_limit_s`)


def failure(row: Job, status: RunStatus | None, attempt: int) -> tuple[str, dict[str, Any]]:
    if status is None:
        message = f"run lost: no record of attempt {attempt} on its executor"
        lost: dict[str, Any] = {"exit_code": None, "rank": None, "run_state": "lost"}
        return "run lost", {**lost, "message": message, "infra": True}
    rank = status.first_failed_rank
    code = status.exit_codes.get(rank) if rank is not None else None
    infra = status.infra or status.state == "lost"
    details: dict[str, Any] = {
        "exit_code": code,
        "rank": rank,
        "run_state": status.state,
        "message": status.reason or status.state,
        "infra": infra,
    }
    if infra:
        reason = f"rank {rank} lost" if rank is not None else f"run {status.state}"
    elif rank is None:
        reason = status.reason[:64] if status.reason else f"run {status.state}"
    elif status.final:  # (a time limit names no rank)
        reason = f"rank {rank} could not start"
    else:
        reason = f"rank {rank} exited with code {code}"
    return reason, details


def gpu_fault(session: Session, row: Job, reason: str, details: dict[str, Any]) -> str:
    """The failure's reason, made the infrastructure's in `details` when a GPU of the run
    is marked UNHEALTHY (module docstring)."""
    if details.get("infra"):
        return reason
    held: dict[str, set[int]] = {}
    for part in row.placement or ():
        held.setdefault(str(part["node"]), set()).update(int(d) for d in part["devices"])
    if not held:
        return reason
    for node in session.scalars(select(Node).where(Node.name.in_(list(held)))):
        bad = [d.index for d in node.devices
               if d.health == Health.UNHEALTHY and d.index in held[node.name]]  # fmt: skip
        if bad:
            why = node.drain_reason or f"GPU {bad[0]} unhealthy"
            details["infra"] = True
            details["message"] = f"{details.get('message', '')}; GPU fault on {node.name}: {why}"
            return f"GPU fault on node {node.name}"
    return reason


def _progress(session: Session, job_id: str) -> tuple[int, float] | None:
    got = session.execute(
        select(JobProgress.attempt, JobProgress.updated_at).where(JobProgress.job_id == job_id)
    ).first()
    return (int(got[0]), float(got[1])) if got is not None else None


def progressed(session: Session, row: Job, attempt: int) -> bool:
    got = _progress(session, row.id)
    return bool(got is not None and got[0] == attempt and row.started_at is not None
                and got[1] >= row.started_at)  # fmt: skip


def stalled(session: Session, row: Job, now: float, timeout_s: float) -> str:
    if timeout_s <= 0 or row.started_at is None:
        return ""
    got = _progress(session, row.id)
    if got is None:
        return ""
    attempt = max(0, row.attempt - 1)
    since = max(got[1], row.started_at) if got[0] == attempt else row.started_at
    if now - since < timeout_s:
        return ""
    return f"{HUNG} no progress reported for {now - since:.0f} s (timeout {timeout_s:g} s)"


def hung_stop(run_dir: Path) -> str:
    """The reason of a stop sent to the run because it was hung (`stalled`) or past its time
    limit (`over_time`), else ""."""
    stop = jobdirs.stop_record(run_dir)
    return stop[1] if stop is not None and stop[1].startswith((HUNG, TIME_LIMIT)) else ""


def stopped_for(status: RunStatus, why: str) -> RunStatus:
    """The outcome of a run stopped as hung or past its time limit (`why`, the stop's reason)
    however its ranks exited on the notice: failed; not retried after a time limit, which a
    restart would reach again (`RunStatus.final`)."""
    return RunStatus("failed", status.exit_codes, None, True, why, ended_at=status.ended_at,
                     final=why.startswith(TIME_LIMIT))  # fmt: skip


def over_time(row: Job, now: float) -> str:
    """Why a RUNNING job's attempt is past its spec's `time_limit_s` (Slurm's TIMEOUT), else
    "": the limit counts from this attempt's start, as a requeued Slurm job's does."""
    limit = (row.spec or {}).get("time_limit_s")
    if not isinstance(limit, int | float) or limit <= 0 or row.started_at is None:
        return ""
    ran = now - row.started_at
    if ran < limit:
        return ""
    return f"{TIME_LIMIT} ran {ran:.0f} s, the job's limit is {limit:g} s (-t/--time)"


def on_lost_nodes(session: Session) -> dict[str, str]:
    """RUNNING jobs with a device on a LOST node -> that node's name."""
    lost = set(session.scalars(select(Node.name).where(Node.health == Health.LOST)))
    return drain.running_on(session, lost)
