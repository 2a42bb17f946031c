"""reclaim: a queue below its guaranteed quota takes back GPUs lent to other queues.

A pending job may reclaim when its queue, and every ancestor that is not shared with the
victim, stays within `guaranteed` after the job starts. A victim must be preemptible, outside
its `min_runtime`, and in a queue that holds more than its own `guaranteed` (again on the
path below the common ancestor): it borrows. A job submitted to an ancestor of the
reclaiming job's queue itself (an inner queue, such as `default` with guaranteed team
queues under it) borrows when the inner queue's own jobs hold more than the part of its
guarantee its children's guarantees leave (`own_excess`): the children's guarantees come
first; and the own jobs of an inner queue off the reclaiming job's path lend only what they
hold above that part (its children's borrowing is theirs to give back; outside review 15).
The reverse holds too: a job submitted to an inner queue whose guarantee does not cover it,
but whose own jobs stay within their part after it starts, reclaims from its descendants
that hold more than their own guarantees (`own_room`; outside review 14, F10), as a child
does from a sibling; the inner queue's total does not change. Victims come first from the
queue furthest over its guaranteed quota, then the lowest priority, then the most recently
started (least work lost). See `victims.py` for how the set is chosen and why it is minimal.

A guarantee is guaranteed: victims are first sought among sets that keep every lender (and
its ancestors below the common one) at or above its own guarantee: a plan is built within
each lender's budget (`_Rules.admit`), so jobs of one lender that together would take it
below are not planned. When no such set frees the owner's GPUs, and a plan was cut short by
a budget or a borrowed job is larger than its lender's budget, a second pass may take
lenders below their guarantees (any job of a queue that borrows as the pass begins),
preferring the plan that overshoots least, and the eviction's reason says so. When the only
borrowed work is inside its `min_runtime`, the owner's reason says whose protection it waits
for and until when. No ping-pong: the lender is then below its guarantee, but the owner is at
or below its own, so it holds nothing the lender could reclaim; and a queue that no longer
borrows is never a victim.
"""

from __future__ import annotations

from trainyard.core.actions.backfill import BackfillState
from trainyard.core.actions.protected import note_protection, protected_queues
from trainyard.core.actions.victims import by_queue, evict_for
from trainyard.core.cycle import Cycle
from trainyard.core.framework import ACTIONS, EVICTORS
from trainyard.core.queues import QueueIndex
from trainyard.core.state import Alloc
from trainyard.core.types import Job


def _below(path: tuple[int, ...], other: tuple[int, ...]) -> tuple[int, ...]:
    """The queues of `path` that are not also on `other` (those below the common ancestor)."""
    shared = set(other)
    return tuple(a for a in path if a not in shared)


def own_excess(queues: QueueIndex, v: int) -> int:
    """GPUs the jobs submitted to queue `v` itself (not to its children) hold above their
    part of its guarantee: what `v` guarantees beyond the sum of its children's guarantees.
    A child's guarantee comes first: a job waiting in a child below its guarantee reclaims
    from the parent's own jobs as from a sibling's (an outside review found the documented
    setup, a guaranteed queue under the `default` queue every job without `-q` goes to, never
    reclaiming from the jobs in `default`)."""
    kids = queues.children[v]
    own = queues.gpus[v] - sum(queues.gpus[c] for c in kids)
    part = max(0, queues.guaranteed[v] - sum(queues.guaranteed[c] for c in kids))
    return own - part


def own_room(queues: QueueIndex, q: int, gpus: int) -> bool:
    """Would the jobs submitted to inner queue `q` itself stay within their part of its
    guarantee (`own_excess`) with `gpus` more? False for a queue without children."""
    return bool(queues.children[q]) and own_excess(queues, q) + gpus <= 0


