"""Shrink plans for a waiting job: which running elastic jobs give how many GPUs so that it
starts (the resize action's pass 2, `actions/resize.py`).

`shrink_plan` shrinks donors in place (`donors.shrink`, which keeps a donor's whole nodes
first) and places the waiting job, or rolls everything back. Donors give first what they
hold above their fair share, then down to their minimum (`_plan`). A job that must stay in
one node or domain may find the GPUs freed scattered over several donors' nodes: it is then
tried on one donor at a time, whose shrink frees a whole node (outside review 18: a 4-GPU
arrival had 3 + 1 GPUs freed on two 8-GPU jobs, fitting nowhere, and `las_preempt` then
evicted one of them whole), then on the donors of one domain, each giving up its devices
there (`_domain_plan`; review 19: two donors holding a node of each leaf were evicted whole
for a leaf-bound arrival). Every plan keeps other queues at their guarantees unless the
waiting job's queue is owed its own. Pure: it reads the cycle and changes it through its
`Statement`.
"""

from __future__ import annotations

from collections.abc import Callable

from trainyard.core.actions.donors import shrink
from trainyard.core.actions.rebalance import reports_left, weight
from trainyard.core.cycle import Cycle
from trainyard.core.goodput import GoodputModel
from trainyard.core.state import Alloc
from trainyard.core.types import Job

__all__ = ["shrink_plan"]

ONE_DONOR_TRIES = 4  # donors tried alone for a job the spread plan could not place
DOMAIN_TRIES = 4  # domains tried, the cheapest first, for a job one donor could not place


def shrink_plan(
    cycle: Cycle,
    job: Job,
    usable: list[Alloc],
    fair: int,
    whole: bool,
    model_of: Callable[[Job], GoodputModel],
    per_node: int,
) -> dict[str, int]:
    """Shrink donors so that `job` starts, and start it: the GPUs each donor gave, by job
    id, or {} (nothing changed) when no plan lets it start. An elastic job starts at its
    minimum, or whole (`whole`: its queue is owed its guarantee for all of it). When the
    free GPUs would be enough but are scattered (a job that must stay in one node or
    domain), the donors give one GPU, then the job's size: the plan stands only if the job
    then fits (outside review 14: the free count alone was compared). `per_node`: the GPUs
    of the largest node."""
    lo, _hi = job.size_range
    sizes = [lo] if job.is_elastic else [job.gpus]
    if whole:
        sizes.insert(0, job.gpus)
    room = cycle.state.free_of(cycle.classes_of(job))
    # enough free GPUs, yet waiting: they are scattered if it must stay in one node or
    # domain (its topology, or a job that fits a node within its locality wait)
    one_node = max(sizes) <= per_node
    scattered = job.topology is not None or (
        one_node and not cycle.profile.may_split(job, cycle.now)
    )
    for need_gpus in sizes:
        short = need_gpus - room
        tries = (short,) if short > 0 else (1, need_gpus) if scattered else ()
        for need in tries:
            plan = _try_plan(cycle, job, usable, need, need_gpus, fair, model_of)
            if plan:
                return plan
        if scattered and len(usable) > 1:  # one donor alone, so that what it frees is whole
            for a in _alone(usable, fair)[:ONE_DONOR_TRIES]:
                for need in tries:  # scattered: what the spread plan tried
                    if a.gpus - a.job.size_range[0] < need:
                        break
                    plan = _try_plan(cycle, job, [a], need, need_gpus, fair, model_of)
                    if plan:
                        return plan
            plan = _domain_plan(cycle, job, usable, need_gpus, fair)
            if plan:
                return plan
    return {}


def _domain_plan(
    cycle: Cycle, job: Job, usable: list[Alloc], need_gpus: int, fair: int
) -> dict[str, int]:
    """For a job that must stay inside one domain (a node, or its topology level): the
    domain where the free GPUs and what donors hold there make its size with the fewest
    donors restarted (those most above their fair share giving first), each donor giving up
    its devices there (`shrink(release=...)`); the plan, with the job placed, or {} with
    everything rolled back. Two donors that each held a node of the same leaf were both
    evicted whole for an 8-GPU arrival that must stay in a leaf: the spread plan shrank
    them where they held most (outside review 19, F4)."""
    layout = cycle.layout
    state = cycle.state
    classes = set(cycle.classes_of(job))
    level = cycle.max_level(job)  # -1 (any): it waits for one node by its locality wait
    domain_of: list[int] = (
        layout.domain_of[level] if 0 <= level < layout.depth else list(range(len(layout.nodes)))
    )
    free: dict[int, int] = {}
    for n, cls in enumerate(layout.class_of_node):
        if cls in classes:
            d = domain_of[n]
            free[d] = free.get(d, 0) + state.free_cnt[n]
    for h in cycle.holds:  # its own reservation's devices are free for it (review 20, F2)
        own = state.allocs.get(h.hold_id) if h.job.id == job.id else None
        if own is not None:
            for n, mask, _c, _m in own.parts:
                free[domain_of[n]] = free.get(domain_of[n], 0) + mask.bit_count()
    held: dict[int, dict[str, int]] = {}  # domain -> donor -> GPUs it holds there
    for a in usable:
        for n, mask, _c, _m in a.parts:
            per = held.setdefault(domain_of[n], {})
            per[a.job.id] = per.get(a.job.id, 0) + mask.bit_count()
    by_id = {a.job.id: a for a in usable}
    queues = cycle.queues
    qi = queues.index[job.queue]
    owed = queues.within_guaranteed(qi, job.gpus) < 0
    cands: list[tuple[tuple[int, int], int, dict[str, int]]] = []
    for d, per in held.items():
        short = need_gpus - free.get(d, 0)
        if short <= 0:
            continue  # room enough already: the placement, not the donors, is in the way
        plan: dict[str, int] = {}
        by_queue: dict[int, int] = {}  # as `_plan`: another queue gives only above guarantee
        for jid in sorted(per, key=lambda j: (fair - by_id[j].gpus, j)):
            a = by_id[jid]
            give = min(per[jid], a.gpus - a.job.size_range[0], short)
            if a.queue != qi and not owed:
                give = min(give, queues.over_guaranteed(a.queue) - by_queue.get(a.queue, 0))
            if give > 0:
                plan[jid] = give
                by_queue[a.queue] = by_queue.get(a.queue, 0) + give
                short -= give
            if short <= 0:
                break
        if short <= 0:
            below = sum(max(0, min(g, fair - (by_id[j].gpus - g))) for j, g in plan.items())
            cands.append(((len(plan), below), d, plan))
    cands.sort()
    # the cheapest may still not place it: a gang runs on one GPU type, an island-bound job
    # on one island, so a domain's count can overstate it (review 20, F1)
    for _cost, d, plan in cands[:DOMAIN_TRIES]:
        nodes = frozenset(n for n in range(len(layout.nodes)) if domain_of[n] == d)
        if _apply(cycle, job, [by_id[j] for j in plan], plan, need_gpus, nodes):
            return plan
    return {}


