"""backfill: reserve for the blocked head of the line, and fill holes that do not delay it.

The reservation is the earliest time the head job fits if running jobs end when expected
(`expected_duration`): running jobs are released in order of expected end on the statement
until a placement exists, then everything is rolled back. The devices of that placement that
are free now are held; a later job may run:
- anywhere outside the held devices (it cannot delay the head), or
- on held devices too, if it is expected to end before the reservation starts, or if its
  queue's guarantee covers it and the reserved job, of another queue, would borrow beyond
  its own queue's (the reservation is then computed again around it; evicting actions lift
  such reservations for a job its guarantee covers in any queue, so that reclaim returns a
  guarantee within one cycle).
Jobs blocked otherwise get a reservation too, up to `Profile.max_reservations`.

A head whose start cannot be estimated (the jobs in its way have no expected duration) gets
no reservation, and backfill proceeds greedily, unless it fits one node and has waited
`Profile.reserve_unknown_after_s`: then the running jobs without an estimate are released
after those with one, the most recently started first (run times in training clusters are
heavy-tailed: the youngest jobs are the likeliest to end soonest; Gu et al., Tiresias,
NSDI'19, on the Philly and Microsoft traces); for a head of more than half a node (of the
smallest node of its classes it fits) until one node is whole (`_whole_node`, `_first_fit`;
split over two its hold kept the devices of two nodes idle), or split when no one node can
hold it (its CPUs or memory); smaller heads may be held split, as holding a node cost
two-GPU jobs of Philly's busy week minutes more. Released by age, the hold may move to
another node whose jobs have all become younger (outside review 18, F3: released node by
node, most free GPUs first, it stayed, but the Philly trace was 0.9 % slower). Only
the hold is whole: once enough GPUs are free the head starts as allocate places it, split
past its locality wait. The devices found are held with an unknown start (`math.inf`; no
job can be known to end before it, so nothing backfills onto them).
Without this, smaller jobs take every device that frees one by one, and a job that needs
two GPUs of one node can wait indefinitely in a full cluster of one-GPU jobs. A head that
spans nodes is reserved for blind only after `Profile.reserve_gang_after_s` of waiting (in
all since its submission, `Job.waited`): holding devices for a gang of many nodes idles them
for as long as the oldest of the jobs in its way might run, but without it one-GPU jobs
take every device that frees and the gang waits for ever (outside review 14, F3).

`BackfillState` is what this module keeps for itself over a cycle (`Cycle.state_of`): the
snapshot's running jobs in the orders a reservation releases them, and the memos that let a
full cluster reject thousands of jobs cheaply.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import chain

from trainyard.core.cycle import CAPACITY_CODES, Cycle, Hold, Status
from trainyard.core.framework import ACTIONS
from trainyard.core.types import Job

ShapeKey = tuple[object, ...]


@dataclass(slots=True)
class BackfillState:
    """Backfill's own state in one cycle (see the module docstring)."""

    # Whether any job has an expected duration (without one no start can be estimated).
    estimates: bool | None = None
    # (expected end, job id) of the snapshot's running jobs, soonest first
    running_ends: list[tuple[float, str]] | None = None
    # ids of the snapshot's running jobs without an expected duration, youngest first
    youngest: list[str] | None = None
    # (epoch, shape) -> would the job fit if no device were held (`_blocked_by_holds`)
    held_memo: dict[ShapeKey, bool] = field(default_factory=dict)
    # (holds lifted, shape) -> (epoch, fewest GPUs) that did not fit (`_place_on_held`)
    held_failures: dict[ShapeKey, tuple[int, int]] = field(default_factory=dict)
    # owed jobs no eviction could place this cycle (reclaim tried them): their reservations
    # do not stand in the way of a job of the same queue that an eviction can place
    unreclaimable: set[str] = field(default_factory=set)
    # (queue, shape, holds lifted) -> (epoch, GPUs, status) of a failure (`place_backfill`)
    backfill_failures: dict[ShapeKey, tuple[int, int, Status]] = field(default_factory=dict)


