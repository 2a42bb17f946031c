"""Property tests of the scheduling core (hypothesis).

Random clusters (0-3 topology levels, 1-8 GPUs per node, one or two device classes, NVLink
islands, failed devices, drained nodes), random queue trees, random running jobs on valid
placements and random pending jobs are fed to every built-in profile. After every cycle the
decision must keep the invariants the core promises (see `check_decision`). On top of that:
determinism; work conservation (no waiting job fits into what is left, except under strict
FIFO); reservations honoured; stability of the applied decision (only victims move, and
repeated cycles reach a fixed point with no job evicted twice); no preemption ping-pong over
100 cycles.

The tests at the end pin the smallest inputs that broke these properties: regressions that
pass now, then open core bugs, each test stating the correct behaviour.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import replace

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from trainyard.core import (
    PROFILES,
    Decision,
    Job,
    Node,
    NodeDevices,
    Queue,
    RunningJob,
    Snapshot,
    Topology,
    apply_decision,
    get_profile,
    run_cycle,
    validate,
)

NOW = 10_000.0
LEVEL_NAMES = ("zone", "spine", "leaf")
CLASSES = (("H100", 80.0), ("A100", 40.0), ("A100", 80.0), ("L40", 48.0))
PROFILE_NAMES = tuple(PROFILES.names())
EPS = 1e-6

SETTINGS = settings(deadline=None, report_multiple_bugs=False)

Device = tuple[str, int]


# -- strategies ---------------------------------------------------------------------------


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


def queue_paths(queues: Iterable[Queue]) -> dict[str, list[str]]:
    """Queue name -> the queue and its ancestors."""
    by_name = {q.name: q for q in queues}
    out = {}
    for name in by_name:
        chain = [name]
        while by_name[chain[-1]].parent is not None:
            chain.append(by_name[chain[-1]].parent)  # type: ignore[arg-type]
        out[name] = chain
    return out


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
    out = []
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
            )
        )
    return tuple(out)


@st.composite
def snapshots(draw: st.DrawFn, drained: bool | None = None) -> Snapshot:
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
    snap = Snapshot(NOW, nodes, topology, queues, running, pending)
    validate(snap)  # the generators only build valid snapshots
    return snap


# -- invariants ---------------------------------------------------------------------------


def held_devices(snapshot: Snapshot) -> dict[Device, str]:
    return {
        (nd.node, d): r.job.id for r in snapshot.running for nd in r.placement for d in nd.devices
    }


def queue_usage(snapshot: Snapshot) -> dict[str, int]:
    """GPUs held per queue, descendants included."""
    paths = queue_paths(snapshot.effective_queues())
    usage = dict.fromkeys(paths, 0)
    for r in snapshot.running:
        for a in paths[r.job.queue]:
            usage[a] += r.job.gpus
    return usage


def limits_hold(snapshot: Snapshot) -> bool:
    usage = queue_usage(snapshot)
    return all(q.limit is None or usage[q.name] <= q.limit for q in snapshot.effective_queues())


def node_load(snapshot: Snapshot) -> dict[str, tuple[float, float]]:
    """CPU and memory held per node (a gang's demand is split in proportion to its GPUs)."""
    load = {n.name: (0.0, 0.0) for n in snapshot.nodes}
    for r in snapshot.running:
        for nd in r.placement:
            share = len(nd.devices) / r.job.gpus if r.job.gpus else 1.0
            cpu, mem = load[nd.node]
            load[nd.node] = (cpu + r.job.cpus * share, mem + r.job.memory_gb * share)
    return load


def resources_hold(snapshot: Snapshot) -> bool:
    load = node_load(snapshot)
    return all(
        load[n.name][0] <= n.cpus + EPS and load[n.name][1] <= n.memory_gb + EPS
        for n in snapshot.nodes
    )


def check_decision(snapshot: Snapshot, decision: Decision, profile: str) -> None:
    """Every invariant one decision must keep (assertion messages say which)."""
    nodes = {n.name: n for n in snapshot.nodes}
    running = {r.job.id: r for r in snapshot.running}
    pending = {j.id: j for j in snapshot.pending}
    levels = snapshot.topology.levels
    assert decision.now == snapshot.now
    assert decision.profile == profile

    placed = [p.job_id for p in decision.placements]
    evicted = [e.job_id for e in decision.evictions]
    assert len(set(placed)) == len(placed), f"job placed twice: {placed}"
    assert len(set(evicted)) == len(evicted), f"job evicted twice: {evicted}"
    assert set(placed) <= set(pending), "placed a job that is not pending"
    assert set(evicted) <= set(running), "evicted a job that is not running"
    assert not set(placed) & set(evicted), "a job both evicted and placed"
    by_job = {p.job_id: p for p in decision.placements}

    # evictions
    for e in decision.evictions:
        r = running[e.job_id]
        assert r.job.preemptible, f"non-preemptible job {e.job_id} evicted"
        assert snapshot.now - r.started_at >= r.job.min_runtime, (
            f"{e.job_id} evicted inside its min_runtime"
        )
        assert e.gpus == r.job.gpus and e.queue == r.job.queue
        assert e.for_job in by_job, f"{e.job_id} evicted for {e.for_job}, which is not placed"
        assert e.job_id in by_job[e.for_job].after_evictions
        assert e.reason
        preemptor = pending[e.for_job]
        paths = queue_paths(snapshot.effective_queues())
        if e.action == "preempt":
            assert r.job.queue == preemptor.queue, "preempt crossed queues"
            assert r.job.priority < preemptor.priority, "preempted an equal/higher priority"
        elif e.action == "reclaim":
            assert r.job.queue not in paths[preemptor.queue]
            assert preemptor.queue not in paths[r.job.queue]
        else:
            raise AssertionError(f"eviction by action {e.action!r}")

    # placements: gang, usable devices, device class, topology, no double booking
    taken = {dev: jid for dev, jid in held_devices(snapshot).items() if jid not in evicted}
    for p in decision.placements:
        job = pending[p.job_id]
        assert p.queue == job.queue
        assert set(p.after_evictions) <= set(evicted)
        assert p.gpus == job.gpus, f"{p.job_id}: {p.gpus} devices for a {job.gpus}-GPU gang"
        assert p.nodes, f"{p.job_id}: placement without nodes"
        if job.gpus == 0:
            assert len(p.nodes) == 1 and not p.nodes[0].devices
        names = [nd.node for nd in p.nodes]
        assert len(set(names)) == len(names), f"{p.job_id}: node listed twice"
        for nd in p.nodes:
            node = nodes.get(nd.node)
            assert node is not None, f"{p.job_id}: unknown node {nd.node}"
            assert node.schedulable, f"{p.job_id} placed on unschedulable node {nd.node}"
            assert len(set(nd.devices)) == len(nd.devices)
            for d in nd.devices:
                assert 0 <= d < node.gpus, f"{p.job_id}: device {nd.node}:{d} does not exist"
                assert d not in node.unavailable, (
                    f"{p.job_id} placed on unavailable device {nd.node}:{d}"
                )
                owner = taken.get((nd.node, d))
                assert owner is None, f"device {nd.node}:{d} given to {p.job_id} and {owner}"
                taken[(nd.node, d)] = p.job_id
        if job.gpus:
            gpu_nodes = [nodes[nd.node] for nd in p.nodes if nd.devices]
            kinds = {(n.gpu_type, n.gpu_memory_gb) for n in gpu_nodes}
            assert len(kinds) == 1, f"{p.job_id} mixes device classes {kinds}"
            ((gpu_type, memory),) = kinds
            assert p.gpu_type == gpu_type
            assert not job.gpu_types or gpu_type in job.gpu_types, f"{p.job_id}: wrong type"
            assert memory >= job.gpu_memory_gb, f"{p.job_id}: not enough device memory"
            if job.topology in ("node", "island"):
                assert len(gpu_nodes) == 1, f"{p.job_id} must stay inside one node"
            if job.topology == "island":
                node = gpu_nodes[0]
                size = node.island_size or node.gpus
                islands = {d // size for d in p.nodes[0].devices}
                assert len(islands) == 1, f"{p.job_id} must stay inside one NVLink island"
            if job.topology in levels:
                depth = levels.index(job.topology) + 1
                domains = {n.path[:depth] for n in gpu_nodes}
                assert len(domains) == 1, f"{p.job_id} spans {job.topology}s {domains}"

    after = apply_decision(snapshot, decision)
    # per-node CPU / memory and queue limits (when the snapshot respected them)
    if resources_hold(snapshot):
        load = node_load(after)
        for n in snapshot.nodes:
            cpu, mem = load[n.name]
            assert cpu <= n.cpus + EPS, f"node {n.name}: {cpu} CPUs of {n.cpus} in use"
            assert mem <= n.memory_gb + EPS, f"node {n.name}: {mem} GB of {n.memory_gb} in use"
    if limits_hold(snapshot):
        usage = queue_usage(after)
        for q in snapshot.effective_queues():
            assert q.limit is None or usage[q.name] <= q.limit, (
                f"queue {q.name} holds {usage[q.name]} GPUs over its limit {q.limit}"
            )

    # every job still pending has a reason; reservations only for pending jobs
    still_pending = (set(pending) - set(placed)) | set(evicted)
    assert set(decision.pending) == still_pending, "pending reasons do not match pending jobs"
    for jid, reason in decision.pending.items():
        assert reason.message.strip(), f"{jid}: empty pending message"
    reserved = [r.job_id for r in decision.reservations]
    assert len(set(reserved)) == len(reserved)
    assert set(reserved) <= set(pending) - set(placed), "reservation for a job not pending"
    for res in decision.reservations:
        for nd in res.nodes:
            node = nodes[nd.node]
            assert all(0 <= d < node.gpus and d not in node.unavailable for d in nd.devices)


def node_room(snapshot: Snapshot, job: Job, blocked: set[Device]) -> dict[str, int]:
    """GPUs of `job` each schedulable node of an acceptable class could take now (CPU/memory
    included, rounded down with a margin so that float noise never makes a false alarm)."""
    taken = set(held_devices(snapshot)) | blocked
    load = node_load(snapshot)
    g = max(job.gpus, 1)
    cpg, mpg = job.cpus / g, job.memory_gb / g
    out = {}
    for node in snapshot.nodes:
        if not node.schedulable:
            continue
        if job.gpus and job.gpu_types and node.gpu_type not in job.gpu_types:
            continue
        if job.gpus and node.gpu_memory_gb < job.gpu_memory_gb:
            continue
        cpu, mem = load[node.name]
        free = [
            d for d in range(node.gpus) if d not in node.unavailable and (node.name, d) not in taken
        ]
        if job.topology == "island":
            size = node.island_size or node.gpus
            room = max(Counter(d // size for d in free).values(), default=0)
        else:
            room = len(free)
        if job.gpus == 0:
            room = 1
        if cpg:
            room = min(room, int((node.cpus - cpu - EPS) // cpg))
        if mpg:
            room = min(room, int((node.memory_gb - mem - EPS) // mpg))
        out[node.name] = max(room, 0)
    return out


def fits_now(snapshot: Snapshot, job: Job, blocked: set[Device], split: bool) -> str | None:
    """Where `job` could start on `snapshot` outside `blocked` devices (brute force), if
    anywhere: one node, or several nodes of one device class inside the domain its
    `topology` allows."""
    room = node_room(snapshot, job, blocked)
    need = max(job.gpus, 1)
    for name, r in room.items():
        if r >= need:
            return name
    if job.gpus == 0 or job.topology in ("node", "island"):
        return None
    nodes = [n for n in snapshot.nodes if n.name in room]
    if not split and any(n.gpus - len(n.unavailable) >= job.gpus for n in nodes):
        return None
    levels = snapshot.topology.levels
    depth = levels.index(job.topology) + 1 if job.topology in levels else 0
    groups: dict[tuple[object, ...], int] = {}
    for n in nodes:
        key = (n.gpu_type, n.gpu_memory_gb, n.path[:depth])
        groups[key] = groups.get(key, 0) + room[n.name]
    for key, total in groups.items():
        if total >= job.gpus:
            return f"nodes of {key}"
    return None


def quota_allows(snapshot: Snapshot, job: Job) -> bool:
    queues = {q.name: q for q in snapshot.effective_queues()}
    usage = queue_usage(snapshot)
    for a in queue_paths(queues.values())[job.queue]:
        q = queues[a]
        if q.limit is not None and usage[a] + job.gpus > q.limit:
            return False
        if not job.preemptible and usage[a] + job.gpus > q.guaranteed:
            return False
    return True


def check_work_conserving(snapshot: Snapshot, decision: Decision, profile: str) -> None:
    """No job left waiting for room fits into what the cycle left free.

    Strict order (fifo) may idle devices on purpose and is exempt; the devices of reported
    reservations count as taken; jobs evicted by this decision are exempt (they may well fit
    elsewhere, see `test_a_cycle_on_its_applied_decision_only_moves_victims`).
    """
    prof = get_profile(profile)
    if prof.strict_order:
        return
    after = apply_decision(snapshot, decision)
    blocked = {(nd.node, d) for r in decision.reservations for nd in r.nodes for d in nd.devices}
    evicted = {e.job_id for e in decision.evictions}
    for job in after.pending:
        reason = decision.pending[job.id]
        if job.id in evicted or reason.code not in ("capacity", "fragmented", "resources"):
            continue
        if not quota_allows(after, job):
            continue
        where = fits_now(after, job, blocked, prof.split_small_jobs)
        assert where is None, (
            f"{profile}: {job.id} ({reason.code}: {reason.message}) fits on {where} "
            "but was left pending"
        )


def check_reservations_honoured(snapshot: Snapshot, decision: Decision) -> None:
    """A reservation is a promise: when the running jobs expected to end by its start have
    ended, its job fits on the reserved devices, with the CPU, memory and quota it needs,
    whatever this decision started meanwhile."""
    after = apply_decision(snapshot, decision)
    pending = {j.id: j for j in snapshot.pending}
    nodes = {n.name: n for n in snapshot.nodes}
    for res in decision.reservations:
        job = pending[res.job_id]

        def ends_after_start(r: RunningJob, start: float = res.start_time) -> bool:
            d = r.job.expected_duration
            return d is None or r.started_at + d > start

        later = replace(after, running=tuple(r for r in after.running if ends_after_start(r)))
        held = held_devices(later)
        assert sum(len(nd.devices) for nd in res.nodes) == job.gpus
        load = node_load(later)
        g = max(job.gpus, 1)
        for nd in res.nodes:
            busy = [d for d in nd.devices if (nd.node, d) in held]
            assert not busy, f"{res.job_id}: reserved {nd.node}:{busy} stay busy past its start"
            share = len(nd.devices) / g if job.gpus else 1.0
            cpu, mem = load[nd.node]
            node = nodes[nd.node]
            assert cpu + job.cpus * share <= node.cpus + EPS, (
                f"{res.job_id}: CPUs of reserved node {nd.node} given away ({cpu} in use)"
            )
            assert mem + job.memory_gb * share <= node.memory_gb + EPS, (
                f"{res.job_id}: memory of reserved node {nd.node} given away ({mem} GB in use)"
            )
        assert quota_allows(later, job), f"{res.job_id}: its queue's quota was given away"


def cycles_until_quiet(snapshot: Snapshot, profile: str, limit: int) -> list[Decision]:
    """Decisions of consecutive cycles, each on the applied result of the previous one at the
    same `now`, up to the first empty one (at most `limit`)."""
    out = []
    for _ in range(limit):
        decision = run_cycle(snapshot, profile)
        check_decision(snapshot, decision, profile)
        out.append(decision)
        if decision.is_empty:
            break
        snapshot = apply_decision(snapshot, decision)
    return out


# -- known counterexamples (minimal inputs that broke a property; see the tests at the end) ---

LEAVES = Topology(levels=("leaf",))

# A gang that fits only across two leaves, because the leaf with enough free GPUs lacks the
# memory: n1 alone has 2 free GPUs but memory for 1; n0 + n1 fit (100 GB per GPU).
GANG_NEEDS_TWO_LEAVES = Snapshot(
    NOW,
    (
        Node("n0", 1, memory_gb=128.0, path=("leaf0",)),
        Node("n1", 2, memory_gb=128.0, path=("leaf1",)),
    ),
    LEAVES,
    pending=(Job("gang", gpus=2, memory_gb=200.0),),
)

# `big` needs a's last GPU (b has CPUs for only 3 of its GPUs) and may preempt `low` for it;
# `cpu` is a CPU-only job that allocate places on `a` first.
CPU_JOB_BLOCKS_PREEMPTION = Snapshot(
    NOW,
    (Node("a", 2, cpus=64.0), Node("b", 4, cpus=128.0)),
    running=(
        RunningJob(Job("keep", preemptible=False), (NodeDevices("a", (0,)),)),
        RunningJob(Job("low"), (NodeDevices("a", (1,)),)),
    ),
    pending=(Job("big", gpus=4, cpus=160.0, priority=1), Job("cpu", gpus=0)),
)

# q0 is at its limit, so `p2` waits for quota; `p0` then preempts `r1` (4 GPUs) in q1,
# which brings q0 down to 1 of 4: `p2` fits in the same cycle.
EVICTION_FREES_QUOTA = Snapshot(
    NOW,
    (Node("a", 4),),
    queues=(Queue("q0", limit=4), Queue("q1", parent="q0")),
    running=(RunningJob(Job("r1", queue="q1", gpus=4), (NodeDevices("a", (0, 1, 2, 3)),)),),
    pending=(Job("p0", queue="q1", priority=1), Job("p2", queue="q0", priority=2)),
)

# `head` is reserved all of node a (when `r` ends, at t=1000); the CPU-only job `cpu` takes
# 100 of a's 128 GB, which `head` needs at its start.
RESERVED_MEMORY = Snapshot(
    100.0,
    (Node("a", 4, memory_gb=128.0),),
    running=(RunningJob(Job("r", gpus=2, expected_duration=1000.0), (NodeDevices("a", (0, 1)),)),),
    pending=(
        Job("head", gpus=4, memory_gb=100.0),
        Job("small", submit_time=1.0, expected_duration=5000.0),
        Job("cpu", gpus=0, memory_gb=100.0, submit_time=2.0),
    ),
)

# `head` (non-preemptible, so it must fit in q's guaranteed 6) is reserved node a; `small`
# of the same queue is backfilled on b, after which q holds 3 and, until `r` ends, `head`
# no longer passes its quota check (3 + 4 > 6).
RESERVED_QUOTA = Snapshot(
    100.0,
    (Node("a", 4), Node("b", 1)),
    queues=(Queue("q", guaranteed=6),),
    running=(
        RunningJob(
            Job("r", queue="q", gpus=2, priority=5, expected_duration=1000.0),
            (NodeDevices("a", (0, 1)),),
        ),
    ),
    pending=(
        Job("head", queue="q", gpus=4, priority=1, preemptible=False),
        Job("small", queue="q", submit_time=1.0),
        Job("small2", queue="q", submit_time=2.0),
    ),
)


# -- properties ---------------------------------------------------------------------------


@SETTINGS
@given(snapshots())
def test_every_profile_keeps_the_invariants(snapshot: Snapshot) -> None:
    for name in PROFILE_NAMES:
        decision = run_cycle(snapshot, name)
        check_decision(snapshot, decision, name)


@SETTINGS
@given(snapshots(drained=True))
def test_jobs_on_drained_devices_do_not_corrupt_the_cycle(snapshot: Snapshot) -> None:
    for name in PROFILE_NAMES:
        decision = run_cycle(snapshot, name)
        check_decision(snapshot, decision, name)


@SETTINGS
@given(snapshots())
def test_decisions_are_deterministic(snapshot: Snapshot) -> None:
    for name in PROFILE_NAMES:
        assert run_cycle(snapshot, name) == run_cycle(snapshot, name)


@SETTINGS
@given(snapshots())
@example(GANG_NEEDS_TWO_LEAVES)
def test_no_job_that_fits_is_left_waiting(snapshot: Snapshot) -> None:
    for name in PROFILE_NAMES:
        check_work_conserving(snapshot, run_cycle(snapshot, name), name)


@SETTINGS
@given(snapshots())
@example(RESERVED_MEMORY)
def test_reservations_are_honoured(snapshot: Snapshot) -> None:
    for name in PROFILE_NAMES:
        check_reservations_honoured(snapshot, run_cycle(snapshot, name))


@SETTINGS
@given(snapshots())
@example(CPU_JOB_BLOCKS_PREEMPTION)
@example(EVICTION_FREES_QUOTA)
def test_a_cycle_on_its_applied_decision_only_moves_victims(snapshot: Snapshot) -> None:
    """Stability. Strictly "the next cycle changes nothing" cannot hold: a victim evicted for
    a gang may fit elsewhere (the preemptor needed a particular node or domain), and a victim
    may itself reclaim or preempt (strictly lower priority or quota, so chains end). What must
    hold: after a decision without evictions the next cycle is empty, and after one with
    evictions the next cycle only places those victims, unless it evicts again. Reservations
    are left out: a job started this cycle moves the next reservation legitimately."""
    for name in PROFILE_NAMES:
        first = run_cycle(snapshot, name)
        applied = apply_decision(snapshot, first)
        second = run_cycle(applied, name)
        check_decision(applied, second, name)
        if first.reservations:
            continue
        victims = {e.job_id for e in first.evictions}
        if not victims:
            assert second.is_empty, (
                f"{name}: second cycle not empty: placed {[p.job_id for p in second.placements]}"
                f", evicted {[e.job_id for e in second.evictions]}"
            )
        elif not second.evictions:
            moved = {p.job_id for p in second.placements} - victims
            assert not moved, f"{name}: second cycle placed non-victims {sorted(moved)}"


@SETTINGS
@given(snapshots())
def test_cycles_reach_a_fixed_point_without_double_eviction(snapshot: Snapshot) -> None:
    """With time standing still, repeated cycles on the applied decisions stop changing
    anything, and no job is evicted twice on the way. (Each non-empty cycle places or evicts;
    with at most one eviction per job and one placement per pending spell, 3 cycles per job
    bound the way to the fixed point.)"""
    jobs = len(snapshot.running) + len(snapshot.pending)
    limit = 3 * jobs + 2
    for name in PROFILE_NAMES:
        decisions = cycles_until_quiet(snapshot, name, limit)
        assert decisions[-1].is_empty, f"{name}: no fixed point after {limit} cycles"
        evicted = Counter(e.job_id for d in decisions for e in d.evictions)
        twice = sorted(j for j, k in evicted.items() if k > 1)
        assert not twice, f"{name}: evicted more than once: {twice}"


@settings(
    deadline=None,
    report_multiple_bugs=False,
    max_examples=max(10, settings.default.max_examples // 2),
)
@given(snapshots())
def test_no_preemption_ping_pong_over_100_cycles(snapshot: Snapshot) -> None:
    """100 cycles, each on the applied previous decision, ten minutes apart, no new jobs: no
    job is evicted twice, and never is a job evicted for one that it was itself evicted for.

    Shortcut: once every running job is past its `min_runtime` (nothing becomes evictable any
    more) and three cycles in a row changed nothing, the remaining cycles would too."""
    for name in PROFILE_NAMES:
        state = snapshot
        evicted: Counter[str] = Counter()
        pairs: set[tuple[str, str]] = set()
        quiet = 0
        for _ in range(100):
            decision = run_cycle(state, name)
            check_decision(state, decision, name)
            for e in decision.evictions:
                assert (e.for_job, e.job_id) not in pairs, (
                    f"{name}: ping-pong: {e.job_id} evicted for {e.for_job} and vice versa"
                )
                pairs.add((e.job_id, e.for_job))
                evicted[e.job_id] += 1
                assert evicted[e.job_id] == 1, f"{name}: {e.job_id} evicted twice"
            state = apply_decision(state, decision, now=state.now + 600.0)
            quiet = quiet + 1 if decision.is_empty else 0
            settled = all(state.now - r.started_at >= r.job.min_runtime for r in state.running)
            if quiet >= 3 and settled:
                break


# -- regressions --------------------------------------------------------------------------


def placed(decision: Decision) -> dict[str, tuple[NodeDevices, ...]]:
    return {p.job_id: p.nodes for p in decision.placements}


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_a_gang_spans_nodes_of_a_cluster_without_topology(profile: str) -> None:
    snap = Snapshot(NOW, (Node("n0", 4), Node("n1", 4)), pending=(Job("a", gpus=8),))
    decision = run_cycle(snap, profile)
    check_decision(snap, decision, profile)
    assert placed(decision) == {
        "a": (NodeDevices("n0", (0, 1, 2, 3)), NodeDevices("n1", (0, 1, 2, 3)))
    }


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_a_job_on_a_failed_device_is_neither_double_counted_nor_freed(profile: str) -> None:
    """A GPU fails (unavailable) under a running job: the three others are free, and evicting
    that job must not make the failed device usable."""
    snap = Snapshot(
        NOW,
        (Node("n0", 4, unavailable=(0,)),),
        running=(RunningJob(Job("r"), (NodeDevices("n0", (0,)),)),),
        pending=(Job("p", gpus=3, priority=9), Job("q", priority=8)),
    )
    decision = run_cycle(snap, profile)
    check_decision(snap, decision, profile)
    assert placed(decision)["p"] == (NodeDevices("n0", (1, 2, 3)),)
    assert not decision.evictions
    assert decision.pending["q"].code in ("capacity", "order")


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_jobs_on_a_drained_node_do_not_shrink_the_rest_of_the_cluster(profile: str) -> None:
    snap = Snapshot(
        NOW,
        (Node("n0", 4, schedulable=False), Node("n1", 4)),
        running=(RunningJob(Job("r"), (NodeDevices("n0", (0,)),)),),
        pending=(Job("p", gpus=4, priority=9),),
    )
    decision = run_cycle(snap, profile)
    check_decision(snap, decision, profile)
    assert placed(decision) == {"p": (NodeDevices("n1", (0, 1, 2, 3)),)}
    assert not decision.evictions


@pytest.mark.parametrize("profile", [p for p in PROFILE_NAMES if p != "fifo"])
def test_a_job_too_hungry_for_cpus_does_not_hide_a_modest_one(profile: str) -> None:
    """Failed fits are cached per job shape; the CPU demand is part of the shape."""
    snap = Snapshot(
        NOW,
        (Node("n0", 8, cpus=64.0),),
        pending=(Job("hungry", gpus=4, cpus=100.0, priority=5), Job("modest", gpus=4, cpus=1.0)),
    )
    decision = run_cycle(snap, profile)
    check_decision(snap, decision, profile)
    assert set(placed(decision)) == {"modest"}
    assert decision.pending["hungry"].code == "resources"


def test_a_reservation_does_not_keep_its_own_job_from_preempting() -> None:
    snap = Snapshot(
        1000.0,
        (Node("n0", 4),),
        running=(
            RunningJob(Job("low", gpus=2, expected_duration=3600.0), (NodeDevices("n0", (0, 1)),)),
            RunningJob(
                Job("other", priority=5, expected_duration=7200.0), (NodeDevices("n0", (2,)),)
            ),
        ),
        pending=(Job("high", gpus=3, priority=1),),
    )
    decision = run_cycle(snap, "default")
    check_decision(snap, decision, "default")
    assert placed(decision) == {"high": (NodeDevices("n0", (0, 1, 3)),)}
    assert [e.job_id for e in decision.evictions] == ["low"]


def test_strict_stability_fails_legitimately_when_a_victim_fits_elsewhere() -> None:
    """Why stability is stated modulo victims: `big` needs a GPU of node a (node b has CPUs
    for only three of its GPUs) and evicts `low` for it; `low` itself needs no CPUs and fits
    in b's last GPU, so the next cycle starts it there; the one after changes nothing."""
    snap = replace(CPU_JOB_BLOCKS_PREEMPTION, pending=CPU_JOB_BLOCKS_PREEMPTION.pending[:1])
    decisions = cycles_until_quiet(snap, "priority", 5)
    assert [sorted(placed(d)) for d in decisions] == [["big"], ["low"], []]
    assert [[e.job_id for e in d.evictions] for d in decisions] == [["low"], [], []]
    assert placed(decisions[1])["low"] == (NodeDevices("b", (3,)),)


# -- open core bugs (each test states the correct behaviour) -------------------------------


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_a_gang_spans_leaves_when_the_fullest_leaf_lacks_memory(profile: str) -> None:
    """placement._fill picks domains by free GPUs alone; when the chosen leaf lacks memory it
    gives up instead of combining leaves, so a job that fits stays pending ("resources")."""
    decision = run_cycle(GANG_NEEDS_TWO_LEAVES, profile)
    check_decision(GANG_NEEDS_TWO_LEAVES, decision, profile)
    assert placed(decision) == {
        "gang": (NodeDevices("n1", (0,)), NodeDevices("n0", (0,)))
    } or placed(decision) == {"gang": (NodeDevices("n0", (0,)), NodeDevices("n1", (0,)))}


def test_a_cpu_only_job_placed_this_cycle_does_not_block_preemption() -> None:
    """Without `cpu`, `big` preempts `low` at once. With it, the victim search at cluster
    level (shortfall 0 GPUs) picks `cpu`, a 0-GPU job placed this cycle, as the cheapest
    victim, the plan fails, and `big` waits a cycle (then `cpu` is running, has class -1 and
    is no longer a candidate)."""
    decision = run_cycle(CPU_JOB_BLOCKS_PREEMPTION, "default")
    check_decision(CPU_JOB_BLOCKS_PREEMPTION, decision, "default")
    assert set(placed(decision)) == {"big", "cpu"}
    assert [e.job_id for e in decision.evictions] == ["low"]


def test_evictions_that_free_quota_let_waiting_jobs_start_in_the_same_cycle() -> None:
    """cycle._settle skips jobs whose status is "quota", although the evictions of the cycle
    lowered their queue's usage: `p2` only starts one cycle later."""
    decision = run_cycle(EVICTION_FREES_QUOTA, "priority")
    check_decision(EVICTION_FREES_QUOTA, decision, "priority")
    assert [e.job_id for e in decision.evictions] == ["r1"]
    assert set(placed(decision)) == {"p0", "p2"}


def test_backfill_does_not_give_away_the_memory_a_reservation_needs() -> None:
    decision = run_cycle(RESERVED_MEMORY, "default")
    check_decision(RESERVED_MEMORY, decision, "default")
    assert [r.job_id for r in decision.reservations] == ["head"]
    check_reservations_honoured(RESERVED_MEMORY, decision)


def test_backfill_in_the_reserved_jobs_queue_does_not_cancel_its_reservation() -> None:
    """`small` (same queue as `head`) is backfilled outside the reservation: fine at t=1000,
    when `r` has ended. But it raises q to 3 GPUs now, so the next cycle finds `head`
    quota-blocked (3 + 4 > 6), gives it no reservation, and starts `small2` on a reserved
    device: backfill ended up delaying the reserved job."""
    first = run_cycle(RESERVED_QUOTA, "default")
    check_decision(RESERVED_QUOTA, first, "default")
    assert [r.job_id for r in first.reservations] == ["head"]
    check_reservations_honoured(RESERVED_QUOTA, first)
    applied = apply_decision(RESERVED_QUOTA, first)
    second = run_cycle(applied, "default")
    check_decision(applied, second, "default")
    assert [r.job_id for r in second.reservations] == ["head"]
    assert not second.placements, f"placed {sorted(placed(second))} on the reservation"


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_a_cpu_only_non_preemptible_job_is_not_held_by_the_gpu_guarantee(profile: str) -> None:
    """A non-preemptible job must fit in its queue's guaranteed GPUs because it could never
    be reclaimed; a job with 0 GPUs takes none, yet it waits while the queue borrows GPUs
    ("2/0 GPUs; job needs 0")."""
    snap = Snapshot(
        NOW,
        (Node("a", 4),),
        queues=(Queue("q"),),
        running=(RunningJob(Job("r", queue="q", gpus=2), (NodeDevices("a", (0, 1)),)),),
        pending=(Job("cpu", queue="q", gpus=0, preemptible=False),),
    )
    decision = run_cycle(snap, profile)
    check_decision(snap, decision, profile)
    assert placed(decision) == {"cpu": (NodeDevices("a", ()),)}
