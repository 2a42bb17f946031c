"""preempt: within a queue, a higher-priority pending job evicts lower-priority running jobs.

Only jobs of the same queue with strictly lower priority are victims (preemptible, outside
their `min_runtime`, not placed in this cycle); lowest priority first, then the most recently
started. The plan is committed only if the preemptor then fits (`victims.evict_for`). Since
victims have strictly lower priority they can never preempt their preemptor back.

Priority never crosses queues, not even between a parent queue and its children: across
queues, guarantees (reclaim) and fair share decide, so that a priority set in one team's queue
cannot take another team's GPUs. A job that outranks the jobs of other queues on the GPUs it
needs, but finds none to preempt in its own, says so in its reason.
"""

from __future__ import annotations

from trainyard.core.actions.victims import evict_for
from trainyard.core.cycle import CAPACITY_CODES, Cycle
from trainyard.core.framework import ACTIONS, EVICTORS
from trainyard.core.state import Alloc
from trainyard.core.types import Job


class _Rules:
    """The preemption rules for one preemptor (a class, not closures: see reclaim.py)."""

    def __init__(self, q: int, job: Job) -> None:
        self.q = q
        self.job = job

    def allowed(self, a: Alloc) -> bool:
        return a.queue == self.q and a.job.priority < self.job.priority

    def cost(self, a: Alloc) -> tuple[float, ...]:
        return (float(not a.placed_now), float(a.job.priority), -a.started_at)


def preempt_for(cycle: Cycle, job: Job) -> bool:
    q = cycle.queues.index[job.queue]
    rules = _Rules(q, job)
    reason = f"priority {job.priority} job {job.id} needs the GPUs"
    budgets = {q: 1 << 30}  # any size: the queue's total does not change
    return evict_for(
        cycle,
        job,
        "preempt",
        budgets,
        rules.allowed,
        rules.cost,
        reason,
        below_priority=job.priority,
    )


def preempt(cycle: Cycle) -> None:
    failed: dict[tuple[object, ...], int] = {}
    hinted: dict[tuple[object, ...], str] = {}
    lowest = min(
        (a.job.priority for a in cycle.state.allocs.values() if a.queue >= 0), default=None
    )
    if lowest is None:
        return  # nothing runs: nothing to preempt
    for job in cycle.then_retracted(cycle.pending_jobs()):
        if job.gpus == 0 or job.id not in cycle.status:
            continue
        if job.priority <= lowest:  # no running job has a lower priority than this one
            if cycle.state.epoch != cycle.settled_epoch:
                cycle.try_place_held(job, "preempt")  # room that earlier evictions left over
            continue
        key = (cycle.shape(job), job.priority, cycle.state.epoch)
        if job.gpus >= failed.get(key, 1 << 30):
            continue
        if cycle.state.epoch != cycle.settled_epoch and cycle.try_place_held(job, "preempt"):
            continue  # earlier evictions freed more than their preemptor needed
        if not preempt_for(cycle, job):
            failed[key] = min(failed.get(key, 1 << 30), job.gpus)
            _hint_other_queues(cycle, job, hinted)


def _hint_other_queues(cycle: Cycle, job: Job, memo: dict[tuple[object, ...], str]) -> None:
    """Tell a job whose lower-priority competitors are all in other queues why it waits
    (one scan of the running jobs per queue, priority and device classes)."""
    st = cycle.status.get(job.id)
    if st is None or st.code not in CAPACITY_CODES:
        return
    classes = cycle.classes_of(job)
    key = (job.queue, job.priority, classes)
    known = memo.get(key)
    if known is not None:
        if known:
            cycle.hints[job.id] = known
        return
    others = sorted(
        {
            a.job.queue
            for a in cycle.state.allocs.values()
            if a.queue >= 0
            and a.job.queue != job.queue
            and a.job.priority < job.priority
            and a.cls in classes
        }
    )
    hint = ""
    if others:
        names = ", ".join(others[:3]) + (" ..." if len(others) > 3 else "")
        hint = (
            f"; lower-priority jobs on such GPUs are in other queues ({names}): priority "
            f"preempts only inside queue {job.queue}, other queues give way only to "
            "guarantees (reclaim)"
        )
        cycle.hints[job.id] = hint
    memo[key] = hint


ACTIONS.register("preempt", preempt)
EVICTORS.register("preempt", preempt_for)
