"""The database side of the scheduling loop: snapshot in, decision applied, executor told.

One round (`run_once`): `load_snapshot` reads the cluster from the database, the pure core
decides (`trainyard.core.run_cycle`), `write_decision` writes the decision in ONE transaction
and returns an `Applied` saying which jobs the executor must launch and which it must stop.

Decisions taken here:

- Nodes and queues as `loop/cluster_rows.py` reads them (devices not healthy are
  `unavailable`; a node not healthy or not `schedulable` takes no new work).
- Jobs that hold devices: RUNNING jobs are `RunningJob`s (attained service grown up to
  `now`). STARTING, RESIZING and PREEMPTED jobs hold their devices too, but cannot be evicted
  now (no lifecycle edge from them to PREEMPTED), so they are given as non-preemptible. A
  PREEMPTED job is still stopping: it holds whatever of its devices no STARTING / RUNNING job
  has been given in the meantime (see the next point). A RESIZING job holds its new devices
  and those of its old ones nobody was given: a job it shrinks for may be STARTING on the
  rest while it stops. A job cancelled or failed while its run still has processes (the
  platform's `stopping`) holds its devices as a PREEMPTED one does, until the run is gone.
- `after_evictions`: a placement whose devices are being freed by evictions moves the job to
  STARTING at once, with its placement stored, so the next cycle sees the devices as taken
  and cannot give them (or more victims) to anyone else. The executor is NOT told to launch
  it: `Applied.deferred` lists it, the STARTING event's details carry `after_evictions`, and
  `pending_reason` says what it waits for. `ready_to_launch` lists the deferred jobs whose
  victims have all left PREEMPTED; the loop launches them then.
- Every decision is checked against the booking contract (`core.audit`: no device, CPU or
  memory serves two live jobs, evicted jobs counting as live until they stop) before it is
  applied; a breach is a scheduler bug, logged with
  `trainyard_booking_conflicts_total{stage="decision"}`. The decision is applied as it is:
  the executor's device ledger refuses the launch that would breach it (`platform.py`).
- Elastic jobs (`min_gpus`/`max_gpus` set): a pending one may start at any size in its range
  (the STARTING event's details say `gpus: {asked, started}`); a RUNNING one is given with
  its range and measured steps, and the core's resizes are carried out (`loop/elastic.py`).
  A tenant over its budget may not grow one: its top is its current size.
- Pending reasons are stored as `"<code>: <message>"` (`split_reason` reads them back).
- Dependencies and array throttles (`services/depends.py`): pending jobs whose `after:` is
  not met, or beyond their array's `%N`, are left out of the round with their reason, as a
  tenant over budget is; a job whose `ok` dependency failed is CANCELLED in the round's
  transaction, the reason in its event.
- Concurrency: load and apply must use the same session; every write of a job row checks its
  `version` against the one read by `load_snapshot` (pending jobs are read as plain rows, so
  their versions are kept in `session.info`). Pending reasons are informational: only the
  changed ones are written, in one statement, and a job that left PENDING meanwhile is
  skipped rather than failing the round. A job changed concurrently
  (`StaleDataError`), or one no longer in the state the snapshot showed (`IllegalTransition`),
  rolls the whole transaction back and returns `Applied(retry=True, ...)`; the caller runs a
  fresh round.
- Topology levels are not stored in the database yet: `load_snapshot` takes a `Topology`, or
  `cluster_rows.topology_of` names them after the length of the nodes' `topology_path`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session
from sqlalchemy.orm.exc import StaleDataError

from trainyard import core
from trainyard.core import Decision, NodeDevices, Snapshot, Topology
from trainyard.core.audit import booking_conflicts
from trainyard.runtime import gc_paused
from trainyard.server.db import Job as JobRow
from trainyard.server.db import JobEvent, JobState
from trainyard.server.db.jobs import set_while
from trainyard.server.lifecycle import HOLDS_DEVICES, IllegalTransition, transition
from trainyard.server.loop import cluster_rows, elastic, parking
from trainyard.server.loop.budgets import Budgets
from trainyard.server.loop.cluster_rows import topology_of
from trainyard.server.loop.fairshare import FairShare
from trainyard.server.loop.gauges import refresh_gauges
from trainyard.server.loop.pending import PendingCache
from trainyard.server.loop.spares import Spares
from trainyard.server.metrics import PLATFORM, PlatformMetrics
from trainyard.server.services import depends, reports

__all__ = [
    "Applied",
    "Launch",
    "load_snapshot",
    "placement_json",
    "ready_to_launch",
    "refresh_gauges",
    "run_once",
    "split_reason",
    "topology_of",
    "write_decision",
]

log = logging.getLogger(__name__)

S = JobState
_HELD = "trainyard.scheduling.held"  # session.info: job id -> reason (loop/budgets.py)
_PARKED = "trainyard.scheduling.parked"  # session.info: job id -> reason (loop/parking.py)
_CANCEL = "trainyard.scheduling.cancel"  # session.info: job id -> why (services/depends.py)
_SEEN = "trainyard.scheduling.seen"  # session.info: job id -> (version, reason, start) read
_UNEVICTABLE = frozenset({S.STARTING, S.RESIZING, S.PREEMPTED})


@dataclass(frozen=True, slots=True)
class Launch:
    """A job the executor should start on these devices."""

    job_id: str
    placement: tuple[NodeDevices, ...]
    after_evictions: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Applied:
    """What one applied decision asks of the executor.

    `launch`: start now. `deferred`: STARTING, to be launched once `after_evictions` stopped.
    `stop`: evicted (now PREEMPTED), to be stopped. `resize`: RESIZING, to be stopped and
    relaunched. `retry`: nothing was written (a job changed concurrently); `error` says why."""

    launch: tuple[Launch, ...] = ()
    deferred: tuple[Launch, ...] = ()
    stop: tuple[str, ...] = ()
    pending: int = 0
    retry: bool = False
    error: str = ""
    decision: Decision | None = field(default=None, compare=False)
    resize: tuple[str, ...] = ()


def placement_json(nodes: Iterable[NodeDevices]) -> list[dict[str, Any]]:
    """The `Job.placement` document of a placement."""
    return [{"node": nd.node, "devices": [int(d) for d in nd.devices]} for nd in nodes]


def _started(row: JobRow) -> float:
    """When the core should take `row`'s run to have (re)started: a STARTING or RESIZING job
    is starting a new run now (since it entered that state; `started_at` still holds its
    previous run's start until it is RUNNING again), so a move is not judged over the quiet
    before it (outside review 16, F7), and its expected end counts from the new run, as it
    will once it runs."""
    if row.state in (S.STARTING, S.RESIZING) or row.started_at is None:
        return row.state_changed_at
    return row.started_at


def _kept(
    placement: tuple[NodeDevices, ...], claimed: set[tuple[str, int]], own: set[tuple[str, int]]
) -> tuple[NodeDevices, ...]:
    """`placement` less the devices in `claimed` that are not in `own`."""
    out = []
    for nd in placement:
        devices = tuple(d for d in nd.devices if (nd.node, d) in own or (nd.node, d) not in claimed)
        if devices:
            out.append(NodeDevices(nd.node, devices))
    return tuple(out)


def _placement(doc: list[Any] | None) -> tuple[NodeDevices, ...]:
    return tuple(
        NodeDevices(str(e["node"]), tuple(int(d) for d in e["devices"])) for e in doc or ()
    )


def split_reason(text: str | None) -> tuple[str, str]:
    """(code, message) of a stored pending reason (`""` code when it has none)."""
    if not text:
        return "", ""
    code, sep, message = text.partition(": ")
    if sep and code.isidentifier():
        return code, message
    return "", text


def _job(row: Any, queue: str, **changes: Any) -> core.Job:
    """The core's view of a job row (an ORM `Job` or a plain row with the same names)."""
    values: dict[str, Any] = {
        "id": row.id,
        "queue": queue,
        "gpus": row.gpus,
        "priority": row.priority,
        "submit_time": row.submitted_at,
        "gpu_types": tuple(str(t) for t in row.gpu_types or ()),
        "gpu_memory_gb": row.gpu_memory_gb,
        "cpus": row.cpus,
        "memory_gb": row.memory_gb,
        "preemptible": row.preemptible,
        "min_runtime": row.min_runtime,
        "expected_duration": row.expected_duration,
        "attained_service": row.attained_service,
        "topology": row.topology,
        "nodes": row.nodes,
        "name": row.name,
        "min_gpus": row.min_gpus,
        "max_gpus": row.max_gpus,
        "recovering": bool(row.recover_first),
    }
    values.update(changes)
    return core.Job(**values)


def load_snapshot(
    session: Session,
    now: float,
    topology: Topology | None = None,
    cache: PendingCache | None = None,
    fairshare: FairShare | None = None,
    budgets: Budgets | None = None,
    spares: Spares | None = None,
    stopping: frozenset[str] = frozenset(),
    live: Callable[[str], bool] | None = None,
    avoid: frozenset[str] = frozenset(),
) -> Snapshot:
    """The cluster as the core sees it at `now` (see the module docstring for the rules).
    Pending jobs come from `cache` (`pending.PendingCache`, kept across rounds) when given;
    each queue's usage history from `fairshare` (`fairshare.FairShare`) when given; hot
    spares are marked by `spares` (`spares.Spares`) when given. `stopping`: jobs that left
    the states that hold devices (cancelled, failed) while their run still has processes:
    they hold their devices, as a preempted victim does, until the platform sees it gone.
    With `live`, `stopping` may name every job with a run and `live(job_id)` is asked, after
    the job states are read, whether a run of a job in another state still has processes:
    a job cancelled after the platform last looked at its run is held all the same. Nodes
    in `avoid` (a launch found them gone) take no new work this round."""
    nodes, depth = cluster_rows.nodes(session)
    if avoid:
        nodes = tuple(
            replace(n, schedulable=False, down=n.down or "unreachable") if n.name in avoid else n
            for n in nodes
        )
    total = sum(n.gpus for n in nodes)
    usage = fairshare.shares(session, now, total) if fairshare is not None else {}
    queues, queue_names = cluster_rows.queues(session, usage)
    if topology is None:
        topology = topology_of(depth)
    holds = JobRow.state.in_(HOLDS_DEVICES)
    holding = list(session.scalars(select(JobRow).where(holds).order_by(JobRow.id)))
    # of the jobs with a run, those in another state (few; one id per live run would make the
    # query grow with the cluster), after the others, held while the run has processes
    ended = sorted(stopping - {r.id for r in holding})
    for first in range(0, len(ended), 500):
        chunk = JobRow.id.in_(ended[first : first + 500])
        for row in session.scalars(select(JobRow).where(chunk).order_by(JobRow.id)):
            if row.state not in HOLDS_DEVICES and (live is None or live(row.id)):
                holding.append(row)
    reported = reports.observations(session, (r.id for r in holding if elastic.movable(r)))
    elastic.remember_notes(session, holding)
    over = budgets.over(session, now) if budgets is not None else {}
    taken: set[tuple[str, int]] = set()
    running: list[core.RunningJob] = []
    # Jobs starting or running first: they own the devices a stopping job frees. Then the
    # resizing jobs: each holds its new devices and those of its old ones nobody was given
    # (a job it shrinks for may be STARTING on the rest, waiting for it to stop). Then the
    # preempted victims, likewise.
    ordered = [r for r in holding if r.state in HOLDS_DEVICES - {S.PREEMPTED, S.RESIZING}]
    resizing = [r for r in holding if r.state == S.RESIZING]
    targets = {(nd.node, d) for r in resizing for nd in _placement(r.resize_to) for d in nd.devices}
    for row in ordered + resizing:
        if not row.placement:
            continue
        placement = _placement(row.placement)
        if row.state == S.RESIZING:
            own = {(nd.node, d) for nd in _placement(row.resize_to) for d in nd.devices}
            placement = _kept(placement, taken | targets, own)
            if not placement:
                continue
        taken.update((nd.node, d) for nd in placement for d in nd.devices)
        started = _started(row)
        service = row.attained_service
        if row.state == S.RUNNING:
            service += row.gpus * max(0.0, now - started)
        preemptible = row.preemptible and row.state not in _UNEVICTABLE
        size: dict[str, Any] = {"min_gpus": None, "max_gpus": None}  # held at its size
        if elastic.movable(row):  # RUNNING and elastic: the core may resize it
            facts = elastic.elastic_of(row, reported.get(row.id))
            top = row.max_gpus  # a tenant over its budget may shrink, not grow (budgets.py)
            if row.tenant_id in over:
                top = row.gpus if top is None else min(top, row.gpus)
            size = {"min_gpus": row.min_gpus, "max_gpus": top, "elastic": facts,
                    "restarts": max(0, row.attempt - 1)}  # fmt: skip
        elif row.state == S.RESIZING:  # holds its old and new devices until relaunched
            size["gpus"] = sum(len(nd.devices) for nd in placement)
        job = _job(
            row, queue_names[row.queue_id], attained_service=service, preemptible=preemptible,
            **size,
        )  # fmt: skip
        running.append(core.RunningJob(job=job, placement=placement, started_at=started))
    for row in holding:  # stopping runs hold what nobody was given yet
        if row.state in HOLDS_DEVICES - {S.PREEMPTED} or not row.placement:
            continue
        if row.queue_id not in queue_names:
            continue  # its queue was deleted: nothing can be placed by it, nor fairly counted
        left = []
        for nd in _placement(row.placement):
            devices = tuple(d for d in nd.devices if (nd.node, d) not in taken)
            if devices:
                left.append(NodeDevices(nd.node, devices))
        gpus = sum(len(nd.devices) for nd in left)
        if not left or (row.gpus and not gpus):
            continue
        started = _started(row)
        job = _job(
            row, queue_names[row.queue_id], gpus=gpus, preemptible=False, min_gpus=None,
            max_gpus=None,
        )  # fmt: skip
        running.append(core.RunningJob(job=job, placement=tuple(left), started_at=started))
    if spares is not None:
        nodes = spares.mark(nodes, {nd.node for r in running for nd in r.placement})
    pending_cache = cache if cache is not None else PendingCache()  # (an empty one is falsy)
    pending, seen = pending_cache.load(session, now, queue_names, _job)
    session.info[_SEEN] = seen
    held: dict[str, str] = {}
    if over:  # tenants that spent their budget start nothing new (loop/budgets.py)
        rows = session.execute(
            select(JobRow.id, JobRow.tenant_id).where(
                JobRow.state == S.PENDING, JobRow.tenant_id.in_(list(over))
            )
        )
        held = {job_id: over[tenant] for job_id, tenant in rows}
    gate = depends.gate(session)  # dependencies and array throttles
    held.update((job_id, why) for job_id, why in gate.held.items() if job_id not in held)
    if held or gate.cancel:
        pending = [j for j in pending if j.id not in held and j.id not in gate.cancel]
    session.info[_HELD] = held
    session.info[_CANCEL] = gate.cancel
    return Snapshot(
        now=now,
        nodes=nodes,
        topology=topology,
        queues=queues,
        running=tuple(running),
        pending=tuple(pending),
    )


def _get(session: Session, job_id: str) -> JobRow:
    row = session.get(JobRow, job_id)
    if row is None:
        raise StaleDataError(f"job {job_id} disappeared")
    seen = session.info.get(_SEEN, {}).get(job_id)
    if seen is not None and row.version != seen[0]:  # read as a plain row by load_snapshot
        raise StaleDataError(f"job {job_id} changed since the snapshot")
    return row


def _write_reasons(session: Session, decision: Decision, skip: set[str]) -> int:
    """Store the pending reasons that changed, in one statement; a job no longer PENDING
    is left alone (its reason no longer matters). Returns how many jobs are pending."""
    seen = session.info.get(_SEEN, {})
    changed = []
    count = 0
    reasons = [
        (job_id, f"{reason.code}: {reason.message}", reason.estimated_start)
        for job_id, reason in decision.pending.items()
    ]
    for kind in (_PARKED, _HELD):
        reasons += [(job_id, text, None) for job_id, text in session.info.get(kind, {}).items()]
    for job_id, text, start in reasons:
        if job_id in skip:
            continue
        count += 1
        before = seen.get(job_id)
        if before is not None and (before[1], before[2]) == (text, start):
            continue
        changed.append({"id": job_id, "pending_reason": text, "estimated_start": start})
    set_while(session, S.PENDING, changed)
    return count


def _write(session: Session, decision: Decision, now: float) -> Applied:
    stop: list[str] = []
    cancel: dict[str, str] = session.info.get(_CANCEL, {})
    for job_id, why in cancel.items():  # an `ok` dependency failed (services/depends.py)
        row = _get(session, job_id)
        transition(session, row, S.CANCELLED, reason=why[:64], now=now,
                   details={"message": why})  # fmt: skip
    for ev in decision.evictions:
        row = _get(session, ev.job_id)
        facts = {"for_job": ev.for_job, "action": ev.action, "why": ev.reason}
        transition(session, row, S.PREEMPTED, reason=ev.reason[:64] or ev.action, now=now,
                   details=facts)  # fmt: skip
        stop.append(ev.job_id)
    resize = elastic.write_resizes(session, decision, now, _get, placement_json)
    elastic.write_notes(session, decision)
    launch: list[Launch] = []
    deferred: list[Launch] = []
    for p in decision.placements:
        row = _get(session, p.job_id)
        row.placement = placement_json(p.nodes)
        details: dict[str, Any] = {"placement": row.placement, "action": p.action}
        if p.gpus != row.gpus:  # an elastic job started at another size in its range
            details["gpus"] = {"asked": row.gpus, "started": p.gpus}
            row.gpus = p.gpus
        if p.after_evictions:
            details["after_evictions"] = list(p.after_evictions)
        transition(session, row, S.STARTING, reason="scheduled", now=now, details=details)
        item = Launch(p.job_id, p.nodes, tuple(p.after_evictions))
        if p.after_evictions:
            row.pending_reason = "waiting for evicted jobs to stop: " + ", ".join(p.after_evictions)
            deferred.append(item)
        else:
            launch.append(item)
    session.flush()
    count = _write_reasons(session, decision, set(stop) | set(cancel))
    return Applied(tuple(launch), tuple(deferred), tuple(stop), count, decision=decision,
                   resize=tuple(resize))  # fmt: skip


def write_decision(session: Session, decision: Decision, now: float) -> Applied:
    """Write `decision` in one transaction (committed), or nothing and `retry=True` when a job
    changed since `load_snapshot` read it in this same session."""
    try:
        applied = _write(session, decision, now)
        session.commit()
    except (StaleDataError, IllegalTransition) as error:
        session.rollback()
        return Applied(retry=True, error=str(error), decision=decision)
    except BaseException:
        session.rollback()
        raise
    return applied


def ready_to_launch(session: Session) -> list[Launch]:
    """Deferred STARTING jobs whose victims have all stopped (left PREEMPTED / RESIZING)."""
    out = []
    rows = session.scalars(
        select(JobRow).where(JobRow.state == S.STARTING).order_by(JobRow.state_changed_at)
    )
    for row in rows:
        last = select(JobEvent).where(JobEvent.job_id == row.id, JobEvent.to_state == S.STARTING)
        event = session.scalars(last.order_by(JobEvent.id.desc()).limit(1)).first()
        after = tuple(str(j) for j in (event.details.get("after_evictions") if event else ()) or ())
        if not after:
            continue
        stopping = JobRow.id.in_(after) & JobRow.state.in_([S.PREEMPTED, S.RESIZING])
        if not session.scalar(select(func.count()).select_from(JobRow).where(stopping)):
            out.append(Launch(row.id, _placement(row.placement), after))
    return out


def run_once(
    session_factory: Callable[[], Session],
    profile: str | core.Profile = "default",
    *,
    now: float,
    topology: Topology | None = None,
    metrics: PlatformMetrics = PLATFORM,
    cache: PendingCache | None = None,
    fairshare: FairShare | None = None,
    budgets: Budgets | None = None,
    spares: Spares | None = None,
    stopping: frozenset[str] = frozenset(),
    live: Callable[[str], bool] | None = None,
    avoid: frozenset[str] = frozenset(),
) -> Applied:
    """One scheduling round: load, decide, apply; observes the cycle latency and refreshes the
    gauges. A `retry` result wrote nothing; run again. `stopping`, `live`, `avoid`: see
    `load_snapshot`."""
    began = time.perf_counter()
    with session_factory() as session:
        snapshot = load_snapshot(
            session, now, topology, cache, fairshare, budgets, spares, stopping, live, avoid
        )
        with gc_paused():
            decision, parked = parking.decide(snapshot, profile)
        session.info[_PARKED] = parked
        conflicts = booking_conflicts(snapshot, decision)
        if conflicts:
            metrics.booking_conflicts.inc(len(conflicts), stage="decision")
            log.error("bug signal: the scheduler's decision breaks the booking contract: %s",
                      "; ".join(conflicts[:5]))  # fmt: skip
        applied = write_decision(session, decision, now)
        metrics.cycle_seconds.observe(time.perf_counter() - began)
        refresh_gauges(session, metrics)
        session.commit()
    return applied
