"""Invariant checkers shared by the property tests of the scheduling core.

`check_decision` asserts every invariant one decision must keep; `check_work_conserving`
(no waiting job fits into what is left, except under strict FIFO) and
`check_reservations_honoured` check the stronger properties; `cycles_until_quiet` runs
cycles on their applied decisions to a fixed point. The brute-force helpers (`queue_paths`,
`node_load`, `fits_now`, ...) recompute from the snapshot what the core keeps incrementally.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import replace

from trainyard.core import (
    Decision,
    Job,
    NodeDevices,
    Queue,
    RunningJob,
    Snapshot,
    apply_decision,
    get_profile,
    run_cycle,
)
from trainyard.core.audit import booking_conflicts
from trainyard.core.plugins.job_orders import las_level

EPS = 1e-6

Device = tuple[str, int]


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


def own_part(snapshot: Snapshot, queue: str) -> int:
    """What `queue`'s guarantee leaves beyond its children's: its own jobs' part."""
    queues = list(snapshot.effective_queues())
    guaranteed = {q.name: q.guaranteed for q in queues}
    kids = [q.name for q in queues if q.parent == queue]
    return max(0, guaranteed[queue] - sum(guaranteed[k] for k in kids))


def own_held(snapshot: Snapshot, queue: str) -> int:
    """GPUs the jobs submitted to `queue` itself hold."""
    return sum(r.job.gpus for r in snapshot.running if r.job.queue == queue)


