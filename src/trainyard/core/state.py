"""The mutable cluster index a cycle works on: who holds which device, what is free where.

`ClusterState` is built from a `Snapshot` at the start of a cycle and changed only through
`take` / `give` (called by `statement.Statement`, which logs them for rollback). It keeps, at
all times and in O(levels) per change:

- per node: the free-device bitmask, free GPU count, free CPU and memory;
- per device class and free count k: the bitmask of nodes with exactly k free GPUs, so the
  best-fitting node for a small job is found without scanning nodes;
- per topology level, class and domain: free GPUs, so a gang's feasibility inside a leaf
  switch or spine is answered without scanning nodes;
- per queue (with ancestors): allocated GPUs/CPU/memory (see `queues.QueueIndex`).
"""

from __future__ import annotations

from typing import Final

from trainyard.core.queues import QueueIndex
from trainyard.core.resources import mask_of
from trainyard.core.snapshot import Snapshot, SnapshotError, double_booking, placement_error
from trainyard.core.topology import Layout
from trainyard.core.types import Job

PHANTOM_QUEUE: Final = -1
"""Queue index of reservation holds: they take devices but count against no quota."""


class Alloc:
    """Devices held by one job: `parts` is a list of (node index, device mask, cpus, mem).

    A plain slotted class (not a dataclass): tens of thousands are made per cycle."""

    __slots__ = ("cls", "expected_end", "gpus", "job", "parts", "placed_now", "queue", "started_at")

    def __init__(
        self,
        job: Job,
        queue: int,
        cls: int,
        parts: list[tuple[int, int, float, float]],
        started_at: float,
        placed_now: bool = False,
        expected_end: float | None = None,
        gpus: int = -1,
    ) -> None:
        self.job = job
        self.queue = queue
        self.cls = cls
        self.parts = parts
        self.started_at = started_at
        self.placed_now = placed_now
        self.expected_end = expected_end
        self.gpus = gpus if gpus >= 0 else sum(m.bit_count() for _n, m, _c, _x in parts)


