"""The order in which a cycle considers pending jobs.

`PendingOrder` is one iterator shared by the allocate and backfill actions (backfill continues
where allocate stopped). With queue order `global` it walks all pending jobs sorted by the job
order. With `drf` it repeatedly serves the queue whose path of fair-share keys (root first) is
smallest, taking that queue's next job in job order; keys are recomputed only after a
placement, since a job that does not fit changes nobody's share.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from trainyard.core.framework import JOB_ORDERS
from trainyard.core.types import Job

if TYPE_CHECKING:
    from trainyard.core.cycle import Cycle


class PendingOrder:
    """Yields pending jobs in scheduling order; remembers what it yielded in `visited`."""

    def __init__(self, cycle: Cycle) -> None:
        self.cycle = cycle
        profile = cycle.profile
        key = JOB_ORDERS.get(profile.job_order)
        self.visited: list[Job] = []
        self._global = profile.queue_order == "global"
        pending = cycle.snapshot.pending
        if self._global:
            self._all = sorted(pending, key=lambda j: key(j, profile))
            self._pos = 0
        else:
            qi = cycle.queues.index
            lists: dict[int, list[Job]] = {}
            for job in pending:
                lists.setdefault(qi[job.queue], []).append(job)
            self._lists = {q: sorted(js, key=lambda j: key(j, profile)) for q, js in lists.items()}
            self._pos_q = dict.fromkeys(self._lists, 0)
            self._keys: dict[int, tuple[tuple[int, float], ...]] = {}
            self._refresh()
        self._placed_before = 0

    def _refresh(self) -> None:
        queues = self.cycle.queues
        self._keys = {
            q: tuple(queues.share_key(a) for a in reversed(queues.path[q]))
            for q in self._lists
            if self._pos_q[q] < len(self._lists[q])
        }

    def __iter__(self) -> Iterator[Job]:
        return self

    def __next__(self) -> Job:
        if self._global:
            if self._pos >= len(self._all):
                raise StopIteration
            job = self._all[self._pos]
            self._pos += 1
        else:
            placed = len(self.cycle.stmt.placed)
            if placed != self._placed_before:
                self._placed_before = placed
                self._refresh()
            if not self._keys:
                raise StopIteration
            q = min(self._keys, key=lambda k: (self._keys[k], k))
            pos = self._pos_q[q]
            job = self._lists[q][pos]
            self._pos_q[q] = pos + 1
            if pos + 1 >= len(self._lists[q]):
                del self._keys[q]
        self.visited.append(job)
        return job

    def rest(self) -> list[Job]:
        """Drain the iterator (jobs never considered, in order)."""
        return list(self)
