"""When a pending job's only way in is to evict jobs still inside their `min_runtime`.

An eviction plan may only use jobs past their minimum run time (`victims.eligible`). When no
plan exists now, but one would once enough protected jobs reach the end of their protection
(the free GPUs of the job's best class, plus the eligible victims, plus the protected victims
whose protection ends first, cover the request), the job's pending reason says which job it
waits for and when ("waiting for job X's minimum run time to end at t=T"), and its estimated
start is that time unless its reservation starts earlier. The bound counts GPUs, not
placements, so it is an estimate like any other ETA. The protected jobs are listed once per
cycle, soonest protection end first (`ProtectedState`, this module's own state in a cycle,
`Cycle.state_of`); the bound found for a job goes to `Cycle.protected_until`, which the
explanation reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from trainyard.core.cycle import Cycle
from trainyard.core.state import Alloc
from trainyard.core.types import Job


@dataclass(slots=True)
class ProtectedState:
    """The cycle's running preemptible jobs inside their `min_runtime`, soonest end first
    (None until first needed)."""

    allocs: list[Alloc] | None = None
    queues: frozenset[int] | None = None  # the queues those jobs are in


def _protected(cycle: Cycle) -> list[Alloc]:
    """Running preemptible jobs still inside their `min_runtime`, soonest end first."""
    st = cycle.state_of(ProtectedState)
    found = st.allocs
    if found is None:
        now = cycle.now
        found = [
            a
            for a in cycle.state.allocs.values()
            if a.queue >= 0
            and a.job.preemptible
            and not a.placed_now
            and now - a.started_at < a.job.min_runtime
        ]
        found.sort(key=_protection_end)
        st.allocs = found
    return found


def protected_queues(cycle: Cycle) -> frozenset[int]:
    """The queues that hold a running preemptible job inside its `min_runtime`: a reclaim
    lists them among the lenders although none of their jobs may be evicted yet, so that
    `note_protection` can say which job the owner waits for."""
    st = cycle.state_of(ProtectedState)
    found = st.queues
    if found is None:
        found = st.queues = frozenset(a.queue for a in _protected(cycle))
    return found


def _protection_end(a: Alloc) -> float:
    return a.started_at + a.job.min_runtime


def note_protection(
    cycle: Cycle,
    job: Job,
    budgets: dict[int, int],
    allowed: Callable[[Alloc], bool],
    pool: list[Alloc],
    below_priority: int | None = None,
) -> None:
    """Record when `job` could evict its way in once protections end (see module doc)."""
    protected = _protected(cycle)
    if not protected:
        return
    state = cycle.state
    allocs = state.allocs
    g = job.gpus
    for c in cycle.classes_of(job):
        have = state.class_free[c] + sum(a.gpus for a in pool if a.cls == c and a.job.id in allocs)
        for a in protected:
            if a.cls != c or a.job.id not in allocs or a.gpus > budgets.get(a.queue, 0):
                continue
            if below_priority is not None and a.job.priority >= below_priority:
                continue
            if not allowed(a):
                continue
            have += a.gpus
            if have >= g:
                end = _protection_end(a)
                known = cycle.protected_until.get(job.id)
                if known is None or end < known[0]:
                    cycle.protected_until[job.id] = (end, a.job.id)
                break
