"""Victim selection shared by reclaim and preempt: whole jobs, fewest GPUs, where it counts.

For a preemptor that does not fit, `evict_for` looks for the cheapest set of eligible running
jobs whose eviction lets it fit, *in the place it will then use*:

1. Domains are tried from the tightest level the job could use (one node, then a leaf
   switch, ..., then the whole cluster). At a level, a domain qualifies when its free GPUs plus
   the GPUs eligible victims hold inside it reach the request.
2. In the qualifying domains with the smallest shortfall (at most 32 per level, so that a
   cluster of thousands of nodes costs no more than a small one) a victim set is chosen
   greedily: a single victim that covers the shortfall if one exists (a retractable one
   first, then by the action's preference but the start time: the lowest priority, the
   most served, a queue kept within its guarantee; then the smallest, then the cheapest:
   outside review 14 saw a priority-10 job stopped to keep a priority-0 one running),
   otherwise the cheapest victims in order
   until the shortfall is covered; then victims that turn out unnecessary are dropped.
3. Each plan is tried on the statement: evict, place the preemptor, and keep the plan only if
   it fits; otherwise roll back. Among plans that fit at the tightest level the one evicting
   the fewest GPUs (then lowest priorities) wins, and only it is committed.

Victims are whole gangs, never inside their `min_runtime`; the caller's predicate adds the
action's own rules (queue over quota, lower priority). A job placed earlier in this cycle by
allocate or backfill has not started yet: it may be *retracted* (back to pending, nothing to
stop), which costs nothing and is preferred; a preemptor placed by reclaim or preempt never is
(the pool of candidates is fixed before the first eviction of the cycle). Devices freed inside
a backfill reservation's target are held again before the preemptor is placed, so evictions
never hand a reservation's devices to someone else. A plan is committed only if the
preemptor then fits, so nothing is evicted for a job that could not start.

`VictimsState` (`Cycle.state_of`) keeps that fixed pool, per queue, for all the evicting
actions of a cycle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from trainyard.core.actions.backfill import lift_holds, restore_holds
from trainyard.core.actions.gangplan import CostKey, node_plan, nodes_in
from trainyard.core.actions.protected import note_protection
from trainyard.core.cycle import Cycle, Status
from trainyard.core.state import Alloc
from trainyard.core.types import ActionName, Job

# may a victim join the plan, given the GPUs already taken from each queue?
Admit = Callable[[Alloc, dict[int, int]], bool]

_DOMAINS_PLANNED: Final = 32  # qualifying domains planned per level, smallest shortfall first
_DOMAINS_TRIED: Final = 6  # planned domains tried on the statement per level, cheapest plan first


@dataclass(slots=True)
class VictimsState:
    """This module's own state in one cycle: the evictable running jobs per queue, lowest
    priority first, listed before the cycle's first eviction (None until then)."""

    by_queue: dict[int, list[Alloc]] | None = None
    # node -> domain id at the node level (identity) and at the cluster level (all 0)
    node_ids: list[int] | None = None
    no_domain: list[int] | None = None


def eligible(cycle: Cycle, alloc: Alloc) -> bool:
    """Rules common to every eviction. A job placed earlier in this cycle has not started:
    taking it back costs nothing (it is retracted, not evicted), so it is eligible too; a
    job resized in this cycle is not (it runs: its resize stands)."""
    job = alloc.job
    if alloc.queue < 0 or not job.preemptible:
        return False
    if alloc.placed_now and job.id in cycle.stmt.resized:
        return False  # a running job restarted at another size in this cycle: not retractable
    return alloc.placed_now or cycle.now - alloc.started_at >= job.min_runtime


def _domain_map(cycle: Cycle, level: int) -> list[int]:
    """Node -> domain id at `level` (identity for nodes; 0 for the whole cluster)."""
    layout = cycle.layout
    if 0 <= level < layout.depth:
        return layout.domain_of[level]
    st = cycle.state_of(VictimsState)
    if level >= layout.depth:
        if st.node_ids is None:
            st.node_ids = list(range(len(layout.nodes)))
        return st.node_ids
    if st.no_domain is None:
        st.no_domain = [0] * len(layout.nodes)
    return st.no_domain