def _estimates(cycle: Cycle, st: BackfillState) -> bool:
    """Does any job of the snapshot have an expected duration (computed once)?"""
    if st.estimates is None:
        snap = cycle.snapshot
        st.estimates = any(r.job.expected_duration is not None for r in snap.running) or any(
            j.expected_duration is not None for j in snap.pending
        )
    return st.estimates


def _running_ends(cycle: Cycle, st: BackfillState) -> list[tuple[float, str]]:
    """(expected end, job id) of the snapshot's running jobs, soonest first (computed once;
    the caller skips jobs no longer running)."""
    if st.running_ends is None:
        st.running_ends = sorted(
            (r.started_at + r.job.expected_duration, r.job.id)
            for r in cycle.snapshot.running
            if r.job.expected_duration is not None
        )
    return st.running_ends


def _youngest_unestimated(cycle: Cycle, st: BackfillState) -> list[str]:
    """Ids of the snapshot's running jobs without an expected duration, the most recently
    started first (computed once; the caller skips jobs no longer running). Not those that
    start at this very moment: the spare passes (`core/spares.py`) hand the cycle a snapshot
    in which the recovering jobs they placed already run, and a blind reservation no more
    waits for them than for a job this cycle places, whose end is as unknown."""
    if st.youngest is None:
        now = cycle.now
        st.youngest = [
            jid
            for _start, jid in sorted(
                (-r.started_at, r.job.id) for r in cycle.snapshot.running
                 if r.job.expected_duration is None and r.started_at < now
            )
        ]  # fmt: skip
    return st.youngest


def _draining(cycle: Cycle, st: BackfillState) -> list[str]:
    """`_youngest_unestimated` for a gang reserved for blind: node by node, the nodes with
    the most free GPUs first (then in the cluster's order), the youngest job first on each.
    The free devices a gang's hold kept idle in the last cycle are free again in this one,
    so its reservation stays on the nodes it drained and gains every device that frees
    there; released by age alone it followed the one-GPU jobs that started elsewhere and
    gave up what it had drained (outside review 15: a gang that had waited a day had not
    started after 60 cycles of churn)."""
    state = cycle.state
    free = state.free_cnt
    allocs = state.allocs
    ranked: list[tuple[int, int, int, str]] = []
    for rank, jid in enumerate(_youngest_unestimated(cycle, st)):
        a = allocs.get(jid)
        if a is not None:  # its node with the most free GPUs (no closure: see reclaim.py)
            best = min((-free[n], n) for n, _m, _c, _x in a.parts)
            ranked.append((best[0], best[1], rank, jid))
    ranked.sort()
    return [jid for _f, _n, _r, jid in ranked]


def _blind(cycle: Cycle, job: Job) -> bool:
    """May `job` be reserved for without estimates (see the module docstring)?"""
    if not job.gpus:
        return False
    profile = cycle.profile
    gang = profile.reserve_gang_after_s
    if gang is not None and job.waited(cycle.now) >= gang:
        return True
    after = profile.reserve_unknown_after_s
    if after is None or cycle.now - job.submit_time < after:
        return False
    return cycle.fits_one_node(job)


def reserve(cycle: Cycle, job: Job) -> Hold | None:
    """Compute and hold the reservation of `job` (None if it gets none: its start cannot be
    estimated and it may not be reserved for blind)."""
    st = cycle.state_of(BackfillState)
    blind = _blind(cycle, job)
    if not _estimates(cycle, st) and not blind:
        return None  # no job has an expected duration: no start can be estimated
    whole = blind and _whole_node(cycle, job)
    found = _first_fit(cycle, st, job, blind, whole)
    if found is None and whole:  # no one node can hold it (its CPUs or memory): split
        found = _first_fit(cycle, st, job, blind, False)
    if found is None:
        return None
    res = Hold(job, found[0], found[1], f"reservation:{job.id}")
    cycle.holds.append(res)
    cycle.hold(res)
    return res


