"""las_preempt: Tiresias-style preemption by attained service.

A pending job evicts running jobs of the same queue, of no higher priority, whose
least-attained-service level (`plugins.order.las_level`: attained GPU-seconds bucketed at
`Profile.las_thresholds`) is strictly higher than its own: jobs that have already received
more service give way to jobs that have received less (Gu et al., "Tiresias", NSDI'19, the
discretised 2D-LAS scheduler). Victims: the most served level first, then the most recently
started. The plan is committed only if the preemptor then fits (`victims.evict_for`).

No ping-pong: a victim's level is strictly higher than its preemptor's, and a pending job's
attained service does not grow, so the victim cannot evict its preemptor back until the
preemptor has itself been served into a higher level (which is what LAS intends).
"""

from __future__ import annotations

from trainyard.core.actions.victims import eligible, evict_for
from trainyard.core.cycle import Cycle
from trainyard.core.framework import ACTIONS, Profile
from trainyard.core.plugins.order import las_level
from trainyard.core.state import Alloc
from trainyard.core.types import Job


class _Rules:
    """The preemption rules for one preemptor (a class, not closures: see reclaim.py)."""

    def __init__(self, q: int, job: Job, profile: Profile) -> None:
        self.q = q
        self.job = job
        self.profile = profile
        self.level = las_level(job, profile)

    def allowed(self, a: Alloc) -> bool:
        return (
            a.queue == self.q
            and a.job.priority <= self.job.priority
            and las_level(a.job, self.profile) > self.level
        )

    def cost(self, a: Alloc) -> tuple[float, ...]:
        return (float(not a.placed_now), float(-las_level(a.job, self.profile)), -a.started_at)


def las_preempt_for(cycle: Cycle, job: Job) -> bool:
    q = cycle.queues.index[job.queue]
    rules = _Rules(q, job, cycle.profile)
    reason = f"job {job.id} has received less service (LAS level {rules.level})"
    budgets = {q: 1 << 30}
    return evict_for(
        cycle,
        job,
        "las_preempt",
        budgets,
        rules.allowed,
        rules.cost,
        reason,
        below_priority=job.priority + 1,
        prefilter=rules.allowed,
    )


def _victim_gpus(cycle: Cycle, profile: Profile) -> dict[str, list[int]]:
    """Queue -> GPUs its evictable running jobs hold at each LAS level (index = level)."""
    out: dict[str, list[int]] = {}
    levels = len(profile.las_thresholds) + 1
    for a in cycle.state.allocs.values():
        if a.queue >= 0 and eligible(cycle, a):
            level = las_level(a.job, profile)
            if level:
                row = out.get(a.job.queue)
                if row is None:
                    row = out[a.job.queue] = [0] * levels
                row[level] += a.gpus
    return out


def las_preempt(cycle: Cycle) -> None:
    failed: dict[tuple[object, ...], int] = {}
    profile = cycle.profile
    victims = _victim_gpus(cycle, profile)
    if not victims:
        return  # nobody evictable has been served past the first threshold
    state = cycle.state
    for job in cycle.pending_jobs():
        if job.gpus == 0 or job.id not in cycle.status:
            continue
        if state.epoch != cycle.settled_epoch and cycle.try_place(job, "las_preempt"):
            continue  # earlier evictions freed more than their preemptor needed
        row = victims.get(job.queue)
        if row is None:
            continue  # no running job of its queue has been served past a threshold
        level = las_level(job, profile)
        # Upper bound on the room an eviction plan could make: the free GPUs of the best
        # class now plus every more-served victim of the queue (as of the action's start).
        if max(state.class_free, default=0) + sum(row[level + 1 :]) < job.gpus:
            continue
        key = (
            job.queue,
            job.priority,
            level,
            job.gpu_types,
            job.gpu_memory_gb,
            job.topology,
            state.epoch,
        )
        if job.gpus >= failed.get(key, 1 << 30):
            continue
        if not las_preempt_for(cycle, job):
            failed[key] = min(failed.get(key, 1 << 30), job.gpus)


ACTIONS.register("las_preempt", las_preempt)