def _merge(entries: list[tuple[int, Alloc]]) -> list[tuple[int, Alloc]]:
    """One (GPUs inside the domain, victim) per victim (a gang may have several parts)."""
    if len(entries) < 2:
        return entries
    seen: dict[str, tuple[int, Alloc]] = {}
    for k, a in entries:
        jid = a.job.id
        prev = seen.get(jid)
        seen[jid] = (k + prev[0], a) if prev is not None else (k, a)
    return list(seen.values())


def _free_in(cycle: Cycle, c: int, level: int, d: int) -> int:
    state = cycle.state
    if level >= cycle.layout.depth:
        return state.free_cnt[d] if cycle.layout.class_of_node[d] == c else 0
    if level < 0:
        return state.class_free[c]
    return state.dom_free[level][c][d]


def _price(plan: list[Alloc], cost: CostKey) -> tuple[float, ...]:
    """What a plan costs: GPUs evicted (started work stopped), GPUs retracted (placements of
    this cycle undone), the victims' first cost terms summed (priority, or LAS level), the
    number of victims, then the victims' cost keys themselves, cheapest first: so between
    equal plans in two domains the action's own preference decides (for one victim each:
    the lowest priority, then the most recently started)."""
    evicted = sum(a.gpus for a in plan if not a.placed_now)
    retracted = sum(a.gpus for a in plan if a.placed_now)
    keys = sorted(cost(a) for a in plan)
    flat = [v for key in keys for v in key]
    first = sum(key[1] for key in keys if len(key) > 1)
    return (float(evicted), float(retracted), first, float(len(plan)), *flat)


def _plan(
    need: int, victims: list[tuple[int, Alloc]], cost: CostKey, admit: Admit | None = None
) -> list[Alloc]:
    """Victims covering `need` GPUs (credit = their GPUs inside the domain), minimal.
    `admit`, if given, says whether a victim may join those already taken (GPUs per queue,
    which it updates for a victim it admits): a reclaim may take only so much from each
    lender, so a plan that the live check would refuse halfway is not built."""
    single = [
        (cost(a)[:-1], a.gpus, cost(a), a.job.id, a)
        for credit, a in victims
        if credit >= need and (admit is None or admit(a, {}))
    ]
    if single:  # the action's preference but its last term (the start), then fewest GPUs
        return [min(single, key=lambda t: t[:4])[4]]
    chosen: list[tuple[int, Alloc]] = []
    got = 0
    taken: dict[int, int] = {}
    for credit, a in sorted(victims, key=lambda ca: (cost(ca[1]), ca[1].job.id)):
        if admit is not None and not admit(a, taken):
            continue
        chosen.append((credit, a))
        got += credit
        if got >= need:
            break
    if got < need:
        return []
    for item in sorted(chosen, key=lambda ca: -ca[1].gpus):  # drop what is not needed
        if got - item[0] >= need:
            chosen.remove(item)
            got -= item[0]
    return [a for _c, a in chosen]


def _try(
    cycle: Cycle,
    job: Job,
    plan: list[Alloc],
    action: ActionName,
    reason: str,
    allowed: Callable[[Alloc], bool],
) -> bool:
    """Evict `plan` (in order, re-checking `allowed`) and place `job`; True if it fits.
    Victims placed earlier in this cycle are retracted (no eviction is recorded)."""
    evicted = []
    for a in plan:
        if not allowed(a):
            return False
        jid = a.job.id
        if a.placed_now:
            cycle.stmt.release(jid)
            cycle.status[jid] = Status("capacity")
            cycle.resettle = True  # it may fit elsewhere: `_settle` tries it again
            cycle.retracted.append(a.job)  # and it may evict in turn (`then_retracted`)
        else:
            cycle.stmt.evict(jid, action, job.id, reason)
            evicted.append(jid)
    cycle.refresh_holds(skip=job.id)
    return cycle.try_place(job, action, tuple(evicted))


