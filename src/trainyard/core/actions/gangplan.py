"""Victims for a gang that spans nodes: clear whole nodes, as few as possible.

The greedy plan of `victims.py` takes the cheapest victims anywhere in a domain until the
shortfall is covered; for a gang larger than a node that scatters the room it makes (6 free
GPUs on each of 8 nodes for a 48-GPU gang), and the gang then spans every node it touched.
`node_plan` instead picks the nodes that can give the most GPUs (free plus held by eligible
victims), largest first and cheapest among equals, until the gang fits, and frees on each
only what the gang will take there: all of it on every node but the last, the remainder on
the last. Victims are still whole jobs (a victim with parts on other nodes frees those too).
`victims.py` tries this plan next to the greedy one and keeps the one that lets the gang span
the fewest nodes, then evicts the fewest GPUs on the fewest nodes. A gang of exactly N nodes
(`Job.nodes`) takes `gpus / N` on each: the plan picks the N nodes that need the fewest GPUs
freed to give that much (then the most obtainable, then the lowest index).
"""

from __future__ import annotations

from collections.abc import Callable

from trainyard.core.cycle import Cycle
from trainyard.core.state import Alloc
from trainyard.core.topology import Layout

CostKey = Callable[[Alloc], tuple[float, ...]]
Plan = Callable[[int, list[tuple[int, Alloc]], CostKey], list[Alloc]]


def nodes_in(layout: Layout, level: int, d: int) -> list[int]:
    """The nodes of domain `d` at `level` (-1: the whole cluster)."""
    if level < 0:
        return list(range(len(layout.nodes)))
    out: list[int] = []
    stack = [(level, d)]
    last = layout.depth - 1
    while stack:
        lv, dom = stack.pop()
        kids = layout.children[lv][dom]
        if lv == last:
            out.extend(kids)
        else:
            stack.extend((lv + 1, k) for k in kids)
    return sorted(out)


def node_plan(
    cycle: Cycle,
    c: int,
    nodes: list[int],
    per_node: dict[int, list[tuple[int, Alloc]]],
    g: int,
    cost: CostKey,
    plan: Plan,
    count: int = 0,
) -> list[Alloc]:
    """Victims that clear whole nodes of class `c` among `nodes` for a gang of `g` GPUs
    (`per_node`: node -> (GPUs there, victim); `plan` chooses victims inside one node);
    `count` >= 2: a gang of exactly that many nodes (see the module docstring)."""
    state = cycle.state
    layout = cycle.layout
    per = g // count if count > 1 else 0
    caps: list[tuple[int, int, int]] = []  # (-GPUs obtainable, GPUs to evict, node)
    for n in nodes:
        if layout.class_of_node[n] != c:
            continue
        held = sum(k for k, _a in per_node.get(n, ()))
        cap = state.free_cnt[n] + held
        if cap and cap >= per:
            caps.append((-cap, held, n))
    chosen: list[tuple[int, int]] = []  # (node, GPUs the gang takes there)
    if per:
        if len(caps) < count:
            return []
        caps.sort(key=lambda t: (max(0, per - state.free_cnt[t[2]]), t))
        chosen = [(n, per) for _neg, _held, n in caps[:count]]
    else:
        caps.sort()
        got = 0
        for neg, _held, n in caps:
            take = min(-neg, g - got)
            chosen.append((n, take))
            got += take
            if got >= g:
                break
        if got < g:
            return []
    out: list[Alloc] = []
    seen: set[str] = set()
    for n, take in chosen:
        need = take - state.free_cnt[n]
        if need <= 0:
            continue
        here = [(k, a) for k, a in per_node.get(n, ()) if a.job.id not in seen]
        freed = sum(k for k, a in per_node.get(n, ()) if a.job.id in seen)
        if need - freed <= 0:
            continue
        picked = plan(need - freed, here, cost)
        if not picked:
            return []
        for a in picked:
            seen.add(a.job.id)
            out.append(a)
    return out
