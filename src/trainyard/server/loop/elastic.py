"""Live resize of running elastic jobs (issue 15): the database side.

The core plans a resize (`core.Resize`: a running elastic job moved to a new placement, the
reason, and the jobs whose devices it takes that must stop first). Here:

- `running_job`: a RUNNING, preemptible elastic job is given to the core with its size range
  and what the goodput model knows of it: the batch range of its spec, the step times it
  reported at each size and placement, its gradient statistics (`services/reports.py`), and
  how often it was restarted (`Job.restarts`: the resize action weighs another restart
  against them). Other jobs that hold devices are given at the size they hold.
- `write_resizes` (in the decision's transaction): RUNNING -> RESIZING with the event
  `resize 1 -> 4: <the core's reason>` (details: GPUs from/to, the new placement, the jobs
  to wait for). While RESIZING the job holds the union of its old and new devices
  (`Job.placement`; the new placement is kept in `Job.resize_to`): its run still uses the
  old ones until it has stopped, and nobody may take the new ones meanwhile.
- `remember_notes` / `write_notes`: why the core did not grow a running elastic job into
  idle GPUs (`core.NotGrown`), stored on the job when it changes (`Job.resize_note`,
  `resize_note_until`; `trainyard describe` shows it), in one UPDATE for those that
  changed and without touching the row's version (`db.jobs.set_while`).
- The platform then stops the run (notice `resize`, SIGTERM: the SDK checkpoints and exits
  85), and once no process of it is left, `relaunch` moves it RESIZING -> STARTING on the
  new placement (`resized 1 -> 4`) and it is launched at the new world size, resuming from
  its checkpoint. A resize is not a failure: it does not count against `max_restarts`.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from trainyard import core
from trainyard.core import Decision
from trainyard.jobspec import spec_from_dict
from trainyard.server.db import Job as JobRow
from trainyard.server.db import JobState
from trainyard.server.db.jobs import set_while
from trainyard.server.lifecycle import transition
from trainyard.server.metrics import PLATFORM

S = JobState


def movable(row: JobRow) -> bool:
    """Whether the core may resize this running job now (elastic, RUNNING, preemptible)."""
    return row.state == S.RUNNING and row.min_gpus is not None and row.preemptible


def elastic_of(row: JobRow, reported: core.Elastic | None) -> core.Elastic | None:
    """The goodput model's facts of an elastic job: its spec's batch range and what it
    reported (None when the spec cannot be read: the core then uses its prior)."""
    try:
        spec = spec_from_dict(row.spec or {}, source=f"job {row.id} spec")
    except Exception:  # a stored spec is valid; never let one stop the round
        return reported
    base = spec.elastic.core_elastic() if spec.elastic is not None else core.Elastic()
    if reported is None:
        return base
    return core.Elastic(
        batch=base.batch, max_batch=base.max_batch, max_local_batch=base.max_local_batch,
        samples=reported.samples, grad_sqr=reported.grad_sqr, grad_var=reported.grad_var,
        remaining=reported.remaining,
    )  # fmt: skip


def union(a: list[Any] | None, b: list[Any] | None) -> list[dict[str, Any]]:
    """Two placement documents as one (each node's devices, sorted, no repeats)."""
    devices: dict[str, set[int]] = {}
    for entry in (*(a or ()), *(b or ())):
        devices.setdefault(str(entry["node"]), set()).update(int(d) for d in entry["devices"])
    return [{"node": node, "devices": sorted(ds)} for node, ds in devices.items()]


def gpus_of(placement: list[Any] | None) -> int:
    return sum(len(entry["devices"]) for entry in placement or ())


def write_resizes(
    session: Session, decision: Decision, now: float, get: Any, placement_json: Any
) -> list[str]:
    """RUNNING -> RESIZING for each resize of `decision` (see the module docstring); the
    ids of the jobs whose runs must now stop. `get` reads a row checking its version."""
    out = []
    for r in decision.resizes:
        row: JobRow = get(session, r.job_id)
        new = placement_json(r.nodes)
        size = gpus_of(new)
        details = {
            "gpus": {"from": row.gpus, "to": size}, "placement": new, "why": r.reason,
            "after_evictions": list(r.after_evictions),
        }  # fmt: skip
        transition(session, row, S.RESIZING, reason=f"resize {row.gpus} -> {size}"[:64],
                   now=now, details=details)  # fmt: skip
        row.placement = union(row.placement, new)
        row.resize_to = new
        row.resize_note = row.resize_note_until = None  # it grows (or shrinks): no note
        PLATFORM.resizes.inc(kind="grow" if size > details["gpus"]["from"] else "shrink")
        out.append(r.job_id)
    return out


_NOTES = "trainyard.elastic.notes"  # session.info: movable job id -> (note, until) as read


def remember_notes(session: Session, rows: list[JobRow]) -> None:
    """Keep the notes the movable ones of `rows` have (read by `load_snapshot`)."""
    notes = {r.id: (r.resize_note, r.resize_note_until) for r in rows if movable(r)}
    session.info[_NOTES] = notes


def write_notes(session: Session, decision: Decision) -> None:
    """Store the decision's note on each job `remember_notes` read whose note changed (None
    where it has none now), while the job is still RUNNING."""
    changed = []
    for job_id, before in session.info.get(_NOTES, {}).items():
        note = decision.not_grown.get(job_id)
        now = (note.reason, note.until) if note is not None else (None, None)
        if now != before:
            changed.append({"id": job_id, "resize_note": now[0], "resize_note_until": now[1]})
    set_while(session, S.RUNNING, changed)


def relaunch(session: Session, row: JobRow, now: float) -> bool:
    """RESIZING -> STARTING on the new placement, once the old run has stopped; whether it
    may be launched now (False: it waits for jobs whose devices it takes to stop first,
    and `scheduling.ready_to_launch` launches it then)."""
    new = row.resize_to or row.placement
    before, after = row.gpus, gpus_of(new)
    waits = [
        str(j)
        for j in _latest_resize_details(row).get("after_evictions", [])
        if (other := session.get(JobRow, str(j))) is not None
        and other.state in (S.PREEMPTED, S.RESIZING)
    ]
    row.placement, row.resize_to, row.gpus = new, None, after
    details: dict[str, Any] = {"placement": new, "gpus": {"from": before, "to": after}}
    if waits:
        details["after_evictions"] = waits
        row.pending_reason = "waiting for evicted jobs to stop: " + ", ".join(waits)
    transition(session, row, S.STARTING, reason=f"resized {before} -> {after}", now=now,
               details=details)  # fmt: skip
    return not waits


def _latest_resize_details(row: JobRow) -> dict[str, Any]:
    for event in reversed(row.events):
        if event.to_state == S.RESIZING:
            return dict(event.details or {})
    return {}
