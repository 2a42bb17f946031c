"""Rules every decision must obey, whatever the scenario: checked after every cycle.

`check_decision(snapshot, decision)` raises AssertionError naming the rule and the job. The
declarative cases (`cases/*.yaml`) add their specific expectations on top of these.
"""

from __future__ import annotations

from collections import Counter

from trainyard.core import Decision, Job, Node, Snapshot
from trainyard.core.audit import as_restarts, booking_conflicts

CODES = {"capacity", "fragmented", "resources", "quota", "reservation", "order", "unresolvable"}


def _island(node: Node, device: int) -> int:
    return device // (node.island_size or node.gpus or 1)


def queue_gpus(snapshot: Snapshot, jobs: list[tuple[Job, int]]) -> Counter[str]:
    """GPUs per queue including descendants, for (job, gpus) pairs."""
    parent = {q.name: q.parent for q in snapshot.effective_queues()}
    out: Counter[str] = Counter()
    for job, gpus in jobs:
        q: str | None = job.queue
        while q is not None:
            out[q] += gpus
            q = parent.get(q)
    return out


def check_decision(snap: Snapshot, dec: Decision) -> None:
    # a resize is checked as what it is carried out as: the old run stops, a new one starts
    snap, dec = as_restarts(snap, dec)
    nodes = {n.name: n for n in snap.nodes}
    pending = {j.id: j for j in snap.pending}
    running = {r.job.id: r for r in snap.running}
    placed = {p.job_id: p for p in dec.placements}
    evicted = {e.job_id: e for e in dec.evictions}
    assert len(placed) == len(dec.placements), "a job was placed twice"
    assert len(evicted) == len(dec.evictions), "a job was evicted twice"
    assert dec.now == snap.now

    owner: dict[tuple[str, int], str] = {}

    def book(job_id: str, node: str, device: int) -> None:
        other = owner.setdefault((node, device), job_id)
        assert other == job_id, f"device {node}:{device} double-booked by {other} and {job_id}"

    for r in snap.running:
        if r.job.id not in evicted:
            for nd in r.placement:
                for d in nd.devices:
                    book(r.job.id, nd.node, d)

    for p in dec.placements:
        job = pending.get(p.job_id)
        assert job is not None, f"{p.job_id}: placed but it was not pending"
        assert p.queue == job.queue, f"{job.id}: placement names queue {p.queue}"
        if job.is_elastic:  # any size in its range
            lo = job.min_gpus if job.min_gpus is not None else job.gpus
            hi = job.max_gpus if job.max_gpus is not None else job.gpus
            assert lo <= p.gpus <= hi, f"{job.id}: {p.gpus} GPUs outside [{lo}, {hi}]"
            job = job.with_gpus(p.gpus)
        assert p.gpus == job.gpus, f"{job.id}: gang split: got {p.gpus} of {job.gpus} GPUs"
        assert len({nd.node for nd in p.nodes}) == len(p.nodes), f"{job.id}: node listed twice"
        if job.gpus == 0:
            assert len(p.nodes) == 1 and not p.nodes[0].devices, f"{job.id}: CPU job shape"
        classes = set()
        for nd in p.nodes:
            node = nodes[nd.node]
            assert node.schedulable, f"{job.id}: placed on unschedulable node {node.name}"
            assert nd.devices or job.gpus == 0, f"{job.id}: empty part on {node.name}"
            for d in nd.devices:
                assert 0 <= d < node.gpus, f"{job.id}: device {d} not on {node.name}"
                assert d not in node.unavailable, f"{job.id}: unavailable {node.name}:{d}"
                book(job.id, nd.node, d)
            if job.gpus:
                classes.add((node.gpu_type, node.gpu_memory_gb))
                assert p.gpu_type == node.gpu_type, f"{job.id}: gpu_type {p.gpu_type}"
                assert not job.gpu_types or node.gpu_type in job.gpu_types, f"{job.id}: type"
                assert node.gpu_memory_gb >= job.gpu_memory_gb, f"{job.id}: GPU memory"
        assert len(classes) <= 1, f"{job.id}: gang mixes device classes {classes}"
        _check_topology(job, p.nodes, nodes, snap)
        for victim in p.after_evictions:
            assert victim in evicted, f"{job.id}: waits for {victim}, which is not evicted"

    conflicts = booking_conflicts(snap, dec)  # evicted jobs are live until they stop
    assert not conflicts, conflicts[0]
    _check_node_resources(snap, dec, nodes)
    _check_evictions(snap, dec, running, pending, placed)
    _check_quota(snap, dec, running, pending)
    _check_pending(snap, dec, placed, evicted)
    _check_reservations(snap, dec, pending)


def _check_topology(job: Job, parts: tuple, nodes: dict[str, Node], snap: Snapshot) -> None:
    if job.topology is None or job.topology == "cluster":
        return
    if job.topology in ("node", "island"):
        assert len(parts) == 1, f"{job.id}: topology {job.topology} but spans {len(parts)} nodes"
        if job.topology == "island":
            node = nodes[parts[0].node]
            isl = {_island(node, d) for d in parts[0].devices}
            assert len(isl) <= 1, f"{job.id}: topology island but spans islands {isl}"
        return
    depth = snap.topology.levels.index(job.topology) + 1
    prefixes = {nodes[nd.node].path[:depth] for nd in parts}
    assert len(prefixes) == 1, f"{job.id}: must stay in one {job.topology}, spans {prefixes}"


