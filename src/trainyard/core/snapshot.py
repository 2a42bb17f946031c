"""The immutable input of a cycle, and its validation.

A `Snapshot` is everything the core may look at: nodes, topology, queues, running jobs, pending
jobs and `now` (the clock is injected; the core never reads one). `validate` checks the
snapshot once and raises `SnapshotError` naming the offending field and the fix, so that a bad
scenario file or a drifted database never turns into a traceback deep inside a cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainyard.core.errors import SnapshotError
from trainyard.core.types import Job, Node, NodeDevices, Queue, RunningJob, Topology

__all__ = ["Snapshot", "SnapshotError", "validate"]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The world as the core sees it at time `now` (seconds, any epoch)."""

    now: float
    nodes: tuple[Node, ...]
    topology: Topology = field(default_factory=Topology)
    queues: tuple[Queue, ...] = ()
    running: tuple[RunningJob, ...] = ()
    pending: tuple[Job, ...] = ()

    def effective_queues(self) -> tuple[Queue, ...]:
        """The queues, or one `default` queue guaranteed the whole cluster when none is given."""
        if self.queues:
            return self.queues
        total = sum(n.gpus for n in self.nodes)
        return (Queue(name="default", guaranteed=total),)


def _job_problem(job: Job, queues: set[str]) -> tuple[str, str] | None:
    """(field, fix) for the first problem of `job`, or None. Hot path: no allocation if ok."""
    if not job.id:
        return "id", "must be a non-empty string"
    if job.gpus < 0:
        return "gpus", f"must be >= 0, got {job.gpus}"
    if job.queue not in queues:
        return "queue", f"unknown queue {job.queue!r}; known: {', '.join(sorted(queues))}"
    if job.cpus < 0 or job.memory_gb < 0 or job.gpu_memory_gb < 0:
        return "cpus", "cpus, memory_gb and gpu_memory_gb must be >= 0"
    if job.min_runtime < 0 or job.attained_service < 0:
        return "min_runtime", "min_runtime and attained_service must be >= 0"
    if job.expected_duration is not None and job.expected_duration < 0:
        return "expected_duration", "must be >= 0 or omitted"
    if job.min_gpus is not None and job.min_gpus > job.gpus:
        return "min_gpus", "must not exceed gpus"
    if job.max_gpus is not None and job.max_gpus < job.gpus:
        return "max_gpus", "must be >= gpus"
    return _nodes_problem(job)


def _nodes_problem(job: Job) -> tuple[str, str] | None:
    """What is wrong with `job.nodes` (see `Job`), or None."""
    n = job.nodes
    if n == 0:
        return None
    if n < 0:
        return "nodes", f"must be >= 0 (0: any shape), got {n}"
    if job.gpus == 0 and n > 1:
        return "nodes", "a CPU-only job runs on one node: use nodes 0 or 1"
    if job.gpus % n:
        return "nodes", f"gpus ({job.gpus}) must split evenly over {n} nodes"
    if job.is_elastic:
        return "nodes", "an elastic job's shape follows its size: use nodes 0"
    if n > 1 and job.topology in ("island", "node"):
        return "nodes", f"topology {job.topology!r} keeps the job on one node: use nodes 1"
    return None


def level_names(topology: Topology) -> tuple[str, ...]:
    """Every level a job's `topology` may name: island, node, the topology's, cluster."""
    return ("island", "node", *topology.levels, "cluster")


def pending_problem(job: Job, queues: set[str], levels: tuple[str, ...]) -> tuple[str, str] | None:
    """(field, fix) for the first reason `validate` would refuse pending `job`, or None;
    `levels` are `level_names(topology)`."""
    problem = _job_problem(job, queues)
    if problem is None and job.topology is not None and job.topology not in levels:
        return "topology", f"unknown level {job.topology!r}; use one of {list(levels)}"
    return problem


def _check_job(job: Job, where: str, queues: set[str]) -> None:
    problem = _job_problem(job, queues)
    if problem is not None:
        raise SnapshotError(f"{where}.{problem[0]}", problem[1])


def _check_queues(queues: tuple[Queue, ...]) -> set[str]:
    names: set[str] = set()
    for i, q in enumerate(queues):
        if not q.name:
            raise SnapshotError(f"queues[{i}].name", "must be a non-empty string")
        if q.name in names:
            raise SnapshotError(f"queues[{i}].name", f"duplicate queue {q.name!r}")
        names.add(q.name)
        if q.guaranteed < 0:
            raise SnapshotError(f"queues[{i}].guaranteed", "must be >= 0")
        if q.limit is not None and q.limit < q.guaranteed:
            raise SnapshotError(f"queues[{i}].limit", "must be >= guaranteed (or omitted)")
        if q.weight <= 0:
            raise SnapshotError(f"queues[{i}].weight", "must be > 0")
        if not q.usage >= 0:
            raise SnapshotError(f"queues[{i}].usage", "must be >= 0")
    by_name = {q.name: q for q in queues}
    for i, q in enumerate(queues):
        seen = {q.name}
        parent = q.parent
        while parent is not None:
            if parent not in by_name:
                raise SnapshotError(f"queues[{i}].parent", f"unknown queue {parent!r}")
            if parent in seen:
                raise SnapshotError(f"queues[{i}].parent", "queues form a cycle")
            seen.add(parent)
            parent = by_name[parent].parent
    return names


