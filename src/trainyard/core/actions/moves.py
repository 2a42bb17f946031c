"""What a rebalance move carries (`actions/resize.py`, pass 3; `actions/rebalance.py` sets the
targets): the GPUs the shrinking jobs give (`shrinks_for`, and `fewest_shrinks`: from one job
when that delays the move less), the horizon a move must repay its restarts over
(`move_horizon`), a move's weighted delay (`weighted_delay`: `rebalance.move_delay` over its
growing and shrinking jobs) and, of a move that repays its
restarts as a whole, the growing jobs each of which repays its own (`each_repays`)."""

from __future__ import annotations

import math

from trainyard.core.actions.rebalance import Entry, move_delay
from trainyard.core.cycle import Cycle

Growers = list[tuple[float, Entry]]  # (relative goodput gain, job), largest gain first
Shrinks = list[tuple[Entry, int]]  # (job, GPUs it gives)


def shrinks_for(cycle: Cycle, shrinkers: list[Entry], need: int, grow_q: set[int]) -> Shrinks:
    """GPUs each shrinking job gives so that `need` are freed (fewer if they cannot)."""
    queues = cycle.queues
    plan: Shrinks = []
    by_queue: dict[int, int] = {}
    got = 0
    for e in shrinkers:
        if got >= need:
            break
        a = e.alloc
        give = min(a.gpus - e.target, need - got)
        if grow_q != {a.queue}:
            give = min(give, queues.over_guaranteed(a.queue) - by_queue.get(a.queue, 0))
        if give > 0:
            plan.append((e, give))
            by_queue[a.queue] = by_queue.get(a.queue, 0) + give
            got += give
    return plan


def move_horizon(cycle: Cycle) -> float:
    """Seconds over which a move must repay its restarts: `Profile.resize_horizon_s`, or the
    time since the cluster last changed when that is longer. A move pays until the next
    arrival or restart changes the allocation again; how long the present allocation has
    lasted (since the latest job's (re)start or submission) is the measure of that at hand:
    a split left unchanged for an hour is expected to last, and judging it over five minutes
    kept it for as long as both jobs ran (outside review 14, F7)."""
    last = max((j.submit_time for j in cycle.snapshot.pending), default=-math.inf)
    for a in cycle.state.allocs.values():
        last = max(last, a.started_at)
    horizon = cycle.profile.resize_horizon_s
    return max(horizon, cycle.now - last) if math.isfinite(last) else horizon


def weighted_delay(
    cycle: Cycle, per_node: int, horizon: float, growers: Growers, plan: Shrinks
) -> float:
    """`rebalance.move_delay` of growing `growers` to their targets and shrinking by `plan`,
    over `horizon` seconds (`move_horizon`)."""
    moves = [(e, e.target) for _g, e in growers]
    moves += [(e, e.alloc.gpus - give) for e, give in plan]
    return move_delay(moves, per_node, cycle.now, cycle.profile.resize_restart_s, horizon)


def each_repays(
    cycle: Cycle,
    per_node: int,
    horizon: float,
    growers: Growers,
    shrinkers: list[Entry],
    need: int,
    grow_q: set[int],
    plan: Shrinks,
) -> tuple[Growers, Shrinks]:
    """`growers` and the shrinks they need, less each growing job, smallest gain first, that
    the move is no worse without. A move that repays its restarts as a whole may carry a job
    whose gain does not repay its own restart and the shrinks made for it, paid for by the
    other jobs' gains: each restart must pay for itself. `need`: the GPUs the shrinks must free
    (the growth beyond the idle GPUs)."""
    now = weighted_delay(cycle, per_node, horizon, growers, plan)
    while len(growers) > 1:
        last = growers[-1][1]
        less = need - (last.target - last.alloc.gpus)
        fewer = shrinks_for(cycle, shrinkers, less, grow_q) if less > 0 else []
        without = weighted_delay(cycle, per_node, horizon, growers[:-1], fewer)
        if without > now:
            break
        growers, need, plan, now = growers[:-1], less, fewer, without
    return growers, plan


def fewest_shrinks(
    cycle: Cycle, per_node: int, horizon: float, growers: Growers, shrinkers: list[Entry],
    grow_q: set[int], plan: Shrinks,
) -> Shrinks:  # fmt: skip
    """`plan`, or one job giving all the GPUs `plan` frees when that delays the move less.
    `shrinks_for` takes the cheapest loss per GPU first, which does not count that every job
    shrunk restarts: two jobs giving a GPU each cost two restarts where one giving both costs
    one. A job gives only what `shrinks_for` would let it (down to its target, and above its
    queue's guarantee unless the growing jobs are all of its queue)."""
    if len(plan) < 2:
        return plan
    n = sum(g for _e, g in plan)
    best, out = weighted_delay(cycle, per_node, horizon, growers, plan), plan
    for e in shrinkers:
        one = shrinks_for(cycle, [e], n, grow_q)  # its target and queue's guarantee allowing
        if one and one[0][1] == n:
            d = weighted_delay(cycle, per_node, horizon, growers, one)
            if d < best:
                best, out = d, one
    return out
