"""Hierarchical queues: what each queue holds, its quota checks and its fair-share key.

Owned here: per-queue allocated GPUs/CPU/memory *including descendants*, kept current by
`ClusterState` on every allocate/evict; the quota rules; and the dominant-resource fair-share
key (DRF with decayed usage history) by which the cycle chooses which queue to serve next.

Quota rules (checked on the queue and every ancestor):
- `limit`: allocated + request <= limit.
- a non-preemptible job must fit inside `guaranteed` (it could never be reclaimed).
- reclaim: a queue may take GPUs back only while it stays within `guaranteed`; a victim queue
  may only lose GPUs it holds above its own `guaranteed`. Together these make reclaim
  ping-pong free: after a reclaim neither side can reclaim from the other.
"""

from __future__ import annotations

from trainyard.core.types import Queue


class QueueIndex:
    """Queue tree with live allocation counters. Mutated only through `ClusterState`."""

    def __init__(
        self,
        queues: tuple[Queue, ...],
        total_gpus: int,
        total_cpus: float,
        total_mem: float,
        usage_weight: float,
    ) -> None:
        self.queues = queues
        self.index = {q.name: i for i, q in enumerate(queues)}
        n = len(queues)
        self.parent: list[int] = [-1 if q.parent is None else self.index[q.parent] for q in queues]
        self.children: list[list[int]] = [[] for _ in range(n)]
        self.roots: list[int] = []
        for i, p in enumerate(self.parent):
            (self.roots if p < 0 else self.children[p]).append(i)
        self.path: list[tuple[int, ...]] = []  # the queue itself, then ancestors to the root
        for i in range(n):
            chain = [i]
            while self.parent[chain[-1]] >= 0:
                chain.append(self.parent[chain[-1]])
            self.path.append(tuple(chain))
        self.guaranteed = [q.guaranteed for q in queues]
        self.limit = [q.limit for q in queues]
        self.has_limits = any(lim is not None for lim in self.limit)
        self.weight = [q.weight for q in queues]
        self.usage = [q.usage for q in queues]
        self.gpus = [0] * n
        self.cpus = [0.0] * n
        self.mem = [0.0] * n
        self._tg = max(total_gpus, 1)
        self._tc = max(total_cpus, 1e-9)
        self._tm = max(total_mem, 1e-9)
        self._uw = usage_weight

    def add(self, q: int, gpus: int, cpus: float, mem: float) -> None:
        for a in self.path[q]:
            self.gpus[a] += gpus
            self.cpus[a] += cpus
            self.mem[a] += mem

    def within_limit(self, q: int, gpus: int) -> int:
        """-1 if `gpus` more fit under every limit on the path, else the queue that blocks."""
        for a in self.path[q]:
            lim = self.limit[a]
            if lim is not None and self.gpus[a] + gpus > lim:
                return a
        return -1

    def limit_room(self, q: int) -> int:
        """GPUs the queue may still take under every limit on its path (a large number when
        none is set)."""
        room = 1 << 30
        if self.has_limits:
            for a in self.path[q]:
                lim = self.limit[a]
                if lim is not None:
                    room = min(room, lim - self.gpus[a])
        return max(0, room)

    def within_guaranteed(self, q: int, gpus: int) -> int:
        """-1 if `gpus` more stay within `guaranteed` on the whole path, else the blocker."""
        for a in self.path[q]:
            if self.gpus[a] + gpus > self.guaranteed[a]:
                return a
        return -1

    def over_guaranteed(self, q: int) -> int:
        """GPUs the queue could lose without any queue on its path dropping below guaranteed."""
        return min(self.gpus[a] - self.guaranteed[a] for a in self.path[q])

    def share_key(self, q: int) -> tuple[int, float]:
        """Sort key: queues below their guaranteed quota first (by fill ratio), then by
        weighted dominant share plus decayed usage; lower is served first."""
        g = self.guaranteed[q]
        if self.gpus[q] < g:
            return (0, self.gpus[q] / g)
        dominant = max(self.gpus[q] / self._tg, self.cpus[q] / self._tc, self.mem[q] / self._tm)
        return (1, (dominant + self._uw * self.usage[q]) / self.weight[q])

    def name(self, q: int) -> str:
        return self.queues[q].name