def _whole_node(cycle: Cycle, job: Job) -> bool:
    """Is `job` held for blind on one whole node: it fits one, and takes more than half of
    the smallest node of its classes it fits (split, it would take part of two)?"""
    if not cycle.fits_one_node(job):
        return False
    node_max = cycle.layout.class_node_max
    return 2 * job.gpus > min(node_max[c] for c in cycle.classes_of(job) if job.gpus <= node_max[c])


def _first_fit(
    cycle: Cycle, st: BackfillState, job: Job, blind: bool, whole: bool
) -> tuple[float, list[tuple[int, int]]] | None:
    """Release running jobs in order of expected end (then, `blind`, those without an
    estimate) until `job` fits; its start and devices, or None. All rolled back. `whole`:
    the blind part looks for one whole node (the first whole as the youngest jobs are
    released: the node whose oldest job is youngest, likeliest to drain first under heavy
    tails); split, a head of more than half a node's hold kept two nodes' GPUs idle
    (outside review 14, F12)."""
    state = cycle.state
    stmt = cycle.stmt
    classes = cycle.classes_of(job)
    allocs = state.allocs
    placed = sorted(
        (p.alloc.expected_end, jid)
        for jid, p in stmt.placed.items()
        if p.alloc.expected_end is not None
    )
    order: Iterable[tuple[float, str]] = heapq.merge(_running_ends(cycle, st), placed)
    if blind:  # then the running jobs without an estimate, the youngest first
        one_node = cycle.fits_one_node(job)
        blind_order = _youngest_unestimated(cycle, st) if one_node else _draining(cycle, st)
        order = chain(order, ((math.inf, jid) for jid in blind_order))
    cp = stmt.checkpoint()
    epoch = state.epoch
    found: tuple[float, list[tuple[int, int]]] | None = None
    for end, jid in order:  # soonest (expected) end first
        a = allocs.get(jid)
        if a is None or a.queue < 0 or not (a.cls in classes or job.gpus == 0):
            continue
        stmt.release(jid)
        if state.free_of(classes) < job.gpus:
            continue
        cand = cycle.find(job, split=not (whole and end == math.inf))
        if cand is not None:
            alloc = cycle.materialize(job, cand, -1)
            found = (max(end, cycle.now), [(n, mask) for n, mask, _c, _m in alloc.parts])
            break
    stmt.rollback(cp)
    cycle.restore_epoch(epoch)  # the rollback restored exactly the state the cache knew
    return found


def _fits_before(cycle: Cycle, job: Job, start: float) -> bool:
    """Is `job` expected to end before a reservation that starts at `start` (never known
    for a blind reservation, whose start is unknown)?"""
    d = job.expected_duration
    return d is not None and start != math.inf and cycle.now + d <= start


def _place_on_held(cycle: Cycle, st: BackfillState, job: Job) -> bool:
    """Try `job` with the holds lifted it ends before (they are re-held on what is left)."""
    lifted = [h for h in cycle.holds if _fits_before(cycle, job, h.start)]
    if not lifted:
        return False
    epoch = cycle.state.epoch
    g = job.gpus or 1
    key = (
        tuple(h.hold_id for h in lifted),
        job.gpu_types,
        job.gpu_memory_gb,
        job.topology,
        job.nodes,
        job.cpus / g,
        job.memory_gb / g,
    )
    failed = st.held_failures.get(key)
    if failed is not None and failed[0] == epoch and job.gpus >= failed[1]:
        return False  # same holds lifted, capacity not grown: it did not fit then either
    for h in lifted:
        cycle.unhold(h)
    placed = cycle.try_place(job, "backfill")
    for h in lifted:
        cycle.hold(h)
    cycle.restore_epoch(epoch)  # capacity only shrank: cached failures stay true
    if not placed:
        st.held_failures[key] = (epoch, job.gpus)
        cycle.status[job.id] = Status("capacity")
    return placed


