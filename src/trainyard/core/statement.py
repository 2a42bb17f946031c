"""Tentative changes to the cluster state, with checkpoint / rollback.

Every action changes the state only through a `Statement`: `allocate` and `evict` apply at
once (so the next placement sees them) and append to an undo log; `checkpoint()` marks a point,
`rollback(cp)` undoes everything after it, in reverse. A gang is placed whole or not at all,
and a preemption plan (evictions + the preemptor's placement) is kept only if the preemptor
fits: otherwise the whole plan is rolled back. Undo logs instead of copies keep this O(change).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainyard.core.state import Alloc, ClusterState
from trainyard.core.types import ActionName


@dataclass(slots=True)
class Placed:
    """A placement made in this cycle (decision record)."""

    alloc: Alloc
    action: ActionName
    after_evictions: tuple[str, ...]


@dataclass(slots=True)
class Evicted:
    """An eviction made in this cycle (decision record)."""

    alloc: Alloc
    action: ActionName
    for_job: str
    reason: str


class Statement:
    """Undo-logged changes to a `ClusterState`, plus the decision records they produce."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._log: list[tuple[str, Alloc, Placed | None]] = []
        self.placed: dict[str, Placed] = {}
        self.evicted: dict[str, Evicted] = {}

    def checkpoint(self) -> int:
        return len(self._log)

    def allocate(
        self,
        alloc: Alloc,
        action: ActionName | None,
        after_evictions: tuple[str, ...] = (),
    ) -> None:
        """Take the devices of `alloc`. `action=None` is a hold (reservation), not a placement."""
        self.state.take(alloc)
        self._log.append(("take", alloc, None))
        if action is not None:
            self.placed[alloc.job.id] = Placed(alloc, action, after_evictions)

    def release(self, job_id: str) -> Alloc:
        """Give back a hold or a tentative allocation without recording an eviction."""
        alloc = self.state.give(job_id)
        self._log.append(("give", alloc, self.placed.pop(job_id, None)))
        return alloc

    def evict(self, job_id: str, action: ActionName, for_job: str, reason: str) -> Alloc:
        """Evict a running job (whole gang) and record why."""
        alloc = self.state.give(job_id)
        self._log.append(("evict", alloc, None))
        self.evicted[job_id] = Evicted(alloc, action, for_job, reason)
        return alloc

    def rollback(self, checkpoint: int) -> None:
        """Undo every change made after `checkpoint`, newest first."""
        log = self._log
        state = self.state
        while len(log) > checkpoint:
            op, alloc, placed = log.pop()
            jid = alloc.job.id
            if op == "take":
                state.give(jid)
                self.placed.pop(jid, None)
            else:
                state.take(alloc)
                if op == "evict":
                    self.evicted.pop(jid, None)
                elif placed is not None:
                    self.placed[jid] = placed
