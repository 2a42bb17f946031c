"""las_preempt: Tiresias-style preemption by attained service.

A pending job evicts running jobs of the same queue, of no higher priority, whose
least-attained-service level (`plugins.job_orders.las_level`: attained GPU-seconds bucketed at
`Profile.las_thresholds`) is strictly higher than its own: jobs that have already received
more service give way to jobs that have received less (Gu et al., "Tiresias", NSDI'19, the
discretised 2D-LAS scheduler). Victims: the most served level first, then the most recently
started. The plan is committed only if the preemptor then fits (`victims.evict_for`). With
`Profile.las_preempt_filled` (off in the built-in profiles) a job is evicted only when the queue's
waiting jobs of lower levels ask for at least the GPUs it holds: a 16-GPU run is not stopped
for one 1-GPU job, its other 15 GPUs idle (outside review 14).

No ping-pong: a victim's level is strictly higher than its preemptor's, and a pending job's
attained service does not grow, so the victim cannot evict its preemptor back until the
preemptor has itself been served into a higher level (which is what LAS intends).
"""

from __future__ import annotations

from trainyard.core.actions.protected import note_protection, protected_queues
from trainyard.core.actions.victims import by_queue, evict_for
from trainyard.core.cycle import Cycle
from trainyard.core.framework import ACTIONS, EVICTORS, Profile
from trainyard.core.plugins.job_orders import las_level
from trainyard.core.state import Alloc
from trainyard.core.types import Job


class _Rules:
    """The preemption rules for one preemptor (a class, not closures: see reclaim.py).
    `demand[level]`: GPUs the queue's waiting jobs below that LAS level ask for in all
    (None: any victim size, `Profile.las_preempt_filled` off)."""

    def __init__(self, q: int, job: Job, profile: Profile, demand: list[int] | None = None) -> None:
        self.q = q
        self.job = job
        self.profile = profile
        self.level = las_level(job, profile)
        self.demand = demand

    def allowed(self, a: Alloc) -> bool:
        level = las_level(a.job, self.profile)
        return (
            a.queue == self.q
            and a.job.priority <= self.job.priority
            and level > self.level
            and (self.demand is None or a.gpus <= self.demand[level])
        )

    def cost(self, a: Alloc) -> tuple[float, ...]:
        return (float(not a.placed_now), float(-las_level(a.job, self.profile)), -a.started_at)


class _Index:
    """The cycle's evictable jobs (`victims.by_queue`, fixed before its first eviction) of
    each queue by LAS level (index = level), lowest priority first, indexed once per action
    (a class, not closures: see reclaim.py)."""

    def __init__(self, cycle: Cycle, profile: Profile) -> None:
        self.levels = len(profile.las_thresholds) + 1
        self.by_queue: dict[int, list[list[Alloc]]] = {}
        for allocs in by_queue(cycle).values():  # the cycle's fixed pool of victims
            for a in allocs:
                level = las_level(a.job, profile)
                if level:
                    rows = self.by_queue.get(a.queue)
                    if rows is None:
                        rows = self.by_queue[a.queue] = [[] for _ in range(self.levels)]
                    rows[level].append(a)
        for rows in self.by_queue.values():
            for row in rows:
                row.sort(key=_priority)

    def gpus_above(self, q: int, level: int) -> int:
        """GPUs the queue's evictable jobs hold at levels above `level` (as indexed)."""
        rows = self.by_queue.get(q)
        if rows is None:
            return 0
        return sum(a.gpus for row in rows[level + 1 :] for a in row)

    def victims(self, q: int, level: int, priority: int) -> list[Alloc]:
        """Jobs of queue `q` above `level` of no higher `priority`."""
        out: list[Alloc] = []
        for row in self.by_queue.get(q, [])[level + 1 :]:
            for a in row:
                if a.job.priority > priority:
                    break  # sorted by priority: the rest is higher
                out.append(a)
        return out


def _priority(a: Alloc) -> int:
    return a.job.priority


def las_preempt_for(cycle: Cycle, job: Job) -> bool:
    return _preempt_with(cycle, job, _Index(cycle, cycle.profile))


