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

from dataclasses import dataclass, field

from trainyard.core.queues import QueueIndex
from trainyard.core.snapshot import Snapshot
from trainyard.core.topology import Layout
from trainyard.core.types import Job

PHANTOM_QUEUE = -1
"""Queue index of reservation holds: they take devices but count against no quota."""


@dataclass(slots=True)
class Alloc:
    """Devices held by one job: `parts` is a list of (node index, device mask, cpus, mem)."""

    job: Job
    queue: int
    cls: int
    parts: list[tuple[int, int, float, float]]
    started_at: float
    placed_now: bool = False
    expected_end: float | None = None
    gpus: int = field(init=False)

    def __post_init__(self) -> None:
        self.gpus = sum(mask.bit_count() for _n, mask, _c, _m in self.parts)


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
        self.class_free: list[int] = list(layout.class_capacity)
        self.dom_free: list[list[list[int]]] = [
            [list(row) for row in per_class] for per_class in layout.domain_capacity
        ]
        for i, c in enumerate(layout.class_of_node):
            if c >= 0:
                self.bucket[c][self.free_cnt[i]] |= 1 << i
        self.allocs: dict[str, Alloc] = {}
        # Bumped whenever capacity grows (evictions, rollbacks): failure caches key on it.
        self.epoch = 0
        for r in snapshot.running:
            q = queues.index[r.job.queue]
            parts = []
            cls = -1
            for nd in r.placement:
                n = layout.node_index[nd.node]
                mask = 0
                for d in nd.devices:
                    mask |= 1 << d
                share = mask.bit_count() / r.job.gpus if r.job.gpus else 1.0
                parts.append((n, mask, r.job.cpus * share, r.job.memory_gb * share))
                cls = layout.class_of_node[n] if mask else cls
            end = (
                r.started_at + r.job.expected_duration
                if r.job.expected_duration is not None
                else None
            )
            self.take(Alloc(r.job, q, cls, parts, r.started_at, False, end))

    # -- the only two mutators -------------------------------------------------------------

    def take(self, alloc: Alloc) -> None:
        """Mark `alloc`'s devices used and record it (devices must be free)."""
        layout = self.layout
        depth = layout.depth
        for n, mask, cpus, mem in alloc.parts:
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
        for n, mask, cpus, mem in alloc.parts:
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