def by_queue(cycle: Cycle) -> dict[int, list[Alloc]]:
    """Running jobs that may be evicted at all in this cycle, per queue (computed once; jobs
    evicted or resized since are filtered out by the caller: `cycle.state.allocs` no longer
    holds them)."""
    st = cycle.state_of(VictimsState)
    cached = st.by_queue
    if cached is None:
        cached = {}
        for a in cycle.state.allocs.values():
            if eligible(cycle, a):
                cached.setdefault(a.queue, []).append(a)
        for allocs in cached.values():  # lowest priority first: preempt takes a prefix
            allocs.sort(key=lambda a: a.job.priority)
        st.by_queue = cached
    return cached


def evict_for(
    cycle: Cycle,
    job: Job,
    action: ActionName,
    budgets: dict[int, int],
    allowed: Callable[[Alloc], bool],
    cost: CostKey,
    reason: str,
    below_priority: int | None = None,
    prefilter: Callable[[Alloc], bool] | None = None,
    candidates: list[Alloc] | None = None,
    admit: Admit | None = None,
) -> bool:
    """Evict the cheapest victims that let `job` fit and place it; False changes nothing.

    `budgets` maps each queue victims may come from to the most GPUs one victim of it may
    hold (a cheap filter computed once per call); `below_priority`, if given, keeps only
    victims of a lower priority; `prefilter`, if given, is a rule that does not change during
    the call (checked once per candidate victim); `candidates`, if given, replaces the
    victims `by_queue` lists for the budgets' queues (a caller that keeps its own index);
    `allowed` is the exact rule, checked on the live state before each eviction of a plan
    (earlier victims of the plan may have used up a queue's budget); `admit`, if given, is
    that rule for a plan being built (see `_plan`)."""
    state = cycle.state
    classes = cycle.classes_of(job)
    g = job.gpus
    if g == 0 or not classes:
        return False
    allocs = state.allocs
    pool = []
    if candidates is not None:
        for a in candidates:
            budget = budgets.get(a.queue, 0)
            if 0 < a.gpus <= budget and a.cls in classes and allocs.get(a.job.id) is a:
                pool.append(a)
    else:
        per_queue = by_queue(cycle)
        for vq, budget in budgets.items():
            for a in per_queue.get(vq, ()):
                if below_priority is not None and a.job.priority >= below_priority:
                    break  # sorted by priority: the rest is no lower
                usable = 0 < a.gpus <= budget and a.cls in classes and allocs.get(a.job.id) is a
                if usable and (prefilter is None or prefilter(a)):
                    pool.append(a)
    if not pool:
        note_protection(cycle, job, budgets, allowed, pool, below_priority)
        return False
    epoch = state.epoch
    saved = lift_holds(cycle, job)  # its own reservation (and others a guarantee outranks)
    placed = any(
        state.class_free[c] + sum(a.gpus for a in pool if a.cls == c) >= g for c in classes
    ) and _evict_at_levels(
        cycle, job, action, pool, _levels(cycle, job), allowed, cost, reason, admit
    )
    lifted = len(saved) != len(cycle.holds)
    restore_holds(cycle, job, saved, placed)
    if lifted and not placed:
        cycle.restore_epoch(epoch)
    if not placed:
        note_protection(cycle, job, budgets, allowed, pool, below_priority)
    return placed


def _levels(cycle: Cycle, job: Job) -> list[int]:
    """Levels at which to look for room, tightest first (depth = one node, -1 = cluster)."""
    layout = cycle.layout
    g = job.gpus
    classes = cycle.classes_of(job)
    max_level = cycle.max_level(job)
    fits_node = job.nodes <= 1 and any(g <= layout.class_node_max[c] for c in classes)
    levels = [layout.depth] if fits_node else []
    if job.topology not in ("node", "island") and job.nodes != 1:
        levels += list(range(layout.depth - 1, max_level - 1, -1))  # to -1, the cluster
    return levels


