"""Hypothesis strategies for the property tests of the scheduling core, and the settings
they run under.

Random clusters (0-3 topology levels, 1-8 GPUs per node, one or two device classes, NVLink
islands, failed devices, drained nodes), random queue trees, random running jobs on valid
placements and random pending jobs (some of them elastic, with measured steps), assembled
into valid snapshots by `snapshots`.
"""

from __future__ import annotations

from dataclasses import replace

from checks import queue_paths
from hypothesis import settings
from hypothesis import strategies as st

from trainyard.core import (
    PROFILES,
    Elastic,
    Job,
    Node,
    NodeDevices,
    Queue,
    RunningJob,
    Snapshot,
    StepSample,
    Topology,
    validate,
)

NOW = 10_000.0
LEVEL_NAMES = ("zone", "spine", "leaf")
CLASSES = (("H100", 80.0), ("A100", 40.0), ("A100", 80.0), ("L40", 48.0))
PROFILE_NAMES = tuple(PROFILES.names())

SETTINGS = settings(deadline=None, report_multiple_bugs=False)


# -- strategies ---------------------------------------------------------------------------


def _rigid(job: Job) -> Job:
    return replace(job, min_gpus=None, max_gpus=None, elastic=None)


def maybe_elastic(draw: st.DrawFn, job: Job, nodes: int = 1) -> Job:
    """`job` as drawn, or (one time in three, for a GPU job) elastic: a range around its size,
    and a step measured at its size whose sync cost and gradient noise vary, so that some
    jobs would gain from more GPUs and some would not."""
    if not job.gpus or draw(st.integers(0, 2)):
        return job
    low = draw(st.integers(1, job.gpus))
    high = job.gpus + draw(st.sampled_from([0, 1, 2, 4, 8, 16]))
    if low == high:
        high += 1
    batch = 32 * job.gpus
    sync = draw(st.sampled_from([0.0, 0.01, 0.2, 1.0]))
    step = 0.01 + 0.1 * batch / job.gpus / 32 + (sync if job.gpus > 1 else 0.0)
    info = Elastic(
        batch=batch,
        max_batch=batch * draw(st.sampled_from([1, 4, 16])),
        max_local_batch=draw(st.sampled_from([0, 64, 256])),
        samples=(StepSample(job.gpus, nodes, batch, step),),
        grad_sqr=draw(st.sampled_from([0.0, 1.0])),
        grad_var=draw(st.sampled_from([0.0, 4.0])),
    )
    return replace(job, min_gpus=low, max_gpus=high, elastic=info)


@st.composite
def node_counts(draw: st.DrawFn, job: Job) -> int:
    """`Job.nodes` for `job`: mostly 0 (any shape); for a rigid GPU job sometimes 1 or a
    divisor of its GPUs (exactly that many nodes; not with a one-node topology)."""
    if job.is_elastic or not job.gpus or draw(st.integers(0, 3)):
        return 0
    spread = [n for n in range(2, job.gpus + 1) if job.gpus % n == 0]
    if job.topology in ("node", "island") or not spread:
        return 1
    return draw(st.sampled_from([1, *spread]))


@st.composite
def clusters(draw: st.DrawFn) -> tuple[Topology, tuple[Node, ...]]:
    """0-3 topology levels, 1-8 nodes of 1-8 GPUs, one or two device classes."""
    depth = draw(st.integers(0, 3))
    levels = LEVEL_NAMES[len(LEVEL_NAMES) - depth :]
    classes = draw(st.lists(st.sampled_from(CLASSES), min_size=1, max_size=2, unique=True))
    nodes = []
    for i in range(draw(st.integers(1, 8))):
        gpus = draw(st.integers(1, 8))
        gpu_type, memory = draw(st.sampled_from(classes))
        divisors = [d for d in range(1, gpus + 1) if gpus % d == 0]
        broken = draw(st.integers(0, 5)) == 0
        unavailable = draw(st.sets(st.integers(0, gpus - 1), max_size=2)) if broken else set()
        nodes.append(
            Node(
                name=f"n{i}",
                gpus=gpus,
                gpu_type=gpu_type,
                gpu_memory_gb=memory,
                cpus=draw(st.sampled_from([16.0, 64.0, 128.0])),
                memory_gb=draw(st.sampled_from([128.0, 512.0])),
                path=tuple(f"{lv}{draw(st.integers(0, 1))}" for lv in levels),
                island_size=draw(st.sampled_from([0, *divisors])),
                schedulable=draw(st.integers(0, 7)) > 0,
                unavailable=tuple(sorted(unavailable)),
                spare=draw(st.integers(0, 7)) == 0,  # a hot spare (core/spares.py)
            )
        )
    bandwidth = tuple((lv, 100.0 * (k + 1)) for k, lv in enumerate(levels))
    return Topology(levels=levels, bandwidth_gbps=bandwidth), tuple(nodes)


