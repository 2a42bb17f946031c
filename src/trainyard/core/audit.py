"""The booking contract of a decision, checked: no device or node capacity serves two live jobs.

A decision is carried out over time, not at once: an evicted job keeps its devices, CPU and
memory until its processes have stopped (its grace period), and a placement whose
`after_evictions` is not empty starts only once every job it names has stopped. So the jobs
alive at some moment after a decision are the running jobs that are kept, the evicted jobs
that have not stopped yet, and the placements whose awaited evictions have all stopped. The
contract (`docs/architecture.md`, "Eviction"):

- a placement uses no device of a running job that is kept, nor of another placement;
- a placement that uses a device of an evicted job names that eviction in `after_evictions`;
- on every node and at every moment (for every order in which the evictions complete) the
  live jobs fit in the node's CPUs and memory.

`booking_conflicts(snapshot, decision)` returns one sentence per breach (empty when the
decision keeps the contract). The core is built to keep it (`Statement.allocate` derives the
evictions a placement waits for from what it uses); this module is its independent check:
the tests run it on every decision of the core, the simulator and the server, and the server
logs a breach as a bug signal. Pure, like the rest of the core.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import combinations

from trainyard.core.snapshot import Snapshot
from trainyard.core.types import Decision, Eviction, Job, NodeDevices, Placement

_EPS = 1e-6
_EXACT_LIMIT = 12  # evictions per node above which the stop orders are bounded, not listed

Load = tuple[float, float]


def as_restarts(snapshot: Snapshot, decision: Decision) -> tuple[Snapshot, Decision]:
    """`decision` with every resize written as what it is carried out as: the job's run at
    its old size stops (an eviction) and a run at its new size starts (a placement of the
    pending job ``<id>@resized``, which waits for the old run and whatever else it names)."""
    if not decision.resizes:
        return snapshot, decision
    running = {r.job.id: r.job for r in snapshot.running}
    types = {n.name: n.gpu_type for n in snapshot.nodes}
    pending = list(snapshot.pending)
    evictions = list(decision.evictions)
    placements = list(decision.placements)
    for z in decision.resizes:
        job = running[z.job_id]
        new_id = f"{z.job_id}@resized"
        pending.append(replace(job.with_gpus(z.gpus), id=new_id))
        evictions.append(Eviction(z.job_id, z.queue, z.from_gpus, "resize", new_id, z.reason))
        waits = (z.job_id, *z.after_evictions)
        gpu_type = types.get(z.nodes[0].node, "") if z.nodes and z.gpus else ""
        placements.append(Placement(new_id, z.queue, z.nodes, "resize", gpu_type, waits))
    return (
        replace(snapshot, pending=tuple(pending)),
        replace(decision, evictions=tuple(evictions), placements=tuple(placements), resizes=()),
    )


def booking_conflicts(snapshot: Snapshot, decision: Decision) -> list[str]:
    """Every breach of the booking contract by `decision` (see the module docstring); a
    resize is checked as the stop of its old run and the start of its new one."""
    snapshot, decision = as_restarts(snapshot, decision)
    if not decision.placements:
        return []
    evicted = {e.job_id for e in decision.evictions}
    pending = {j.id: j for j in snapshot.pending}
    touched = {nd.node for p in decision.placements for nd in p.nodes}
    out: list[str] = []
    owner: dict[tuple[str, int], str] = {}
    for r in snapshot.running:
        for nd in r.placement:
            if nd.node in touched:
                for d in nd.devices:
                    owner[(nd.node, d)] = r.job.id
    given: dict[tuple[str, int], str] = {}
    for p in decision.placements:
        waits = set(p.after_evictions)
        for name in sorted(waits - evicted):
            out.append(f"{p.job_id} waits for {name}, which this decision does not evict")
        for nd in p.nodes:
            for d in nd.devices:
                dev = (nd.node, d)
                other = given.setdefault(dev, p.job_id)
                if other != p.job_id:
                    out.append(f"device {nd.node}:{d} given to both {other} and {p.job_id}")
                holder = owner.get(dev)
                if holder is None:
                    continue
                if holder not in evicted:
                    out.append(f"device {nd.node}:{d} given to {p.job_id} while {holder} runs on")
                elif holder not in waits:
                    out.append(
                        f"device {nd.node}:{d} given to {p.job_id} while evicted job {holder} "
                        f"still holds it ({p.job_id} does not wait for {holder})"
                    )
    out.extend(_node_conflicts(snapshot, decision, evicted, pending, touched))
    return out


def _share(job: Job, nd: NodeDevices) -> Load:
    share = len(nd.devices) / job.gpus if job.gpus else 1.0
    return job.cpus * share, job.memory_gb * share


def _node_conflicts(
    snapshot: Snapshot,
    decision: Decision,
    evicted: set[str],
    pending: dict[str, Job],
    touched: set[str],
) -> list[str]:
    """CPU and memory per node, at the worst moment of the decision's execution."""
    kept: dict[str, list[float]] = {}
    stopping: dict[str, list[tuple[str, Load]]] = {}
    for r in snapshot.running:
        for nd in r.placement:
            if nd.node not in touched:
                continue
            load = _share(r.job, nd)
            if r.job.id in evicted:
                stopping.setdefault(nd.node, []).append((r.job.id, load))
            else:
                acc = kept.setdefault(nd.node, [0.0, 0.0])
                acc[0] += load[0]
                acc[1] += load[1]
    starting: dict[str, list[tuple[frozenset[str], Load]]] = {}
    for p in decision.placements:
        job = pending.get(p.job_id)
        if job is None:
            continue
        for nd in p.nodes:
            starting.setdefault(nd.node, []).append((frozenset(p.after_evictions), _share(job, nd)))
    out = []
    for node in snapshot.nodes:
        news = starting.get(node.name)
        if not news:
            continue
        base = kept.get(node.name, [0.0, 0.0])
        olds = stopping.get(node.name, [])
        # a node the snapshot already overloads is not the decision's fault; it may not add
        cap_cpu = max(node.cpus, base[0] + sum(load[0] for _j, load in olds))
        cap_mem = max(node.memory_gb, base[1] + sum(load[1] for _j, load in olds))
        worst = _worst(base, olds, news)
        if worst[0] > cap_cpu + _EPS or worst[1] > cap_mem + _EPS:
            out.append(
                f"node {node.name}: live jobs may need {worst[0]:g} CPUs / {worst[1]:g} GB "
                f"at once (it has {node.cpus:g} / {node.memory_gb:g}): a placement does not "
                "wait for the evicted jobs whose CPU or memory it uses"
            )
    return out


def _worst(
    base: list[float],
    olds: list[tuple[str, Load]],
    news: list[tuple[frozenset[str], Load]],
) -> Load:
    """The most CPU and memory live at once on a node, over every set of completed evictions
    (exact while few evictions matter here; beyond that, everything at once bounds it)."""
    names = sorted({j for j, _l in olds} | {j for after, _l in news for j in after})
    if len(names) > _EXACT_LIMIT:
        total = [base[0], base[1]]
        for _j, load in olds:
            total[0] += load[0]
            total[1] += load[1]
        for _a, load in news:
            total[0] += load[0]
            total[1] += load[1]
        return total[0], total[1]
    worst = [0.0, 0.0]
    for size in range(len(names) + 1):
        for done in combinations(names, size):
            stopped = frozenset(done)
            cpu, mem = base[0], base[1]
            for j, load in olds:
                if j not in stopped:
                    cpu += load[0]
                    mem += load[1]
            for after, load in news:
                if after <= stopped:
                    cpu += load[0]
                    mem += load[1]
            worst[0] = max(worst[0], cpu)
            worst[1] = max(worst[1], mem)
    return worst[0], worst[1]