def _alone(usable: list[Alloc], fair: int) -> list[Alloc]:
    """The donors to try alone: the most above their fair share first, then the most GPUs
    above their minimum (outside review 19: by spare GPUs alone, a job at 8 of a fair 10
    gave 4 while two others stayed at 12)."""
    return sorted(usable, key=lambda a: (fair - a.gpus, a.job.size_range[0] - a.gpus, a.job.id))


def _try_plan(
    cycle: Cycle,
    job: Job,
    usable: list[Alloc],
    need: int,
    need_gpus: int,
    fair: int,
    model_of: Callable[[Job], GoodputModel],
) -> dict[str, int]:
    """Shrink donors by `need` GPUs and place `job` at `need_gpus`: the plan, or {} with
    every change rolled back."""
    plan = _plan(cycle, job, usable, need, fair, model_of)
    return plan if plan and _apply(cycle, job, usable, plan, need_gpus) else {}


def _apply(
    cycle: Cycle,
    job: Job,
    donors: list[Alloc],
    plan: dict[str, int],
    need_gpus: int,
    release: frozenset[int] = frozenset(),
) -> bool:
    """Shrink `donors` by what `plan` says (their devices on the nodes `release` first) and
    place `job` at `need_gpus`; False, with everything rolled back, when it does not fit."""
    stmt = cycle.stmt
    cp = stmt.checkpoint()
    epoch = cycle.state.epoch
    for a in donors:
        give = plan.get(a.job.id, 0)
        if give:
            reason = f"shrunk {a.gpus} -> {a.gpus - give}: job {job.id} needs the GPUs"
            shrink(cycle, a, a.gpus - give, reason, release)
    if cycle.try_place_held(job.with_gpus(need_gpus), "resize"):  # its reservation: spent
        return True
    stmt.rollback(cp)
    cycle.restore_epoch(epoch)
    return False


def _plan(
    cycle: Cycle,
    job: Job,
    usable: list[Alloc],
    need: int,
    fair: int,
    model_of: Callable[[Job], GoodputModel],
) -> dict[str, int]:
    """GPUs each donor gives so that `need` more are free: first what donors hold above their
    fair share, the lowest rebalance weight (`rebalance.weight`: the most work left) first
    when every donor says what it has left, else the most above their share first, then
    down to their minimum, from donors already giving first (one restart each). A
    donor of another queue gives only what its queue holds above its guarantee, unless
    `job`'s own queue is owed its guarantee."""
    queues = cycle.queues
    qi = queues.index[job.queue]
    owed = queues.within_guaranteed(qi, job.gpus) < 0
    by_queue: dict[int, int] = {}
    plan: dict[str, int] = {}
    got = 0
    known = all(reports_left(a.job) for a in usable)  # not LAS's guess (Philly: 2% worse)
    worth = {a.job.id: weight(a.job, model_of(a.job).goodput(1, 1)) for a in usable if known}
    rank = (lambda a: worth[a.job.id]) if known else (lambda a: fair - a.gpus)
    order = sorted(usable, key=lambda a: (a.gpus <= fair, rank(a), -a.gpus, a.job.id))
    for floor in (fair, 0):
        if floor == 0:
            order.sort(key=lambda a: a.job.id not in plan)
        for a in order:
            if got >= need:
                return plan
            lo, _hi = a.job.size_range
            give = a.gpus - plan.get(a.job.id, 0) - max(lo, floor)
            if a.queue != qi and not owed:
                give = min(give, queues.over_guaranteed(a.queue) - by_queue.get(a.queue, 0))
            give = min(give, need - got)
            if give > 0:
                plan[a.job.id] = plan.get(a.job.id, 0) + give
                by_queue[a.queue] = by_queue.get(a.queue, 0) + give
                got += give
    return plan if got >= need else {}