@st.composite
def queue_trees(draw: st.DrawFn, total_gpus: int) -> tuple[Queue, ...]:
    """No queues (the implicit `default`) or a random tree of 1-5 queues."""
    if draw(st.integers(0, 3)) == 0:
        return ()
    queues = []
    for i in range(draw(st.integers(1, 5))):
        parent = None
        if i and draw(st.booleans()):
            parent = f"q{draw(st.integers(0, i - 1))}"
        guaranteed = draw(st.sampled_from([0, 0, total_gpus // 4, total_gpus // 2, total_gpus]))
        limit = draw(st.one_of(st.none(), st.integers(guaranteed, guaranteed + total_gpus)))
        queues.append(
            Queue(
                name=f"q{i}",
                parent=parent,
                guaranteed=guaranteed,
                limit=limit,
                weight=draw(st.sampled_from([0.5, 1.0, 2.0])),
                usage=draw(st.sampled_from([0.0, 0.1, 0.5])),
            )
        )
    return tuple(queues)


@st.composite
def running_jobs(
    draw: st.DrawFn,
    nodes: tuple[Node, ...],
    queues: tuple[Queue, ...],
    drained: bool,
    busy: bool,
) -> tuple[RunningJob, ...]:
    """Jobs on free devices, within node CPU/memory and queue limits. With `drained`, jobs
    may also hold devices that are unavailable or on unschedulable nodes (a node drained, or
    a GPU marked failed, while a job runs on it), which the snapshot allows. `busy` tries
    more jobs, of low priority, so that pending jobs have to reclaim or preempt."""
    queue_list = queues or (Queue("default"),)
    paths = queue_paths(queue_list)
    limits = {q.name: q.limit for q in queue_list}
    used = dict.fromkeys(limits, 0)
    free: dict[str, list[int]] = {}
    for n in nodes:
        ok = range(n.gpus) if drained or n.schedulable else range(0)
        free[n.name] = [d for d in ok if drained or d not in n.unavailable]
    cpu_left = {n.name: n.cpus for n in nodes}
    mem_left = {n.name: n.memory_gb for n in nodes}
    out = []
    for i in range(draw(st.integers(0, 16 if busy else 8))):
        gpus = draw(st.sampled_from([0, 1, 1, 2, 2, 3, 4, 8, 12]))
        queue = draw(st.sampled_from([q.name for q in queue_list]))
        if any(limits[a] is not None and used[a] + gpus > limits[a] for a in paths[queue]):
            continue
        cpg = draw(st.sampled_from([0.0, 0.0, 1.0, 4.0]))
        mpg = draw(st.sampled_from([0.0, 0.0, 8.0, 32.0]))
        start = draw(st.integers(0, len(nodes) - 1))
        order = nodes[start:] + nodes[:start]
        parts: list[NodeDevices] = []
        if gpus == 0:
            node = order[0]
            if cpu_left[node.name] < cpg or mem_left[node.name] < mpg:
                continue
            parts.append(NodeDevices(node.name, ()))
            cpu_left[node.name] -= cpg
            mem_left[node.name] -= mpg
        else:
            cls = (order[0].gpu_type, order[0].gpu_memory_gb)
            left = gpus
            plan = []
            for n in order:
                if left == 0:
                    break
                if (n.gpu_type, n.gpu_memory_gb) != cls or not free[n.name]:
                    continue
                take = min(left, len(free[n.name]))
                take = min(take, int(cpu_left[n.name] // cpg) if cpg else take)
                take = min(take, int(mem_left[n.name] // mpg) if mpg else take)
                if take:
                    plan.append((n.name, take))
                    left -= take
            if left:
                continue
            high = draw(st.booleans())
            for name, take in plan:
                devs = free[name][-take:] if high else free[name][:take]
                free[name] = [d for d in free[name] if d not in devs]
                cpu_left[name] -= cpg * take
                mem_left[name] -= mpg * take
                parts.append(NodeDevices(name, tuple(devs)))
        for a in paths[queue]:
            used[a] += gpus
        job = Job(
            id=f"r{i}",
            queue=queue,
            gpus=gpus,
            priority=draw(st.integers(0, 1 if busy else 3)),
            submit_time=draw(st.integers(0, 100)),
            cpus=cpg * max(gpus, 1),
            memory_gb=mpg * max(gpus, 1),
            preemptible=draw(st.integers(0, 4)) > 0,
            min_runtime=draw(st.sampled_from([0.0, 0.0, 600.0, 7200.0])),
            expected_duration=draw(st.sampled_from([None, 600.0, 3600.0, 36_000.0])),
            attained_service=draw(st.sampled_from([0.0, 1e4, 1e6])),
        )
        started = draw(st.sampled_from([0.0, NOW - 3600.0, NOW - 300.0, NOW]))
        job = maybe_elastic(draw, job, len([p for p in parts if p.devices]) or 1)
        out.append(RunningJob(job, tuple(parts), started))
    return tuple(out)


@st.composite
def pending_jobs(
    draw: st.DrawFn,
    levels: tuple[str, ...],
    types: list[str],
    queue_names: list[str],
    busy: bool,
    prefix: str = "p",
) -> tuple[Job, ...]:
    out: list[Job] = []
    for i in range(draw(st.integers(0, 10))):
        gpus = draw(st.sampled_from([0, 1, 1, 1, 2, 2, 3, 4, 4, 6, 8, 8, 12, 16, 24, 32]))
        gpu_types = draw(
            st.sampled_from([(), (), tuple(types), (types[0],), (types[-1],), ("V100",)])
        )
        scale = max(gpus, 1)
        out.append(
            Job(
                id=f"{prefix}{i}",
                queue=draw(st.sampled_from(queue_names)),
                gpus=gpus,
                priority=draw(st.integers(1 if busy else 0, 3)),
                submit_time=float(draw(st.integers(0, 1000))),
                gpu_types=gpu_types,
                gpu_memory_gb=draw(st.sampled_from([0.0, 0.0, 40.0, 80.0])),
                cpus=draw(st.sampled_from([0.0, 0.0, 1.0, 4.0, 40.0])) * scale,
                memory_gb=draw(st.sampled_from([0.0, 0.0, 8.0, 100.0])) * scale,
                preemptible=draw(st.integers(0, 4)) > 0,
                min_runtime=draw(st.sampled_from([0.0, 0.0, 600.0, 7200.0])),
                expected_duration=draw(st.sampled_from([None, 60.0, 600.0, 3600.0, 1e5])),
                attained_service=draw(st.sampled_from([0.0, 1e4, 1e6])),
                topology=draw(
                    st.sampled_from([None, None, None, "island", "node", *levels, "cluster"])
                ),
                recovering=draw(st.integers(0, 5)) == 0,  # requeued after a failure
            )
        )
        out[-1] = maybe_elastic(draw, out[-1])
        out[-1] = replace(out[-1], nodes=draw(node_counts(out[-1])))
    return tuple(out)


@st.composite
def snapshots(draw: st.DrawFn, drained: bool | None = None, elastic: bool = True) -> Snapshot:
    """A valid snapshot; `elastic=False`: every job rigid."""
    topology, nodes = draw(clusters())
    total = sum(n.gpus for n in nodes)
    queues = draw(queue_trees(total))
    if drained is None:
        drained = draw(st.integers(0, 3)) == 0
    busy = draw(st.booleans())
    running = draw(running_jobs(nodes, queues, drained, busy))
    types = sorted({n.gpu_type for n in nodes})
    names = [q.name for q in queues] or ["default"]
    pending = draw(pending_jobs(topology.levels, types, names, busy))
    if not elastic:
        running = tuple(replace(r, job=_rigid(r.job)) for r in running)
        pending = tuple(_rigid(j) for j in pending)
    snap = Snapshot(NOW, nodes, topology, queues, running, pending)
    validate(snap)  # the generators only build valid snapshots
    return snap


@st.composite
def contested_snapshots(draw: st.DrawFn) -> Snapshot:
    """Full clusters of low-priority gangs and smaller pending jobs that outrank them (by
    priority, by a guaranteed quota the running queue has lent, or by less attained
    service), so that most cycles evict, and one eviction often frees more GPUs (or CPU and
    memory) than its preemptor needs: the case where placements must wait for victims."""
    nodes = tuple(
        Node(
            name=f"n{i}",
            gpus=draw(st.sampled_from([2, 4, 8])),
            cpus=draw(st.sampled_from([16.0, 64.0])),
            memory_gb=draw(st.sampled_from([128.0, 256.0])),
            path=(f"leaf{i % 2}",),
        )
        for i in range(draw(st.integers(1, 4)))
    )
    total = sum(n.gpus for n in nodes)
    queues = (Queue("owner", guaranteed=total // 2), Queue("lender", guaranteed=0))
    running = []
    for n in nodes:
        free = list(range(n.gpus))
        cpu_left, mem_left = n.cpus, n.memory_gb
        while free:
            take = draw(st.integers(1, len(free)))
            cpg = draw(st.sampled_from([0.0, 2.0]))
            mpg = draw(st.sampled_from([0.0, 16.0]))
            if cpg * take > cpu_left or mpg * take > mem_left:
                cpg = mpg = 0.0
            cpu_left -= cpg * take
            mem_left -= mpg * take
            devices, free = tuple(free[:take]), free[take:]
            job = Job(
                id=f"r{len(running)}",
                queue=draw(st.sampled_from(["owner", "lender", "lender"])),
                gpus=take,
                priority=draw(st.integers(0, 1)),
                cpus=cpg * take,
                memory_gb=mpg * take,
                attained_service=draw(st.sampled_from([0.0, 1e6, 1e8])),
                expected_duration=draw(st.sampled_from([None, 3600.0])),
            )
            running.append(RunningJob(job, (NodeDevices(n.name, devices),), NOW - 3600.0))
    pending = tuple(
        Job(
            id=f"p{i}",
            queue=draw(st.sampled_from(["owner", "lender"])),
            gpus=draw(st.sampled_from([0, 1, 1, 2, 3, 4])),
            priority=draw(st.integers(0, 3)),
            submit_time=float(draw(st.integers(0, 1000))),
            cpus=draw(st.sampled_from([0.0, 0.0, 8.0, 40.0])),
            memory_gb=draw(st.sampled_from([0.0, 0.0, 64.0])),
        )
        for i in range(draw(st.integers(1, 6)))
    )
    snap = Snapshot(NOW, nodes, Topology(levels=("leaf",)), queues, tuple(running), pending)
    validate(snap)
    return snap


@st.composite
def owed_snapshots(draw: st.DrawFn) -> Snapshot:
    """Flat queues with guarantees, a full or nearly full cluster of one device class, and
    pending jobs that fit a node: whether an owner below its guarantee gets its GPUs back
    from the queues that borrowed them. No topology limits, CPU or memory demands, GPU types
    or run-time estimates (so no reservation), which could keep a job out on their own."""
    count = draw(st.integers(1, 3))
    nodes = tuple(Node(name=f"n{i}", gpus=draw(st.sampled_from([4, 8]))) for i in range(count))
    total = sum(n.gpus for n in nodes)
    names = [f"q{i}" for i in range(draw(st.integers(2, 3)))]
    shares = [draw(st.integers(0, total // len(names))) for _ in names]
    queues = tuple(Queue(name, guaranteed=g) for name, g in zip(names, shares, strict=True))
    running = []
    # many small jobs: a lender's borrowed GPUs come in several jobs, so a reclaim must pick
    # them across lenders within each one's budget
    small = draw(st.booleans())
    for n in nodes:
        free = list(range(n.gpus))
        while free and draw(st.integers(0, 5)) > 0:
            take = draw(st.integers(1, min(2, len(free)) if small else len(free)))
            devices, free = tuple(free[:take]), free[take:]
            job = Job(
                id=f"r{len(running)}",
                queue=draw(st.sampled_from(names)),
                gpus=take,
                priority=draw(st.integers(0, 1)),
                preemptible=draw(st.integers(0, 5)) > 0,
                min_runtime=draw(st.sampled_from([0.0, 0.0, 7200.0])),
            )
            running.append(RunningJob(job, (NodeDevices(n.name, devices),), NOW - 3600.0))
    biggest = max(n.gpus for n in nodes)
    pending = tuple(
        Job(
            id=f"p{i}",
            queue=draw(st.sampled_from(names)),
            gpus=draw(st.integers(1, biggest)),
            priority=draw(st.integers(0, 1)),
            submit_time=float(draw(st.integers(0, 1000))),
        )
        for i in range(draw(st.integers(1, 5)))
    )
    snap = Snapshot(NOW, nodes, Topology(), queues, tuple(running), pending)
    validate(snap)
    return snap