def _owed(cycle: Cycle, job: Job) -> bool:
    """Would `job` keep every queue on its path within its guarantee?"""
    queues = cycle.queues
    return queues.within_guaranteed(queues.index[job.queue], job.gpus) < 0


def lift_holds(cycle: Cycle, job: Job, other_queues: bool = False) -> list[Hold]:
    """Lift the reservations not in `job`'s way and return `cycle.holds` as it was: its own,
    and, for a job its queue's guarantee covers, those of jobs that would borrow beyond
    their own queue's guarantee (the guarantee is the stronger promise; with
    `other_queues`, only reservations of other queues). Without `other_queues` (an
    eviction), also those of jobs of its own queue that no eviction could place this cycle
    (`BackfillState.unreclaimable`): the guarantee is the queue's, and GPUs taken back from
    borrowers would otherwise sit idle, held for a job still waiting on work that cannot be
    evicted; the reservation is computed again around the job placed."""
    saved = list(cycle.holds)
    owed = job.gpus > 0 and _owed(cycle, job)
    stuck = cycle.state_of(BackfillState).unreclaimable if owed and not other_queues else ()
    for h in saved:
        if (
            h.job.id == job.id
            or (
                owed and not _owed(cycle, h.job) and not (other_queues and h.job.queue == job.queue)
            )
            or (h.job.queue == job.queue and h.job.id in stuck)
        ):
            cycle.unhold(h)
            cycle.holds.remove(h)
    return saved


def restore_holds(cycle: Cycle, job: Job, saved: list[Hold], placed: bool) -> None:
    """After `lift_holds`: if `job` was not placed, hold everything again as it was; if it
    was, its own reservation is spent, and the others lifted are held again as they were
    where `job` took nothing on their nodes, else computed again around it."""
    lifted = [h for h in saved if h not in cycle.holds]
    if not placed:
        cycle.holds[:] = saved
        for h in lifted:
            cycle.hold(h)
        return
    if any(h.job.id == job.id for h in saved):
        cycle.resettle = True  # its reservation is spent: what it held is free
    nodes = {part[0] for part in cycle.stmt.placed[job.id].alloc.parts}
    redo = [h for h in lifted if h.job.id != job.id and any(n in nodes for n, _m in h.target)]
    cycle.holds[:] = [h for h in saved if h.job.id != job.id and h not in redo]
    for h in lifted:
        if h in cycle.holds:
            cycle.hold(h)
    for h in redo:
        reserve(cycle, h.job)


def _place_owed(cycle: Cycle, job: Job) -> bool:
    """Place a job its queue's guarantee covers on devices held for jobs of other queues
    that would borrow beyond their own queue's guarantee (`lift_holds`). Inside one queue
    the job order decides, and the head's reservation stands (the reclaim action lifts it
    when the queue's guarantee must be taken back from borrowers)."""
    if not job.gpus or not _owed(cycle, job):
        return False
    if all(_owed(cycle, h.job) or h.job.queue == job.queue for h in cycle.holds):
        return False
    epoch = cycle.state.epoch
    saved = lift_holds(cycle, job, other_queues=True)
    placed = cycle.try_place(job, "backfill")
    restore_holds(cycle, job, saved, placed)
    if not placed:
        cycle.restore_epoch(epoch)  # capacity only shrank: cached failures stay true
    return placed


def place_backfill(cycle: Cycle, job: Job) -> bool:
    """Backfill one job: place it if it delays no reservation; otherwise reserve for it (while
    reservations are left) or record that a reservation holds it back."""
    return _place_backfill(cycle, cycle.state_of(BackfillState), job)


