"""Turn a finished cycle into a `Decision`, with a sentence for every pending job.

Reasons are rendered once per distinct situation (job shape x code) on the final state of the
cycle, so explaining 20,000 pending jobs costs little more than explaining a handful. A
reason names the numbers a person needs: what the job asks for (an elastic job: its smallest
size), what is free, the largest block in the domain it needs, the queue and quota that
block it, the reserved job it must not delay, and the estimated start when one is known.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from trainyard.core.explain_nodes import drained, on_drained, on_spares
from trainyard.core.placement import devices_of
from trainyard.core.types import (
    Decision,
    Eviction,
    Job,
    NodeDevices,
    PendingCode,
    PendingReason,
    Placement,
    Reservation,
    Resize,
)  # fmt: skip

if TYPE_CHECKING:
    from trainyard.core.cycle import Cycle, Status

_WAITS_FOR_ROOM: Final = frozenset({"capacity", "fragmented", "resources", "reservation"})


# Result NamedTuples are made with `tuple.__new__` (what their interpreted `__new__` does).


def _nodes(
    cycle: Cycle, parts: Sequence[tuple[int, int] | tuple[int, int, float, float]]
) -> tuple[NodeDevices, ...]:
    names = cycle.layout.names
    if len(parts) == 1:
        p = parts[0]
        return (tuple.__new__(NodeDevices, (names[p[0]], devices_of(p[1]))),)
    return tuple([tuple.__new__(NodeDevices, (names[p[0]], devices_of(p[1]))) for p in parts])


def _in(seconds: float) -> str:
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def _types(job: Job) -> str:
    t = "/".join(job.gpu_types) + " " if job.gpu_types else ""
    mem = f" with >= {job.gpu_memory_gb:g} GB" if job.gpu_memory_gb else ""
    spread = f" on {job.nodes} nodes ({job.gpus // job.nodes} each)" if job.nodes > 1 else ""
    return f"{job.gpus} {t}GPU{'s' if job.gpus != 1 else ''}{mem}{spread}"


def _nodes_with(cycle: Cycle, job: Job, free: bool) -> int:
    """Nodes of one of `job`'s classes with `gpus / nodes` GPUs (free ones with `free`,
    else usable ones), the most over its classes."""
    state = cycle.state
    layout = cycle.layout
    per = job.gpus // job.nodes
    best = 0
    for c in cycle.classes_of(job):
        if free:
            found = sum(state.bucket[c][k].bit_count() for k in range(per, len(state.bucket[c])))
        else:
            found = sum(
                1
                for n, cls in enumerate(layout.class_of_node)
                if cls == c and layout.usable_mask[n].bit_count() >= per
            )
        best = max(best, found)
    return best


def _capacity(cycle: Cycle, job: Job) -> tuple[PendingCode, str]:
    """Code and sentence for a job that found no room. A gang uses one device class, so
    every figure is for the best single class, never a sum over classes."""
    state = cycle.state
    layout = cycle.layout
    classes = cycle.classes_of(job)
    if job.gpus == 0:
        return "resources", f"no node has {job.cpus:g} CPUs and {job.memory_gb:g} GB memory free"
    capacity = max((layout.class_capacity[c] for c in classes), default=0)
    if capacity < job.gpus:
        held, temporary = drained(cycle, job)
        if held:
            schedulable = f" of one type; {capacity} such GPUs are schedulable," if classes else ";"
            code: PendingCode = "capacity" if temporary else "unresolvable"
            return code, f"needs {_types(job)}{schedulable} {held}"
        if not classes:
            return "unresolvable", f"no node offers {_types(job)}"
        return "unresolvable", (
            f"needs {_types(job)} of one type but the cluster has at most {capacity} such GPUs"
        )
    free = max(state.class_free[c] for c in classes)
    if job.nodes > 1:
        per = job.gpus // job.nodes
        usable = _nodes_with(cycle, job, free=False)
        if usable < job.nodes:
            return "unresolvable", (
                f"needs {_types(job)} but the cluster has {usable} node"
                f"{'s' if usable != 1 else ''} with {per} such GPU{'s' if per != 1 else ''}"
            )
        if free >= job.gpus:
            ready = _nodes_with(cycle, job, free=True)
            where = f" inside one {job.topology}" if job.topology is not None else ""
            return "fragmented", (
                f"needs {_types(job)}{where}; {free} free in total, on {ready} node"
                f"{'s' if ready != 1 else ''} with {per} free"
            )
    if job.nodes == 1 and job.topology is None:
        largest_node = max(layout.class_node_max[c] for c in classes)
        if largest_node < job.gpus:
            return "unresolvable", (
                f"needs {_types(job)} on one node (nodes: 1), but the largest node has "
                f"{largest_node}"
            )
    level = cycle.max_level(job)
    if job.topology is not None and level >= 0:
        where = job.topology
        cap = max(
            layout.class_node_max[c]
            if level >= layout.depth
            else max(layout.domain_capacity[level][c], default=0)
            for c in classes
        )
        if cap < job.gpus:
            return "unresolvable", (
                f"needs {_types(job)} inside one {where}, but the largest {where} has {cap}"
            )
        if free >= job.gpus:
            largest = max(state.largest_free(c, level) for c in classes)
            return "fragmented", (
                f"needs {_types(job)} inside one {where}; {free} free in total, "
                f"largest free block in one {where} is {largest}"
            )
    if free >= job.gpus:
        largest = max(state.largest_free(c, layout.depth) for c in classes)
        profile = cycle.profile
        if (
            (job.nodes == 1 or not profile.may_split(job, cycle.now))
            and largest < job.gpus
            and job.gpus <= max(layout.class_node_max[c] for c in classes)
        ):
            wait = ""
            if profile.split_small_jobs and job.nodes != 1:
                left = profile.locality_wait_s - (cycle.now - job.submit_time)
                wait = f" (it waits {left:.0f} s more for one before spanning nodes)"
            return "fragmented", (
                f"needs {_types(job)} on one node{wait}; {free} free in total, "
                f"largest free block on one node is {largest}"
            )
        return "resources", (
            f"needs {_types(job)} with {job.cpus:g} CPUs / {job.memory_gb:g} GB memory; "
            f"{free} GPUs are free but not with that CPU/memory beside them"
        )
    hint = cycle.hints.get(job.id, "")
    held = _held_for(cycle, job) + on_spares(cycle, job) + on_drained(cycle, job)
    return "capacity", f"waiting for {_types(job)}; {free} free{held}{hint}"


def _held_for(cycle: Cycle, job: Job) -> str:
    """ ", N more held for job X's reservation" when reservations hold GPUs of the job's
    classes that would otherwise be free (so "0 free" never hides them)."""
    state = cycle.state
    classes = cycle.classes_of(job)
    parts = []
    for h in cycle.holds:
        a = state.allocs.get(h.hold_id)
        if a is None or a.cls not in classes or not a.gpus:
            continue
        if h.job.id == job.id:
            parts.append(f"{a.gpus} more held for it")
        else:
            when = "start unknown" if h.start == math.inf else f"from t={h.start:.0f}"
            parts.append(f"{a.gpus} more held for job {h.job.id}'s reservation ({when})")
    return "; " + "; ".join(parts) if parts else ""


def _served_first(cycle: Cycle) -> None:
    """The fair-share position, for jobs left waiting on capacity under DRF: the other
    queues whose jobs were considered (and placed on GPUs of the job's kind) before it in
    this cycle, because their fair-share keys (under `las_drf`: their next jobs' LAS levels,
    then fair-share keys) were smaller, go into its reason."""
    if cycle.profile.queue_order not in ("drf", "las_drf") or not cycle.stmt.placed:
        return
    ahead = (
        "queues whose next jobs had received less service or had a smaller fair share"
        if cycle.profile.queue_order == "las_drf"
        else "queues with a smaller fair share"
    )
    visited = cycle.order.visited
    pos = {j.id: i for i, j in enumerate(visited)}
    first: dict[tuple[str, int], int] = {}
    for jid, p in cycle.stmt.placed.items():
        i = pos.get(jid)
        if i is None or p.action not in ("allocate", "backfill"):
            continue
        k = (p.alloc.job.queue, p.alloc.cls)
        if i < first.get(k, len(visited)):
            first[k] = i
    if not first:
        return
    firsts = sorted((i, q, c) for (q, c), i in first.items())
    for job in visited:
        st = cycle.status.get(job.id)
        if st is None or st.code != "capacity" or job.id in cycle.hints or not job.gpus:
            continue
        classes = cycle.classes_of(job)
        me = pos[job.id]
        names: list[str] = []
        for i, q, c in firsts:
            if i >= me:
                break
            if q != job.queue and c in classes and q not in names:
                names.append(q)
        if names:
            shown = ", ".join(names[:3]) + (" ..." if len(names) > 3 else "")
            cycle.hints[job.id] = (
                f"; {ahead} ({shown}) were served before queue "
                f"{job.queue} this cycle and took GPUs of this kind"
            )


def _quota(cycle: Cycle, job: Job, st: Status) -> tuple[PendingCode, str]:
    name = cycle.queues.name(st.blocker)
    rule, used, bound = st.quota
    tail = f"({used}/{bound} GPUs; job needs {job.gpus})"
    if rule == "limit" and job.gpus > bound:  # never fits under it (outside review 14)
        return "unresolvable", f"asks {job.gpus} GPUs, more than queue {name}'s limit of {bound}"
    if rule == "limit":
        return "quota", f"queue {name} is at its limit {tail}"
    return "quota", f"non-preemptible jobs must fit in the guaranteed quota of queue {name} {tail}"


def _unreserved(cycle: Cycle, job: Job) -> str:
    """Why the blocked head of the line holds no reservation when nothing in its way has a
    run-time estimate, and when it will (actions/backfill.py); "" otherwise."""
    profile = cycle.profile
    if "backfill" not in profile.actions or any(
        r.job.expected_duration is not None for r in cycle.snapshot.running
    ):
        return ""
    after = profile.reserve_unknown_after_s if cycle.fits_one_node(job) else None
    if after is None:
        after = profile.reserve_gang_after_s
    msg = (
        "; no devices are held for it, as the run times of the jobs in its way are unknown: "
        "smaller jobs may start before it"
    )
    return msg + (f" until it has waited {_in(after)}" if after is not None else "")


def _reason(cycle: Cycle, job: Job, st: Status, start: float | None) -> PendingReason:
    code: PendingCode = st.code
    # an elastic job starts at any size that fits (an outside review: it "needed" its gpus)
    low = job.size_range[0] if job.is_elastic and job.nodes <= 1 else job.gpus
    small = job.with_gpus(low) if low < job.gpus and st.code != "order" else job
    if st.code == "quota":
        code, msg = _quota(cycle, small, st)
    elif st.code == "order":
        head = f" behind job {st.other_job}" if st.other_job else ""
        msg = f"strict order: waiting{head}, the head of the line"
    else:
        code, msg = _capacity(cycle, small)
        if st.code == "reservation":
            code = "reservation"
            msg = f"would delay job {st.other_job}, which holds a reservation; {msg}"
    if start == math.inf:
        msg += (
            "; devices reserved for it, to start when the jobs on them end (their run times "
            "are unknown)"
        )
        start = None
    elif start is not None and start <= cycle.now:  # outside review 14, F12
        msg += (
            "; reserved to start when the jobs in its way end, which have run past their "
            "estimated run times"
        )
    elif start is not None:
        msg += f"; reserved to start in ~{_in(start - cycle.now)}"
    elif code == "capacity" and cycle.head is not None and job.id == cycle.head.id:
        msg += _unreserved(cycle, job)
    guard = cycle.protected_until.get(job.id) if code in _WAITS_FOR_ROOM else None
    if guard is not None:
        end, victim = guard
        msg += (
            f"; waiting for job {victim}'s minimum run time to end at t={end:.0f} "
            f"(in ~{_in(end - cycle.now)}), then it may be preempted"
        )
        if start is None or end < start:
            start = end
    if small is not job:
        msg = f"even at its smallest size (min_gpus {low}): {msg}"
    return PendingReason(code, msg, start)


def build_decision(cycle: Cycle, only: tuple[Job, ...] | None = None) -> Decision:
    """The immutable result of `cycle`; `only` limits the pending reasons to those jobs
    (pending jobs of the cycle, or arrivals `incremental.Scheduler` decided on it)."""
    stmt = cycle.stmt
    classes = cycle.layout.classes
    resized = stmt.resized
    placements = tuple(
        [
            tuple.__new__(
                Placement,
                (
                    jid,
                    p.alloc.job.queue,
                    _nodes(cycle, p.alloc.parts),
                    p.action,
                    classes[p.alloc.cls][0] if p.alloc.cls >= 0 else "",
                    p.after_evictions,
                ),
            )
            for jid, p in stmt.placed.items()
            if jid not in resized
        ]
    )
    resizes = tuple(
        Resize(
            jid,
            r.alloc.job.queue,
            r.alloc.gpus,
            _nodes(cycle, stmt.placed[jid].alloc.parts),
            r.reason,
            stmt.placed[jid].after_evictions,
        )
        for jid, r in resized.items()
    )
    evictions = tuple(
        [
            Eviction(jid, e.alloc.job.queue, e.alloc.gpus, e.action, e.for_job, e.reason)
            for jid, e in stmt.evicted.items()
        ]
    )
    reservations = tuple(
        Reservation(h.job.id, None if h.start == math.inf else h.start, _nodes(cycle, h.target))
        for h in cycle.holds
        if h.job.id in cycle.status
    )
    starts = {h.job.id: h.start for h in cycle.holds}
    if only is None:
        _served_first(cycle)
    cache: dict[tuple[object, ...], PendingReason] = {}
    pending: dict[str, PendingReason] = {}
    jobs = cycle.snapshot.pending if only is None else only
    for job in jobs:
        st = cycle.status.get(job.id)
        if st is None:
            continue
        start = starts.get(job.id)
        key = (
            job.gpus,
            job.gpu_types,
            job.gpu_memory_gb,
            job.topology,
            job.nodes,
            job.cpus,
            job.memory_gb,
            job.queue,
            st.code,
            st.blocker,
            st.other_job,
            st.quota,
            start,
            cycle.protected_until.get(job.id),
            cycle.hints.get(job.id),
            cycle.head is not None and job.id == cycle.head.id,
            # the locality wait left (explained per job) while it may not span nodes yet
            job.submit_time if job.gpus > 1 and job.submit_time > cycle.split_before else None,
        )
        reason = cache.get(key)
        if reason is None:
            reason = _reason(cycle, job, st, start)
            cache[key] = reason
        pending[job.id] = reason
    for jid, e in stmt.evicted.items():
        pending[jid] = PendingReason(
            "capacity", f"preempted ({e.action}) for job {e.for_job}: {e.reason}"
        )
    return Decision(
        now=cycle.now,
        profile=cycle.profile.name,
        placements=placements,
        evictions=evictions,
        reservations=reservations,
        pending=pending,
        resizes=resizes,
    )