def _evict_at_levels(
    cycle: Cycle,
    job: Job,
    action: ActionName,
    pool: list[Alloc],
    levels: list[int],
    allowed: Callable[[Alloc], bool],
    cost: CostKey,
    reason: str,
    admit: Admit | None = None,
) -> bool:
    state = cycle.state
    g = job.gpus
    classes = cycle.classes_of(job)
    depth = cycle.layout.depth
    for level in levels:
        spans = level < depth  # a domain of several nodes: plan whole nodes too
        best: tuple[tuple[float, ...], list[Alloc]] | None = None  # (price, plan)
        for c in classes:
            credit: dict[int, list[tuple[int, Alloc]]] = {}
            total: dict[int, int] = {}
            per_node: dict[int, list[tuple[int, Alloc]]] = {}
            domain_of = _domain_map(cycle, level)
            usable = cycle.layout.usable_mask
            for a in pool:
                if a.cls != c:
                    continue
                for part in a.parts:
                    n = part[0]
                    k = (part[1] & usable[n]).bit_count()  # a cordoned node's GPUs free nothing
                    if not k:
                        continue
                    d = domain_of[n]
                    entry = (k, a)
                    found = credit.get(d)
                    if found is None:
                        credit[d] = [entry]
                        total[d] = k
                    else:
                        found.append(entry)
                        total[d] += k
                    if spans:
                        here = per_node.get(n)
                        if here is None:
                            per_node[n] = [entry]
                        else:
                            here.append(entry)
            shortfall = []
            for d, held in total.items():
                free = _free_in(cycle, c, level, d)
                if free + held >= g:
                    shortfall.append((g - free, d))
            shortfall.sort()
            options = []
            for need, d in shortfall[:_DOMAINS_PLANNED]:  # the least to free first
                victims = _merge(credit[d])
                plan = _plan(need, victims, cost, admit)
                if plan:
                    options.append((_price(plan, cost), d, plan))
            options.sort(key=lambda o: (o[0], o[1]))
            tries = options[:_DOMAINS_TRIED]
            if spans:
                whole = []
                for _need, d in shortfall[:_DOMAINS_PLANNED]:
                    nodes = nodes_in(cycle.layout, level, d)
                    plan = node_plan(cycle, c, nodes, per_node, g, cost, _plan, job.nodes)
                    if plan:
                        whole.append((_price(plan, cost), d, plan))
                whole.sort(key=lambda o: (o[0], o[1]))
                tries = whole[:_DOMAINS_TRIED] + tries
            for estimate, _d, plan in tries:
                if not spans and best is not None and estimate >= best[0]:
                    break
                cp = cycle.stmt.checkpoint()
                epoch = state.epoch
                ok = _try(cycle, job, plan, action, reason, allowed)
                measured: tuple[float, ...] = estimate
                if ok and spans:
                    measured = _spread(cycle, job, plan) + estimate
                cycle.stmt.rollback(cp)
                cycle.restore_epoch(epoch)
                for a in plan:  # retracted placements are back: so is their "placed" state
                    if a.job.id in cycle.stmt.placed:
                        cycle.status.pop(a.job.id, None)
                if ok and (best is None or measured < best[0]):
                    best = (measured, plan)
        if best is not None:
            return _try(cycle, job, best[1], action, reason, allowed)
    return False


def _spread(cycle: Cycle, job: Job, plan: list[Alloc]) -> tuple[float, ...]:
    """(nodes the placed gang spans, GPUs evicted, nodes with an eviction): the first
    criteria of a plan for a gang that spans nodes (then `_price`)."""
    placed = cycle.stmt.placed[job.id].alloc
    evicted = [a for a in plan if not a.placed_now]
    where = {part[0] for a in evicted for part in a.parts}
    return (float(len(placed.parts)), float(sum(a.gpus for a in evicted)), float(len(where)))