def _place_backfill(cycle: Cycle, st: BackfillState, job: Job) -> bool:
    full = len(cycle.holds) >= cycle.profile.max_reservations
    key: tuple[object, ...] | None = None
    if full:  # no reservation left to give: the outcome is a function of the job's shape
        g = job.gpus or 1
        lifted = tuple(h.hold_id for h in cycle.holds if _fits_before(cycle, job, h.start))
        key = (
            job.queue,
            job.preemptible,
            job.gpu_types,
            job.gpu_memory_gb,
            job.topology,
            job.nodes,
            job.cpus / g,
            job.memory_gb / g,
            lifted,
        )
        seen = st.backfill_failures.get(key)
        if (
            seen is not None
            and seen[0] == cycle.state.epoch
            and (job.gpus == seen[1] or (job.gpus > seen[1] and seen[2].code != "reservation"))
        ):
            cycle.status[job.id] = seen[2]  # a job of this shape, no bigger, failed already
            return False
    if _backfill_one(cycle, st, job):
        return True
    if key is not None:
        st.backfill_failures[key] = (cycle.state.epoch, job.gpus, cycle.status[job.id])
    return False


def _backfill_one(cycle: Cycle, st: BackfillState, job: Job) -> bool:
    blocker = _quota_for_holds(cycle, job)
    if blocker is not None:
        cycle.status[job.id] = Status("reservation", other_job=blocker)
        return False
    if cycle.try_place(job, "backfill"):
        return True
    if cycle.status[job.id].code not in CAPACITY_CODES:
        return False
    if cycle.holds and (_place_on_held(cycle, st, job) or _place_owed(cycle, job)):
        return True
    held = [h for h in cycle.holds if h.job.id != job.id]
    if len(cycle.holds) < cycle.profile.max_reservations and reserve(cycle, job) is not None:
        return False
    if held and _blocked_by_holds(cycle, st, job):
        cycle.status[job.id] = Status("reservation", other_job=held[0].job.id)
    return False


def _quota_for_holds(cycle: Cycle, job: Job) -> str | None:
    """The reserved job whose quota `job` would eat into, if any: a backfilled job must leave
    its queues room for the reserved jobs that share them (limit, and guaranteed quota for a
    non-preemptible reserved job), or the reservation would be lost to quota next cycle."""
    if not cycle.holds or not job.gpus:
        return None
    queues = cycle.queues
    mine = set(queues.path[queues.index[job.queue]])
    for h in cycle.holds:
        head = h.job
        if head.id == job.id or head.id not in cycle.status:
            continue
        for a in queues.path[queues.index[head.queue]]:
            if a not in mine:
                continue
            need = queues.gpus[a] + head.gpus + job.gpus
            lim = queues.limit[a]
            if (lim is not None and need > lim) or (
                not head.preemptible and need > queues.guaranteed[a]
            ):
                return head.id
    return None


def backfill(cycle: Cycle) -> None:
    if cycle.head is not None and cycle.head.id in cycle.status:
        reserve(cycle, cycle.head)
    st = cycle.state_of(BackfillState)
    for job in cycle.order:
        _place_backfill(cycle, st, job)


def _blocked_by_holds(cycle: Cycle, st: BackfillState, job: Job) -> bool:
    """Would `job` fit if no device were held? (Only to explain; changes nothing.)"""
    state = cycle.state
    held = sum(state.allocs[h.hold_id].gpus for h in cycle.holds if h.hold_id in state.allocs)
    if state.free_of(cycle.classes_of(job)) + held < job.gpus:
        return False
    key = (
        state.epoch,
        job.gpus,
        job.gpu_types,
        job.gpu_memory_gb,
        job.topology,
        job.nodes,
        job.cpus,
        job.memory_gb,
    )
    memo = st.held_memo
    if key in memo:
        return memo[key]
    cp = cycle.stmt.checkpoint()
    epoch = cycle.state.epoch
    for h in cycle.holds:
        cycle.unhold(h)
    fits = cycle.find(job) is not None
    cycle.stmt.rollback(cp)
    cycle.restore_epoch(epoch)
    memo[key] = fits
    return fits


ACTIONS.register("backfill", backfill)