def _check_nodes(snapshot: Snapshot) -> dict[str, Node]:
    nodes: dict[str, Node] = {}
    depth = len(snapshot.topology.levels)
    for i, n in enumerate(snapshot.nodes):
        if not n.name:
            raise SnapshotError(f"nodes[{i}].name", "must be a non-empty string")
        if n.name in nodes:
            raise SnapshotError(f"nodes[{i}].name", f"duplicate node {n.name!r}")
        if n.gpus < 0 or n.gpus > 64:
            raise SnapshotError(f"nodes[{i}].gpus", f"must be in 0..64, got {n.gpus}")
        if len(n.path) != depth:
            levels = list(snapshot.topology.levels)
            raise SnapshotError(
                f"nodes[{i}].path",
                f"needs one entry per topology level {levels}, got {list(n.path)}",
            )
        if n.island_size < 0 or (n.island_size and n.gpus % n.island_size):
            raise SnapshotError(f"nodes[{i}].island_size", "must divide gpus (0: one island)")
        if n.cpus < 0 or n.memory_gb < 0:
            raise SnapshotError(f"nodes[{i}].cpus", "cpus and memory_gb must be >= 0")
        for d in n.unavailable:
            if not 0 <= d < n.gpus:
                raise SnapshotError(f"nodes[{i}].unavailable", f"device {d} out of range")
        nodes[n.name] = n
    return nodes


def placement_error(
    snapshot: Snapshot, i: int, r: RunningJob, nodes: dict[str, Node] | None = None
) -> SnapshotError | None:
    """The first problem of running job `i`'s placement (unknown node, device out of range,
    device listed twice, device count), or None. Double booking across jobs is checked by
    the caller, which knows what other jobs hold."""
    by_name = nodes if nodes is not None else {n.name: n for n in snapshot.nodes}
    count = 0
    for j, nd in enumerate(r.placement):
        node = by_name.get(nd.node)
        if node is None:
            return SnapshotError(f"running[{i}].placement[{j}].node", f"unknown node {nd.node!r}")
        for d in nd.devices:
            if not 0 <= d < node.gpus:
                return SnapshotError(
                    f"running[{i}].placement[{j}].devices", f"device {d} not on {nd.node!r}"
                )
        if len(set(nd.devices)) != len(nd.devices):
            return SnapshotError(f"running[{i}].placement[{j}].devices", "a device is listed twice")
        count += len(nd.devices)
    if count != r.job.gpus:
        return SnapshotError(
            f"running[{i}].placement", f"holds {count} devices but the job asks for {r.job.gpus}"
        )
    if r.job.gpus == 0 and len(r.placement) != 1:
        return SnapshotError(f"running[{i}].placement", "a CPU-only job runs on exactly one node")
    return None


def double_booking(snapshot: Snapshot, i: int, nd: NodeDevices, mask: int) -> SnapshotError:
    """The error for running job `i` claiming devices (bits of `mask`) that are already held."""
    j = snapshot.running[i].placement.index(nd)
    device = (mask & -mask).bit_length() - 1
    return SnapshotError(
        f"running[{i}].placement[{j}].devices",
        f"device {nd.node}:{device} is already held by another running job",
    )


def validate(snapshot: Snapshot, placements: bool = True) -> None:
    """Raise `SnapshotError` if the snapshot cannot be scheduled as given.

    `placements=False` skips the per-device checks of running jobs: `run_cycle` leaves them
    to `ClusterState`, which reads every placement anyway and raises the same errors."""
    nodes = _check_nodes(snapshot)
    queues = _check_queues(snapshot.effective_queues())
    seen_jobs: set[str] = set()
    used: dict[str, int] = {}
    for i, r in enumerate(snapshot.running):
        job = r.job
        if _job_problem(job, queues) is not None:
            _check_job(job, f"running[{i}].job", queues)
        if job.id in seen_jobs:
            raise SnapshotError(f"running[{i}].job.id", f"duplicate job {job.id!r}")
        seen_jobs.add(job.id)
        if not placements:
            continue
        error = placement_error(snapshot, i, r, nodes)
        if error is not None:
            raise error
        for nd in r.placement:
            mask = 0
            for d in nd.devices:
                mask |= 1 << d
            held = used.get(nd.node, 0)
            if held & mask:
                raise double_booking(snapshot, i, nd, held & mask)
            used[nd.node] = held | mask
    levels = level_names(snapshot.topology)
    for i, job in enumerate(snapshot.pending):
        if _job_problem(job, queues) is not None:
            _check_job(job, f"pending[{i}]", queues)
        if job.topology is not None and job.topology not in levels:
            raise SnapshotError(
                f"pending[{i}].topology",
                f"unknown level {job.topology!r}; use one of {list(levels)}",
            )
        if job.id in seen_jobs:
            raise SnapshotError(f"pending[{i}].id", f"duplicate job {job.id!r}")
        seen_jobs.add(job.id)