def own_borrowed(snapshot: Snapshot, queue: str) -> bool:
    """Whether the jobs submitted to `queue` itself (an inner queue) hold more GPUs than
    what its guarantee leaves beyond its children's (`reclaim.own_excess`)."""
    return own_held(snapshot, queue) > own_part(snapshot, queue)


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
        elif e.action == "las_preempt":
            prof = get_profile(profile)
            assert r.job.queue == preemptor.queue, "LAS preemption crossed queues"
            assert r.job.priority <= preemptor.priority, "LAS-preempted a higher priority"
            assert las_level(r.job, prof) > las_level(preemptor, prof), (
                "LAS-preempted a job that has not received more service"
            )
        elif e.action == "reclaim":
            if preemptor.queue in paths[r.job.queue]:  # from a descendant (review 14, F10)
                assert r.job.queue != preemptor.queue, "reclaimed from its own queue"
                freed = sum(x.gpus for x in decision.evictions if x.queue == preemptor.queue)
                assert own_held(snapshot, preemptor.queue) - freed + preemptor.gpus <= own_part(
                    snapshot, preemptor.queue
                ), f"{e.for_job} reclaimed from its subtree beyond its queue's own part"
                guaranteed = {q.name: q.guaranteed for q in snapshot.effective_queues()}
                assert queue_usage(snapshot)[r.job.queue] > guaranteed[r.job.queue], (
                    f"reclaimed {e.job_id} of {r.job.queue}, which does not borrow"
                )
            if r.job.queue in paths[preemptor.queue]:  # an inner queue's own job
                assert own_borrowed(snapshot, r.job.queue), (
                    f"reclaimed {e.job_id} of {r.job.queue}, whose own jobs hold no more than "
                    "the part of its guarantee its children leave"
                )
        else:
            raise AssertionError(f"eviction by action {e.action!r}")

    # placements: gang, usable devices, device class, topology, no double booking
    resized = {z.job_id for z in decision.resizes}
    taken = {
        dev: jid
        for dev, jid in held_devices(snapshot).items()
        if jid not in evicted and jid not in resized
    }
    for z in decision.resizes:  # a resized job restarts on its new devices
        for nd in z.nodes:
            for d in nd.devices:
                owner = taken.get((nd.node, d))
                assert owner is None, f"device {nd.node}:{d} given to {z.job_id} and {owner}"
                taken[(nd.node, d)] = z.job_id
    for p in decision.placements:
        job = pending[p.job_id]
        assert p.queue == job.queue
        # a placement waits for the jobs whose devices it uses: evicted, or resized (restarted)
        assert set(p.after_evictions) <= set(evicted) | {z.job_id for z in decision.resizes}
        if job.is_elastic:
            lo, hi = elastic_bounds(job)
            assert lo <= p.gpus <= hi, f"{p.job_id}: {p.gpus} devices outside [{lo}, {hi}]"
        else:
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
            assert not node.spare or job.recovering, (
                f"{p.job_id} is not recovering but was placed on hot spare {nd.node}"
            )
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
            if job.topology in ("node", "island") or job.nodes == 1:
                assert len(gpu_nodes) == 1, f"{p.job_id} must stay inside one node"
            if job.nodes > 1:
                per = {len(nd.devices) for nd in p.nodes}
                assert len(p.nodes) == job.nodes and per == {job.gpus // job.nodes}, (
                    f"{p.job_id} asks for {job.nodes} nodes of {job.gpus // job.nodes} GPUs, "
                    f"placed as {[len(nd.devices) for nd in p.nodes]}"
                )
            if job.topology == "island":
                node = gpu_nodes[0]
                size = node.island_size or node.gpus
                islands = {d // size for d in p.nodes[0].devices}
                assert len(islands) == 1, f"{p.job_id} must stay inside one NVLink island"
            if job.topology in levels:
                depth = levels.index(job.topology) + 1
                domains = {n.path[:depth] for n in gpu_nodes}
                assert len(domains) == 1, f"{p.job_id} spans {job.topology}s {domains}"

    check_resizes(snapshot, decision)

    # strict booking: evicted jobs hold their devices, CPU and memory until they have stopped
    conflicts = booking_conflicts(snapshot, decision)
    assert not conflicts, f"{profile}: {conflicts[0]}"

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


def elastic_bounds(job: Job) -> tuple[int, int]:
    lo = job.min_gpus if job.min_gpus is not None else job.gpus
    hi = job.max_gpus if job.max_gpus is not None else job.gpus
    return max(1, lo), max(1, hi)


def check_resizes(snapshot: Snapshot, decision: Decision) -> None:
    """A resize restarts a running elastic job, not evicted or placed in the same decision,
    within its range, under the protections of an eviction, on usable devices of one class
    inside its topology limit (a restart is a new start)."""
    nodes = {n.name: n for n in snapshot.nodes}
    running = {r.job.id: r for r in snapshot.running}
    levels = snapshot.topology.levels
    moved = [z.job_id for z in decision.resizes]
    assert len(set(moved)) == len(moved), f"job resized twice: {moved}"
    assert not set(moved) & {e.job_id for e in decision.evictions}, "resized and evicted"
    assert not set(moved) & {p.job_id for p in decision.placements}, "resized and placed"
    for z in decision.resizes:
        r = running.get(z.job_id)
        assert r is not None, f"resized {z.job_id}, which is not running"
        job = r.job
        assert job.is_elastic, f"resized rigid job {z.job_id}"
        assert z.from_gpus == job.gpus and z.queue == job.queue
        lo, hi = elastic_bounds(job)
        assert lo <= z.gpus <= hi and z.gpus != job.gpus, f"{z.job_id}: {job.gpus} -> {z.gpus}"
        assert job.preemptible, f"non-preemptible {z.job_id} resized"
        assert snapshot.now - r.started_at >= job.min_runtime, f"{z.job_id} resized too soon"
        assert z.reason, f"{z.job_id}: resize without a reason"
        gpu_nodes = [nodes[nd.node] for nd in z.nodes if nd.devices]
        kinds = {(n.gpu_type, n.gpu_memory_gb) for n in gpu_nodes}
        assert len(kinds) == 1, f"{z.job_id} resized across device classes {kinds}"
        for nd in z.nodes:
            node = nodes[nd.node]
            assert node.schedulable, f"{z.job_id} restarted on unschedulable node {nd.node}"
            for d in nd.devices:
                assert 0 <= d < node.gpus and d not in node.unavailable, (
                    f"{z.job_id} restarted on unavailable device {nd.node}:{d}"
                )
        if job.topology in ("node", "island"):
            assert len(gpu_nodes) == 1, f"{z.job_id} must stay inside one node"
        if job.topology in levels:
            depth = levels.index(job.topology) + 1
            assert len({n.path[:depth] for n in gpu_nodes}) == 1, f"{z.job_id} spans domains"


def node_room(snapshot: Snapshot, job: Job, blocked: set[Device]) -> dict[str, int]:
    """GPUs of `job` each schedulable node of an acceptable class could take now (CPU/memory
    included, rounded down with a margin so that float noise never makes a false alarm)."""
    taken = set(held_devices(snapshot)) | blocked
    load = node_load(snapshot)
    g = max(job.gpus, 1)
    cpg, mpg = job.cpus / g, job.memory_gb / g
    out = {}
    for node in snapshot.nodes:
        if not node.schedulable or (node.spare and not (job.recovering and job.gpus)):
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
    nodes = [n for n in snapshot.nodes if n.name in room]
    levels = snapshot.topology.levels
    depth = levels.index(job.topology) + 1 if job.topology in levels else 0
    if job.nodes > 1:  # exactly that many nodes of one class and domain, gpus / N each
        per = job.gpus // job.nodes
        counts: dict[tuple[object, ...], int] = {}
        for n in nodes:
            if room[n.name] >= per:
                key = (n.gpu_type, n.gpu_memory_gb, n.path[:depth])
                counts[key] = counts.get(key, 0) + 1
        found = [key for key, count in counts.items() if count >= job.nodes]
        return f"{job.nodes} nodes of {found[0]}" if found else None
    for name, r in room.items():
        if r >= need:
            return name
    if job.gpus == 0 or job.topology in ("node", "island") or job.nodes == 1:
        return None
    if not split and any(n.gpus - len(n.unavailable) >= job.gpus for n in nodes):
        return None
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


def held_for_reservations(after: Snapshot, snapshot: Snapshot, decision: Decision) -> Snapshot:
    """`after` with the CPU and memory each reservation holds on its nodes, as the core holds
    them: what its job needs beside every reserved device, as far as it is free."""
    pending = {j.id: j for j in snapshot.pending}
    nodes = {n.name: n for n in snapshot.nodes}
    load = node_load(after)
    extra = []
    for res in decision.reservations:
        job = pending[res.job_id]
        g = max(job.gpus, 1)
        for nd in res.nodes:
            k = len(nd.devices) if job.gpus else 1
            cpu_used, mem_used = load[nd.node]
            node = nodes[nd.node]
            cpu = max(0.0, min(node.cpus - cpu_used, job.cpus / g * k))
            mem = max(0.0, min(node.memory_gb - mem_used, job.memory_gb / g * k))
            load[nd.node] = (cpu_used + cpu, mem_used + mem)
            held = Job(f"{res.job_id}@held", job.queue, 0, cpus=cpu, memory_gb=mem)
            extra.append(RunningJob(held, (NodeDevices(nd.node, ()),), snapshot.now))
    return replace(after, running=(*after.running, *extra))


def check_work_conserving(snapshot: Snapshot, decision: Decision, profile: str) -> None:
    """No job left waiting for room fits into what the cycle left free.

    Strict order (fifo) may idle devices on purpose and is exempt; the devices of reported
    reservations count as taken; jobs evicted by this decision are exempt (they may well fit
    elsewhere, see `test_a_cycle_on_its_applied_decision_only_moves_victims`).
    """
    prof = get_profile(profile)
    if prof.strict_order:
        return
    after = held_for_reservations(apply_decision(snapshot, decision), snapshot, decision)
    blocked = {(nd.node, d) for r in decision.reservations for nd in r.nodes for d in nd.devices}
    evicted = {e.job_id for e in decision.evictions}
    for job in after.pending:
        reason = decision.pending[job.id]
        if job.id in evicted or reason.code not in ("capacity", "fragmented", "resources"):
            continue
        if not quota_allows(after, job):
            continue
        where = fits_now(after, job, blocked, prof.may_split(job, snapshot.now))
        assert where is None, (
            f"{profile}: {job.id} ({reason.code}: {reason.message}) fits on {where} "
            "but was left pending"
        )


def check_reservations_honoured(snapshot: Snapshot, decision: Decision) -> None:
    """A reservation is a promise: when the running jobs expected to end by its start have
    ended, its job fits on the reserved devices, with the CPU, memory and quota it needs,
    whatever this decision started meanwhile. A reservation of unknown start (held blind,
    `Profile.reserve_unknown_after_s`) waits for the jobs with an expected duration and for
    jobs that were running before the decision: once those have ended, the same holds."""
    after = apply_decision(snapshot, decision)
    pending = {j.id: j for j in snapshot.pending}
    nodes = {n.name: n for n in snapshot.nodes}
    running_before = {r.job.id for r in snapshot.running}
    for res in decision.reservations:
        job = pending[res.job_id]

        def ends_after_start(r: RunningJob, start: float | None = res.start_time) -> bool:
            if start is None:  # it waits for every job with an estimate, then blind ones
                return r.job.id not in running_before and r.job.expected_duration is None
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
