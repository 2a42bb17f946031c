"""What a rebalance move carries (`actions/resize.py`, pass 3; `actions/rebalance.py` sets the
targets): the GPUs the shrinking jobs give (`shrinks_for`, and `fewest_shrinks`: from one job
when that delays the move less), the horizon a move must repay its restarts over
(`move_horizon`), a move's weighted delay (`weighted_delay`: `rebalance.move_delay` over its
growing and shrinking jobs) and, of a move that repays its
restarts as a whole, the growing jobs each of which repays its own (`each_repays`)."""

from __future__ import annotations

import math

from trainyard.core.actions.rebalance import Entry, move_delay, reports_left
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


def move_horizon(cycle: Cycle, entries: list[Entry], c: int) -> float:
    """Seconds over which a move of `entries` (device class `c`) must repay its restarts:
    `Profile.resize_horizon_s`, or, when every job being rebalanced says how much work it has
    left, how long the class's allocation has lasted if that is longer. A move pays until
    the next arrival or restart changes the allocation; the time since the latest (re)start
    of a job on the class's GPUs or submission of a job asking for GPUs is the measure of that
    at hand (a split left unchanged for an hour is expected to last: judged over five minutes
    a 15 / 1 split of two like jobs was kept for as long as they ran; outside review 14, F7),
    capped at the earliest known end of a job on the class (a change already expected).
    Jobs weighed by their attained service keep the fixed horizon: their targets drift as
    they are served (the less served job takes the GPUs, overtakes the other and the ranks
    flip), so an allocation's age says nothing of how long a move's targets hold, and over
    a long horizon two like jobs swapped sizes every 14 minutes (outside review 16, F1)."""
    horizon = cycle.profile.resize_horizon_s
    if not all(reports_left(e.alloc.job) for e in entries):
        return horizon
    now = cycle.now
    last = max((j.submit_time for j in cycle.snapshot.pending if j.gpus > 0), default=-math.inf)
    end = math.inf
    for a in cycle.state.allocs.values():
        if a.cls == c and a.gpus > 0:
            last = max(last, a.started_at)
            if a.expected_end is not None and a.expected_end > now:
                end = min(end, a.expected_end)
    if not math.isfinite(last) or last > now:
        return horizon
    return max(horizon, min(now - last, end - now))


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
    while len(growers) > 1 and not growers[-1][1].owed:  # an owed growth stays
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
