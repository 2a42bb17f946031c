"""The order in which a cycle considers pending jobs.

`PendingOrder` is one iterator shared by the allocate and backfill actions (backfill continues
where allocate stopped). With queue order `global` it walks all pending jobs sorted by the job
order. With `drf` it repeatedly serves the queue whose path of fair-share keys (root first) is
smallest, taking that queue's next job in job order; keys are recomputed only for queues
under the same root as a queue whose allocation changed (the cycle reports those in
`touched`), since a job that does not fit changes nobody's share. The smallest key is kept
in a heap of (key, queue) entries; an entry whose key is no longer the queue's is dropped when
it reaches the top.

With `las_drf` the key starts with the least-attained-service level (`las_level`) of the
queue's next job: across queues, jobs that have received less service go first (Tiresias's
rule, now between tenants too), and DRF orders the queues whose next jobs are at the same
level (guarantee deficits first, as under `drf`). A queue's next job changing refreshes its
key. Merging the queues' lists this way yields a job in the order of the prefix maximum of
the levels in its queue's list up to it (then the share path, the queue, the job order),
which is how the incremental path ranks an arrival against the head of the line.

Queues tied on fair share (e.g. two queues both empty and below their guarantees) are served
by `Profile.queue_tie_break`: "declared" takes the queue listed first; "smaller" the queue
whose next job asks for fewer GPUs (then the one listed first), so that small jobs fill the
room a large one could not use. The size is part of the key, so it is refreshed whenever a
queue's next job changes.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Iterator
from typing import TYPE_CHECKING

from trainyard.core.framework import JOB_ORDERS
from trainyard.core.queues import QueueIndex
from trainyard.core.types import Job

if TYPE_CHECKING:
    from trainyard.core.cycle import Cycle

SharePath = tuple[tuple[int, float], ...]
# (LAS level of the queue's next job (0 unless las_drf), fair-share keys root first, size of
# the queue's next job (0 unless the tie-break is "smaller"))
QueueKey = tuple[int, SharePath, int]


def share_path(queues: QueueIndex, q: int) -> SharePath:
    """The fair-share keys of `q` and its ancestors, root first."""
    path = queues.path[q]
    if len(path) == 1:
        return (queues.share_key(q),)
    return tuple(map(queues.share_key, reversed(path)))


class PendingOrder:
    """Yields pending jobs in scheduling order; remembers what it yielded in `visited`."""

    def __init__(self, cycle: Cycle) -> None:
        self.queues = cycle.queues  # not the cycle itself: no reference cycle to collect
        profile = cycle.profile
        key = JOB_ORDERS.get(profile.job_order)
        self.visited: list[Job] = []
        self._global = profile.queue_order == "global"
        self._smaller = profile.queue_tie_break == "smaller"
        self._las = profile.queue_order == "las_drf"
        self._profile = profile
        # `las_level` of the job orders, inlined: read once, not per job from the profile
        self._thresholds = profile.las_thresholds
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
            queues = cycle.queues
            self._group: dict[int, list[int]] = {}  # root queue -> queues with jobs below it
            for q in self._lists:
                self._group.setdefault(queues.path[q][-1], []).append(q)
            self._keys: dict[int, QueueKey] = {}
            for q in self._lists:
                self._keys[q] = self._key(q)
            self._heap = [(k, q) for q, k in self._keys.items()]
            heapq.heapify(self._heap)
        self.touched: set[int] = set()  # queues whose allocation changed (set by the cycle)

    def _key(self, q: int) -> QueueKey:
        head = self._lists[q][self._pos_q[q]]
        level = bisect_right(self._thresholds, head.attained_service) if self._las else 0
        return (level, share_path(self.queues, q), head.gpus if self._smaller else 0)

    def _refresh(self) -> None:
        """Recompute the keys of queues that share a root with a touched queue."""
        path = self.queues.path
        keys = self._keys
        for touched in self.touched:
            for q in self._group.get(path[touched][-1], ()):
                if q in keys:
                    key = self._key(q)
                    if key != keys[q]:
                        keys[q] = key
                        heapq.heappush(self._heap, (key, q))
        self.touched.clear()

    def __iter__(self) -> Iterator[Job]:
        return self

    def __next__(self) -> Job:
        if self._global:
            if self._pos >= len(self._all):
                raise StopIteration
            job = self._all[self._pos]
            self._pos += 1
        else:
            if self.touched:
                self._refresh()
            keys = self._keys
            heap = self._heap
            while heap and keys.get(heap[0][1]) != heap[0][0]:
                heapq.heappop(heap)  # stale: the queue's key changed, or it has no jobs left
            if not heap:
                raise StopIteration
            q = heap[0][1]
            pos = self._pos_q[q]
            job = self._lists[q][pos]
            self._pos_q[q] = pos + 1
            if pos + 1 >= len(self._lists[q]):
                del self._keys[q]
            elif self._smaller or self._las:
                # the queue's next job changed, its shares did not (a change of share
                # marks the queue touched, and `_refresh` recomputes its whole key)
                nxt = self._lists[q][pos + 1]
                old = keys[q]
                level = bisect_right(self._thresholds, nxt.attained_service) if self._las else 0
                size = nxt.gpus if self._smaller else 0
                if level != old[0] or size != old[2]:
                    key = (level, old[1], size)
                    keys[q] = key
                    heapq.heappush(heap, (key, q))
        self.visited.append(job)
        return job

    def queue_jobs(self, q: int) -> list[Job]:
        """Queue `q`'s pending jobs in job order (queue orders `drf` and `las_drf`)."""
        return self._lists.get(q, [])

    def rest(self) -> list[Job]:
        """Drain the iterator (jobs never considered, in order)."""
        return list(self)