def _check_node_resources(snap: Snapshot, dec: Decision, nodes: dict[str, Node]) -> None:
    evicted = {e.job_id for e in dec.evictions}
    use: dict[str, list[float]] = {n: [0.0, 0.0] for n in nodes}
    holders = [(r.job, r.placement) for r in snap.running if r.job.id not in evicted]
    pending = {j.id: j for j in snap.pending}
    holders += [(pending[p.job_id], p.nodes) for p in dec.placements]
    for job, parts in holders:
        for nd in parts:
            share = len(nd.devices) / job.gpus if job.gpus else 1.0
            use[nd.node][0] += job.cpus * share
            use[nd.node][1] += job.memory_gb * share
    for p in dec.placements:
        for nd in p.nodes:
            node = nodes[nd.node]
            cpu, mem = use[nd.node]
            assert cpu <= node.cpus + 1e-6, f"{p.job_id}: node {node.name} CPUs {cpu}"
            assert mem <= node.memory_gb + 1e-6, f"{p.job_id}: node {node.name} memory {mem}"


def _check_evictions(snap: Snapshot, dec: Decision, running, pending, placed) -> None:
    for e in dec.evictions:
        r = running.get(e.job_id)
        assert r is not None, f"{e.job_id}: evicted but not running"
        victim = r.job
        assert e.job_id not in placed, f"{e.job_id}: evicted and placed in the same cycle"
        assert victim.preemptible, f"{e.job_id}: non-preemptible job evicted"
        ran = snap.now - r.started_at
        assert ran >= victim.min_runtime, f"{e.job_id}: evicted after {ran}s < min_runtime"
        assert (e.gpus, e.queue) == (victim.gpus, victim.queue), f"{e.job_id}: not whole"
        assert e.for_job in placed, f"{e.job_id}: evicted for {e.for_job}, which is not placed"
        winner = pending[e.for_job]
        assert e.job_id in placed[e.for_job].after_evictions, f"{e.job_id}: not awaited"
        if e.action == "preempt":
            assert victim.queue == winner.queue, f"{e.job_id}: preempted across queues"
            assert victim.priority < winner.priority, f"{e.job_id}: preempted by lower/equal"
        elif e.action == "reclaim":
            assert victim.queue != winner.queue, f"{e.job_id}: reclaimed by its own queue"
        elif e.action == "las_preempt":
            assert victim.queue == winner.queue, f"{e.job_id}: LAS-preempted across queues"
            assert victim.priority <= winner.priority, f"{e.job_id}: LAS over priority"
            assert victim.attained_service > winner.attained_service, (
                f"{e.job_id}: LAS-preempted by a job with more service"
            )
        elif e.action == "resize":
            assert e.for_job == f"{e.job_id}@resized", f"{e.job_id}: resized for {e.for_job}"
            assert victim.is_elastic, f"{e.job_id}: a rigid job resized"
        else:
            raise AssertionError(f"{e.job_id}: eviction by action {e.action}")


def _check_quota(snap: Snapshot, dec: Decision, running, pending) -> None:
    """Limits hold after the decision on every queue that got GPUs; non-preemptible jobs
    (which can never be reclaimed) stay within `guaranteed` together."""
    evicted = {e.job_id for e in dec.evictions}
    kept = [r.job for r in snap.running if r.job.id not in evicted]
    new = [pending[p.job_id] for p in dec.placements]
    after = queue_gpus(snap, [(j, j.gpus) for j in kept + new])
    fixed = queue_gpus(snap, [(j, j.gpus) for j in kept + new if not j.preemptible])
    queues = {q.name: q for q in snap.effective_queues()}
    for job in new:
        q: str | None = job.queue
        while q is not None:
            lim = queues[q].limit
            assert lim is None or after[q] <= lim, f"{job.id}: queue {q} over limit {lim}"
            if not job.preemptible:
                assert fixed[q] <= queues[q].guaranteed, f"{job.id}: non-preemptible over quota"
            q = queues[q].parent


def _check_pending(snap: Snapshot, dec: Decision, placed, evicted) -> None:
    expected = {j.id for j in snap.pending if j.id not in placed}
    expected |= {e for e, ev in evicted.items() if ev.action != "resize"}  # resized: running
    assert set(dec.pending) == expected, f"pending explained {set(dec.pending) ^ expected}"
    for jid, reason in dec.pending.items():
        assert reason.code in CODES, f"{jid}: unknown code {reason.code}"
        assert reason.message.strip(), f"{jid}: empty explanation"


def _check_reservations(snap: Snapshot, dec: Decision, pending: dict[str, Job]) -> None:
    for res in dec.reservations:
        assert res.job_id in dec.pending, f"{res.job_id}: reserved but not pending"
        start = res.start_time  # None: held blind, start unknown (no run times known)
        assert start is None or start >= snap.now, f"{res.job_id}: reserved in the past"
        reason = dec.pending[res.job_id]
        est = reason.estimated_start
        # earlier only when a protected victim's min_runtime ends first, and then it says so
        earlier = (
            est is not None
            and (start is None or est < start)
            and "minimum run time" in reason.message
        )
        assert est == start or earlier, (
            f"{res.job_id}: reserved from {res.start_time} but its explanation says "
            f"estimated_start={est}: {reason.message!r}"
        )
        size = sum(len(nd.devices) for nd in res.nodes)
        assert size == pending[res.job_id].gpus, f"{res.job_id}: reservation of {size} GPUs"
        held = {(nd.node, d) for nd in res.nodes for d in nd.devices}
        for p in dec.placements:
            if p.action != "backfill":
                continue
            used = {(nd.node, d) for nd in p.nodes for d in nd.devices}
            if used & held:
                d = pending[p.job_id].expected_duration
                assert d is not None and start is not None and snap.now + d <= start, (
                    f"{p.job_id}: backfilled onto devices reserved for {res.job_id} "
                    f"and would end after its start {res.start_time}"
                )