class ClusterState:
    """Free capacity and allocations, indexed for placement. See the module docstring."""

    def __init__(self, layout: Layout, snapshot: Snapshot, queues: QueueIndex) -> None:
        self.layout = layout
        self.queues = queues
        self.now = snapshot.now
        nodes = layout.nodes
        self.free_mask: list[int] = list(layout.usable_mask)
        self.free_cnt: list[int] = [m.bit_count() for m in self.free_mask]
        self.free_cpu: list[float] = [n.cpus for n in nodes]
        self.free_mem: list[float] = [n.memory_gb for n in nodes]
        ncls = len(layout.classes)
        self.bucket: list[list[int]] = [[0] * (layout.class_node_max[c] + 1) for c in range(ncls)]
        self.class_free: list[int] = []
        self.dom_free: list[list[list[int]]] = [
            [list(row) for row in per_class] for per_class in layout.domain_capacity
        ]
        self.allocs: dict[str, Alloc] = {}
        # Bumped whenever capacity grows (evictions, rollbacks): failure caches key on it.
        self.epoch = 0
        self._load_running(snapshot)

    def _load_running(self, snapshot: Snapshot) -> None:
        """Record the running jobs and build every aggregate in one pass (no per-job undo)."""
        layout = self.layout
        index = layout.node_index
        queues = self.queues
        qindex = queues.index
        free_mask = self.free_mask
        free_cpu = self.free_cpu
        free_mem = self.free_mem
        class_of_node = layout.class_of_node
        allocs = self.allocs
        per_queue: dict[int, list[float]] = {}
        held = [0] * len(layout.nodes)
        node_gpus = [node.gpus for node in layout.nodes]
        for i, r in enumerate(snapshot.running):
            job = r.job
            parts = []
            cls = -1
            g = job.gpus
            total = 0
            for nd in r.placement:
                n = index.get(nd.node, -1)
                k = len(nd.devices)
                total += k
                try:
                    mask = mask_of(nd.devices)  # a negative device index raises ValueError
                except ValueError:
                    mask = -1
                if n < 0 or mask < 0 or mask >> node_gpus[n] or mask.bit_count() != k:
                    raise placement_error(snapshot, i, r) or SnapshotError("running", "invalid")
                if held[n] & mask:
                    raise double_booking(snapshot, i, nd, held[n] & mask)
                held[n] |= mask
                share = k / g if g else 1.0
                cpus, mem = job.cpus * share, job.memory_gb * share
                parts.append((n, mask, cpus, mem))
                free_mask[n] &= ~mask
                free_cpu[n] -= cpus
                free_mem[n] -= mem
                if k:
                    cls = class_of_node[n]
            if total != g or (g == 0 and len(parts) != 1):
                raise placement_error(snapshot, i, r) or SnapshotError("running", "invalid")
            d = job.expected_duration
            end = r.started_at + d if d is not None else None
            q = qindex[job.queue]
            allocs[job.id] = Alloc(job, q, cls, parts, r.started_at, False, end, g)
            acc = per_queue.get(q)
            if acc is None:
                per_queue[q] = [g, job.cpus, job.memory_gb]
            else:
                acc[0] += g
                acc[1] += job.cpus
                acc[2] += job.memory_gb
        for q, (g_sum, c_sum, m_sum) in per_queue.items():
            queues.add(q, int(g_sum), c_sum, m_sum)
        self.free_cnt = [m.bit_count() for m in free_mask]
        self.class_free = [0] * len(layout.classes)
        depth = layout.depth
        for i, c in enumerate(layout.class_of_node):
            if c < 0:
                continue
            k = self.free_cnt[i]
            self.bucket[c][k] |= 1 << i
            used = layout.usable_mask[i].bit_count() - k
            self.class_free[c] += k
            if used:
                for level in range(depth):
                    self.dom_free[level][c][layout.domain_of[level][i]] -= used

    # -- the only two mutators -------------------------------------------------------------

    def take(self, alloc: Alloc) -> None:
        """Mark `alloc`'s devices used and record it (devices must be free)."""
        layout = self.layout
        depth = layout.depth
        usable = layout.usable_mask
        for n, mask, cpus, mem in alloc.parts:
            mask &= usable[n]  # a device that failed under a running job is never free
            k = mask.bit_count()
            self.free_cpu[n] -= cpus
            self.free_mem[n] -= mem
            if not k:
                continue
            c = layout.class_of_node[n]
            old = self.free_cnt[n]
            new = old - k
            self.free_mask[n] &= ~mask
            self.free_cnt[n] = new
            bit = 1 << n
            b = self.bucket[c]
            b[old] ^= bit
            b[new] |= bit
            self.class_free[c] -= k
            for level in range(depth):
                self.dom_free[level][c][layout.domain_of[level][n]] -= k
        if alloc.queue >= 0:
            self.queues.add(alloc.queue, alloc.gpus, alloc.job.cpus, alloc.job.memory_gb)
        self.allocs[alloc.job.id] = alloc

    def give(self, job_id: str) -> Alloc:
        """Free the devices of `job_id` and forget its allocation; returns it (for undo)."""
        alloc = self.allocs.pop(job_id)
        layout = self.layout
        depth = layout.depth
        usable = layout.usable_mask
        for n, mask, cpus, mem in alloc.parts:
            mask &= usable[n]
            k = mask.bit_count()
            self.free_cpu[n] += cpus
            self.free_mem[n] += mem
            if not k:
                continue
            c = layout.class_of_node[n]
            old = self.free_cnt[n]
            new = old + k
            self.free_mask[n] |= mask
            self.free_cnt[n] = new
            bit = 1 << n
            b = self.bucket[c]
            b[old] ^= bit
            b[new] |= bit
            self.class_free[c] += k
            for level in range(depth):
                self.dom_free[level][c][layout.domain_of[level][n]] += k
        if alloc.queue >= 0:
            self.queues.add(alloc.queue, -alloc.gpus, -alloc.job.cpus, -alloc.job.memory_gb)
        self.epoch += 1
        return alloc

    # -- queries -----------------------------------------------------------------------------

    def free_of(self, classes: tuple[int, ...]) -> int:
        """Free GPUs over the given device classes."""
        return sum(self.class_free[c] for c in classes)

    def node_room(self, n: int, cpu_per_gpu: float, mem_per_gpu: float) -> int:
        """GPUs of node `n` usable by a job needing this CPU and memory per GPU."""
        k = self.free_cnt[n]
        if cpu_per_gpu > 0:
            k = min(k, int(self.free_cpu[n] / cpu_per_gpu + 1e-9))
        if mem_per_gpu > 0:
            k = min(k, int(self.free_mem[n] / mem_per_gpu + 1e-9))
        return k

    def largest_free(self, c: int, level: int) -> int:
        """Largest free block of class `c` in one domain of `level` (depth: one node)."""
        layout = self.layout
        if level >= layout.depth:
            for k in range(len(self.bucket[c]) - 1, 0, -1):
                if self.bucket[c][k]:
                    return k
            return 0
        if level < 0:
            return self.class_free[c]
        return max(self.dom_free[level][c], default=0)
