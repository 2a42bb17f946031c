"""reclaim: a queue below its guaranteed quota takes back GPUs lent to other queues.

A pending job may reclaim when its queue, and every ancestor that is not shared with the
victim, stays within `guaranteed` after the job starts. A victim must be preemptible, outside
its `min_runtime`, and in a queue that stays at or above its own `guaranteed` (again on the
path below the common ancestor) after losing it. Victims come first from the queue furthest
over its guaranteed quota, then the lowest priority, then the most recently started (least
work lost). See `victims.py` for how the set is chosen and why it is minimal.
"""

from __future__ import annotations

from trainyard.core.actions.victims import by_queue, evict_for
from trainyard.core.cycle import CAPACITY_CODES, Cycle, Status
from trainyard.core.framework import ACTIONS, EVICTORS
from trainyard.core.queues import QueueIndex
from trainyard.core.state import Alloc
from trainyard.core.types import Job


def _below(path: tuple[int, ...], other: tuple[int, ...]) -> tuple[int, ...]:
    """The queues of `path` that are not also on `other` (those below the common ancestor)."""
    shared = set(other)
    return tuple(a for a in path if a not in shared)


class _Rules:
    """The reclaim rules for one reclaiming job (a class, not closures: closures would form
    reference cycles with their environment in compiled code)."""

    def __init__(self, queues: QueueIndex, q: int, job: Job) -> None:
        self.queues = queues
        self.q = q
        self.job = job
        self.my_path = queues.path[q]

    def related(self, vq: int) -> bool:
        return vq == self.q or vq in self.my_path or self.q in self.queues.path[vq]

    def excess(self, vq: int) -> int:
        """GPUs `vq` holds above guaranteed on its path below the common ancestor."""
        queues = self.queues
        theirs = _below(queues.path[vq], self.my_path)
        return min(queues.gpus[x] - queues.guaranteed[x] for x in theirs)

    def room(self, vq: int) -> bool:
        """Would the job stay within guaranteed on its own path below the common ancestor?"""
        queues = self.queues
        mine = _below(self.my_path, queues.path[vq])
        return all(queues.gpus[x] + self.job.gpus <= queues.guaranteed[x] for x in mine)

    def allowed(self, a: Alloc) -> bool:
        vq = a.queue
        return not self.related(vq) and self.room(vq) and self.excess(vq) >= a.gpus

    def cost(self, a: Alloc) -> tuple[float, ...]:
        return (
            float(not a.placed_now),
            float(a.job.priority),
            -float(self.excess(a.queue)),
            -a.started_at,
        )


def reclaim_for(cycle: Cycle, job: Job) -> bool:
    queues = cycle.queues
    q = queues.index[job.queue]
    if queues.gpus[q] + job.gpus > queues.guaranteed[q]:
        return False
    rules = _Rules(queues, q, job)
    budgets = {}
    for vq in by_queue(cycle):
        if not rules.related(vq) and rules.room(vq):
            spare = rules.excess(vq)
            if spare > 0:
                budgets[vq] = spare
    if not budgets:
        return False
    reason = f"queue {job.queue} reclaims its guaranteed quota"
    if evict_for(cycle, job, "reclaim", budgets, rules.allowed, rules.cost, reason):
        return True
    _explain_lender(cycle, job, rules, budgets)
    return False


def _explain_lender(cycle: Cycle, job: Job, rules: _Rules, budgets: dict[int, int]) -> None:
    """When what `job`'s queue is owed is lent out inside jobs too large to evict without
    taking their queue below its own guarantee, say so (instead of "waiting for N GPUs")."""
    st = cycle.status.get(job.id)
    if st is None or st.code not in CAPACITY_CODES:
        return
    classes = cycle.classes_of(job)
    allocs = cycle.state.allocs
    per_queue = by_queue(cycle)
    fits = 0  # GPUs evictable within the lenders' own guarantees
    held = 0  # GPUs of every borrowed job, whatever its size
    biggest: Alloc | None = None
    for vq, budget in budgets.items():
        for a in per_queue.get(vq, ()):
            if a.job.id not in allocs or a.cls not in classes or not a.gpus:
                continue
            held += a.gpus
            if a.gpus <= budget:
                fits += a.gpus
            elif biggest is None or (a.gpus, a.job.id) < (biggest.gpus, biggest.job.id):
                biggest = a  # the smallest job that is too large: the one to name
    free = max((cycle.state.class_free[c] for c in classes), default=0)
    if biggest is None or free + fits >= job.gpus or free + held < job.gpus:
        return  # room was not the lender's guarantee (placement, topology, or too little)
    queues = cycle.queues
    theirs = _below(queues.path[biggest.queue], rules.my_path)
    x = theirs[0]
    for anc in theirs:  # the queue on the lender's side that would drop below its guarantee
        if queues.gpus[anc] - queues.guaranteed[anc] < queues.gpus[x] - queues.guaranteed[x]:
            x = anc
    q = rules.q
    cycle.status[job.id] = Status(
        "quota",
        blocker=x,
        other_job=biggest.job.id,
        quota=("lender", queues.gpus[x], queues.guaranteed[x]),
        size=biggest.gpus,
        owner=(queues.gpus[q], queues.guaranteed[q]),
    )


def reclaim(cycle: Cycle) -> None:
    failed: dict[tuple[object, ...], int] = {}
    for job in cycle.pending_jobs():
        if job.gpus == 0 or job.id not in cycle.status:
            continue
        key = (job.queue, job.gpu_types, job.gpu_memory_gb, job.topology, cycle.state.epoch)
        if job.gpus >= failed.get(key, 1 << 30):
            continue
        if cycle.quota_blocker(job) >= 0:
            continue
        if cycle.state.epoch != cycle.settled_epoch and cycle.try_place(job, "reclaim"):
            continue  # earlier evictions freed more than their preemptor needed
        if not reclaim_for(cycle, job):
            failed[key] = min(failed.get(key, 1 << 30), job.gpus)


ACTIONS.register("reclaim", reclaim)
EVICTORS.register("reclaim", reclaim_for)