def _demand(cycle: Cycle, job: Job, q: int, levels: int) -> list[int] | None:
    """GPUs the queue's waiting jobs below each LAS level ask for in all (`_Rules`): `job`
    and the others still pending (an arrival decided alone is counted as in a full cycle)."""
    profile = cycle.profile
    if not profile.las_preempt_filled:
        return None
    asked = [0] * (levels + 1)
    asked[las_level(job, profile) + 1] += job.gpus
    index = cycle.queues.index
    for j in cycle.pending_jobs():
        if j.id != job.id and j.id in cycle.status and index[j.queue] == q:
            asked[las_level(j, profile) + 1] += j.gpus
    for level in range(1, levels + 1):
        asked[level] += asked[level - 1]
    return asked


def _preempt_with(cycle: Cycle, job: Job, index: _Index) -> bool:
    q = cycle.queues.index[job.queue]
    rules = _Rules(q, job, cycle.profile, _demand(cycle, job, q, index.levels))
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
        candidates=index.victims(q, rules.level, job.priority),
    )


def las_preempt(cycle: Cycle) -> None:
    failed: dict[tuple[object, ...], int] = {}
    profile = cycle.profile
    index = _Index(cycle, profile)
    guarded = protected_queues(cycle)  # queues with jobs inside their min_runtime
    if not index.by_queue and not guarded:
        return  # nobody evictable has been served past the first threshold
    state = cycle.state
    qindex = cycle.queues.index
    for job in cycle.then_retracted(cycle.pending_jobs()):
        if job.gpus == 0 or job.id not in cycle.status:
            continue
        if state.epoch != cycle.settled_epoch and cycle.try_place_held(job, "las_preempt"):
            continue  # earlier evictions freed more than their preemptor needed
        q = qindex[job.queue]
        if q not in index.by_queue:
            if q in guarded:  # no victim now: perhaps once a protection ends
                _note_protected(cycle, job, q, index)
            continue  # no running job of its queue has been served past a threshold
        level = las_level(job, profile)
        # Upper bound on the room an eviction plan could make: the free GPUs of the best
        # class now plus every more-served victim of the queue (as of the action's start).
        if max(state.class_free, default=0) + index.gpus_above(q, level) < job.gpus:
            if q in guarded:
                _note_protected(cycle, job, q, index)
            continue
        key = (cycle.shape(job), job.priority, level, state.epoch)
        if job.gpus >= failed.get(key, 1 << 30):
            continue
        if not _preempt_with(cycle, job, index):
            failed[key] = min(failed.get(key, 1 << 30), job.gpus)
            _note_unfilled(cycle, job, q, level, index)


def _note_unfilled(cycle: Cycle, job: Job, q: int, level: int, index: _Index) -> None:
    """Tell a job that more-served jobs of its queue were not evicted for it because their
    GPUs would idle (`Profile.las_preempt_filled`)."""
    demand = _demand(cycle, job, q, index.levels)
    if demand is None or job.id not in cycle.status or job.id in cycle.hints:
        return
    big = [
        a
        for a in index.victims(q, level, job.priority)
        if a.job.id in cycle.state.allocs and a.gpus > demand[las_level(a.job, cycle.profile)]
    ]
    if big:
        names = ", ".join(sorted(a.job.id for a in big)[:3]) + (" ..." if len(big) > 3 else "")
        cycle.hints[job.id] = (
            f"; jobs of its queue that have received more service ({names}) are not stopped "
            "for it: the waiting jobs of the queue would use fewer of their GPUs than they hold"
        )


def _note_protected(cycle: Cycle, job: Job, q: int, index: _Index) -> None:
    """Say when `job` could evict its way in once more-served jobs of its queue leave their
    `min_runtime` (`protected.note_protection`; its ETA and reason)."""
    rules = _Rules(q, job, cycle.profile)
    pool = index.victims(q, rules.level, job.priority)
    note_protection(cycle, job, {q: 1 << 30}, rules.allowed, pool)


ACTIONS.register("las_preempt", las_preempt)
EVICTORS.register("las_preempt", las_preempt_for)