class _Rules:
    """The reclaim rules for one reclaiming job (a class, not closures: closures would form
    reference cycles with their environment in compiled code)."""

    def __init__(self, queues: QueueIndex, q: int, job: Job, overshoot: bool = False) -> None:
        self.queues = queues
        self.q = q
        self.job = job
        self.my_path = queues.path[q]
        self.overshoot = overshoot  # may a victim take its queue below its guarantee?
        self.refused = False  # did `admit` keep a victim out of a plan?
        # may the job take from its queue's descendants? Only when its queue's guarantee does
        # not cover it (else the borrowers are outside: outside review 15, F2) and its
        # queue's own jobs stay within their part of it
        over = queues.gpus[q] + job.gpus > queues.guaranteed[q]
        self.inner = over and own_room(queues, q, job.gpus)

    def related(self, vq: int) -> bool:
        """The job's own queue, or one of its descendants unless the job may reclaim from
        them (`own_room`): never a lender to it. (An ancestor is a lender through the jobs
        submitted to it directly, `own_excess`.)"""
        return vq == self.q or (not self.inner and self.q in self.queues.path[vq])

    def excess(self, vq: int) -> int:
        """GPUs `vq` holds above guaranteed on its path below the common ancestor; for an
        ancestor of the job's queue, what its own jobs hold above their part (`own_excess`)."""
        queues = self.queues
        if vq in self.my_path:
            return own_excess(queues, vq)
        theirs = _below(queues.path[vq], self.my_path)
        excess = min(queues.gpus[x] - queues.guaranteed[x] for x in theirs)
        if queues.children[vq]:  # its own jobs lend only what they hold above their part
            excess = min(excess, own_excess(queues, vq))  # (outside review 15, F3)
        return excess

    def room(self, vq: int) -> bool:
        """Would the job stay within guaranteed on its own path below the common ancestor?"""
        queues = self.queues
        mine = _below(self.my_path, queues.path[vq])
        return all(queues.gpus[x] + self.job.gpus <= queues.guaranteed[x] for x in mine)

    def allowed(self, a: Alloc) -> bool:
        vq = a.queue
        if self.related(vq) or not self.room(vq):
            return False
        # overshooting: any job of a queue that borrowed when the pass began (the budgets
        # list only those), the plan taking as little below guarantees as it can
        return self.overshoot or self.excess(vq) >= a.gpus

    def admit(self, a: Alloc, taken: dict[int, int]) -> bool:
        """`allowed` for a plan being built: `taken` holds the GPUs the plan already takes
        from each queue (and its ancestors below the common one, whose guarantees bind
        too); an admitted victim is added to it."""
        if self.overshoot:
            return True
        queues = self.queues
        if a.queue in self.my_path:  # an ancestor's own job: within what its own jobs borrow
            key = -1 - a.queue
            if own_excess(queues, a.queue) - taken.get(key, 0) < a.gpus:
                self.refused = True
                return False
            taken[key] = taken.get(key, 0) + a.gpus
            return True
        theirs = _below(queues.path[a.queue], self.my_path)
        for x in theirs:
            if queues.gpus[x] - queues.guaranteed[x] - taken.get(x, 0) < a.gpus:
                self.refused = True
                return False
        own = -1 - a.queue  # an inner queue's own job: within what its own jobs borrow too
        inner = bool(queues.children[a.queue])
        if inner and own_excess(queues, a.queue) - taken.get(own, 0) < a.gpus:
            self.refused = True
            return False
        for x in theirs:
            taken[x] = taken.get(x, 0) + a.gpus
        if inner:
            taken[own] = taken.get(own, 0) + a.gpus
        return True

    def cost(self, a: Alloc) -> tuple[float, ...]:
        if self.overshoot:  # the GPUs by which the victim's queue falls below its guarantee
            over = max(0, a.gpus - self.excess(a.queue))
            return (float(not a.placed_now), float(over), float(a.job.priority), -a.started_at)
        return (
            float(not a.placed_now),
            float(a.job.priority),
            -float(self.excess(a.queue)),
            -a.started_at,
        )


def reclaim_for(cycle: Cycle, job: Job) -> bool:
    queues = cycle.queues
    q = queues.index[job.queue]
    within = queues.gpus[q] + job.gpus <= queues.guaranteed[q]
    if not within and not own_room(queues, q, job.gpus):
        return False
    rules = _Rules(queues, q, job)
    budgets = {}
    per_queue = by_queue(cycle)
    guarded = protected_queues(cycle)
    lenders = per_queue.keys() | guarded if guarded else per_queue
    for vq in lenders:
        if not rules.related(vq) and rules.room(vq):
            spare = rules.excess(vq)
            if spare > 0:
                budgets[vq] = spare
    if not budgets:
        return False
    reason = (
        f"queue {job.queue} reclaims its guaranteed quota"
        if within
        else f"the jobs of queue {job.queue} itself reclaim the part of its guarantee its "
        "children's guarantees leave"
    )
    if evict_for(
        cycle, job, "reclaim", budgets, rules.allowed, rules.cost, reason, admit=rules.admit
    ):
        return True
    allocs = cycle.state.allocs
    if not rules.refused and not any(
        a.gpus > spare and allocs.get(a.job.id) is a
        for vq, spare in budgets.items()
        for a in per_queue.get(vq, ())
    ):
        # no plan was cut short by a lender's budget and no borrowed job is larger than its
        # lender's: overshooting adds no plan now, but a protected job may once its minimum
        # run time ends
        if guarded:
            over = _Rules(queues, q, job, overshoot=True)
            anything = dict.fromkeys(budgets, 1 << 30)
            pool = [
                a
                for vq in anything
                for a in per_queue.get(vq, ())
                if allocs.get(a.job.id) is a and over.allowed(a)
            ]
            note_protection(cycle, job, anything, over.allowed, pool)
        return False
    reason += (
        ": no set of borrowed jobs frees it without taking a lender below its own guarantee, "
        "so the one that overshoots least was chosen"
    )
    over = _Rules(queues, q, job, overshoot=True)
    anything = dict.fromkeys(budgets, 1 << 30)
    return evict_for(
        cycle, job, "reclaim", anything, over.allowed, over.cost, reason, admit=over.admit
    )


def reclaim(cycle: Cycle) -> None:
    failed: dict[tuple[object, ...], int] = {}
    for job in cycle.pending_jobs():
        if job.gpus == 0 or job.id not in cycle.status:
            continue
        key = (cycle.shape(job), cycle.state.epoch)
        if job.gpus >= failed.get(key, 1 << 30):
            continue
        if cycle.quota_blocker(job) >= 0:
            continue
        if cycle.state.epoch != cycle.settled_epoch and cycle.try_place_held(job, "reclaim"):
            continue  # earlier evictions freed more than their preemptor needed
        if not reclaim_for(cycle, job):
            failed[key] = min(failed.get(key, 1 << 30), job.gpus)
            # its reservation does not keep its queue's guarantee from a job eviction can place
            cycle.state_of(BackfillState).unreclaimable.add(job.id)


ACTIONS.register("reclaim", reclaim)
EVICTORS.register("reclaim", reclaim_for)
