"""The resize action: elastic jobs start at any size in their range, shrink to make room for
waiting jobs and grow into idle GPUs, by goodput (`core.goodput`).

Only jobs with a size range (`Job.min_gpus < Job.max_gpus`, `Job.is_elastic`) are resized;
rigid jobs are never touched, and the action costs nothing on a cluster without elastic jobs.
Every change goes through the cycle's `Statement` (`Statement.resize` takes a running job off
its devices, its new placement is then allocated, or the whole change is rolled back), and
every resize carries its reason. Four passes, in this order:

1. **Start smaller.** A waiting elastic job that did not fit at its requested size starts at
   the largest size in its range that fits now (a placement of action ``resize``).
2. **Shrink for waiting jobs.** A job still waiting for capacity (rigid, or elastic at its
   minimum) gets GPUs from running elastic jobs, which shrink in place (they keep a subset
   of their devices). Donors first give what they hold above their fair share (cluster
   GPUs / jobs running or waiting): the ones the rebalance values least first (the most
   work left) when every donor says what it has left, else the most above their share,
   so no job is shrunk below its fair share while another stays above it, and never below
   `min_gpus`. A donor's queue gives only what it holds above its guarantee, unless the
   waiting job is of the same queue or its own queue is owed its guarantee. The plan is kept
   only if the waiting job then fits.
3. **Rebalance.** The movable elastic jobs of each device class are moved towards the
   sizes that maximise their weighted speedups (`actions/rebalance.py`): a job that grew
   into a quiet cluster gives GPUs back to later jobs that gain more per GPU. A move is made
   only if it repays the restarts of every job it grows or shrinks within
   `Profile.resize_horizon_s`, and each job it grows repays its own (`actions/moves.py`).
4. **Grow into idle GPUs.** While GPUs are idle, the running elastic job with the largest
   gain in speedup per added GPU grows (to at most `EXPLORE` (4) times the largest size it
   has been measured at: the model is not trusted further from its data, and within its
   queues' limits), if the gain is at least `required_gain` (`Profile.resize_min_gain` of
   its goodput, more while another restart would cost a large share of the job's age,
   `Profile.resize_restart_s`, or of the time a job that ran larger has run at its size
   now: `regrow_gain`, as in pass 3) and it has run `Profile.resize_hold_s` since its last
   (re)start (hysteresis: a resize costs a checkpoint and a relaunch). Growing only uses
   idle GPUs, and while a queue owed its guarantee has a job waiting, only its jobs grow.

A job already restarting at a new size in this cycle (`donors.restarting`: shrunk for a
waiting job) may be moved once more by the rebalance, anywhere in its range, at no further
restart (`Statement.resize`).

Without arrivals or completions nothing shrinks (no job waits for capacity that a shrink
could give) and growth stops when no GPU is idle, so resizes do not ping-pong.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Final

from trainyard.core.actions.donors import donors, restarting, shrink
from trainyard.core.actions.growth_notes import note_not_grown, regrow_gain, required_gain
from trainyard.core.actions.moves import (
    each_repays,
    fewest_shrinks,
    move_horizon,
    shrinks_for,
    weighted_delay,
)
from trainyard.core.actions.rebalance import (
    DEFAULT_SPEEDUP_EXPONENT,
    Entry,
    guarantee_floors,
    plan_targets,
    queue_factors,
    queue_shares,
    rank_weights,
    sizes_above,
    weight,
)
from trainyard.core.actions.shrinkplan import shrink_plan
from trainyard.core.cycle import CAPACITY_CODES, Cycle
from trainyard.core.framework import ACTIONS
from trainyard.core.goodput import GoodputModel, fit, packed_nodes
from trainyard.core.state import Alloc
from trainyard.core.types import Job

__all__ = ["ResizeState", "resize"]


@dataclass(slots=True)
class ResizeState:
    """Goodput models fitted in this cycle, by job id."""

    models: dict[str, GoodputModel] = field(default_factory=dict)
    per_node: int = 0  # GPUs of the largest node (for the nodes a packed gang spans)
    running_queues: list[int] | None = None  # the queues of running jobs (`_owed_whole`)


EXPLORE: Final = 4  # how far beyond its largest measured size a job's model is trusted


def _explored(job: Job) -> int:
    """The largest size a job may grow to now: `EXPLORE` times the largest it has been measured
    at (Pollux bounds its jobs at twice; with the model's network-sync slope and the per-GPU
    batch floor, four times measured better on the Pollux workloads), within `max_gpus`."""
    _lo, hi = job.size_range
    samples = job.elastic.samples if job.elastic is not None else ()
    seen = max((s.gpus for s in samples), default=job.gpus)
    return min(hi, max(EXPLORE * max(seen, job.gpus), 1))


def _model(rs: ResizeState, job: Job) -> GoodputModel:
    found = rs.models.get(job.id)
    if found is None:
        found = fit(job)
        rs.models[job.id] = found
    return found


def resize(cycle: Cycle) -> None:
    state = cycle.state
    running = [a for a in state.allocs.values() if a.queue >= 0 and a.job.is_elastic]
    waiting = cycle.pending_jobs()
    if not running and not any(j.is_elastic for j in waiting):
        return
    rs = cycle.state_of(ResizeState)
    if not rs.per_node:
        rs.per_node = max((n.gpus for n in cycle.snapshot.nodes), default=1)
    _start_smaller(cycle, waiting)
    _shrink_for_waiting(cycle)
    _rebalance(cycle, rs)
    _grow(cycle, rs)


# -- 1. start smaller ---------------------------------------------------------------------


def _start_smaller(cycle: Cycle, waiting: list[Job]) -> None:
    state = cycle.state
    own = {h.job.id: h.hold_id for h in cycle.holds}
    for job in waiting:
        if not job.is_elastic or job.id not in cycle.status:
            continue
        if cycle.status[job.id].code not in CAPACITY_CODES:
            continue
        if _owed_whole(cycle, job):
            continue  # its queue gets it back whole: shrinks below, else reclaim
        lo, _hi = job.size_range
        room = state.free_of(cycle.classes_of(job))
        held = state.allocs.get(own.get(job.id, ""))
        if held is not None:  # its own reservation is not in its way
            room += held.gpus
        for k in range(min(job.gpus - 1, room), lo - 1, -1):
            if cycle.try_place_held(job.with_gpus(k), "resize"):
                break


def _owed_whole(cycle: Cycle, job: Job) -> bool:
    """Whether `job`'s queue is owed its guarantee for all of `job` and other queues hold at
    least the GPUs it lacks above their guarantees: then the shrinks (pass 2) or reclaim give
    it its whole size, and starting it smaller on the idle GPUs would leave its queue short
    for as long as it runs (outside review 14: a queue owed 8 ran its elastic job at 1)."""
    queues = cycle.queues
    qi = queues.index[job.queue]
    if queues.within_guaranteed(qi, job.gpus) >= 0:
        return False
    short = job.gpus - cycle.state.free_of(cycle.classes_of(job))
    if short <= 0:
        return False  # it fits whole as it is
    rs = cycle.state_of(ResizeState)
    if rs.running_queues is None:  # the queues of running jobs, once a cycle
        rs.running_queues = sorted({a.queue for a in cycle.state.allocs.values() if a.queue >= 0})
    mine = queues.path[qi]
    lendable = 0
    for q in rs.running_queues:
        if q not in mine and (over := queues.over_guaranteed(q)) > 0:
            lendable += over
            if lendable >= short:
                return True
    return False


# -- 2. shrink for waiting jobs -----------------------------------------------------------


def _shrink_for_waiting(cycle: Cycle) -> None:
    status = cycle.status
    waiting = [
        j
        for j in cycle.pending_jobs()
        if j.gpus and j.id in status and status[j.id].code in CAPACITY_CODES
    ]
    if not waiting:
        return
    givers = donors(cycle)
    holding = {h.job.id for h in cycle.holds}  # their own reservation is not in their way
    if not givers and not holding:
        return
    active = sum(1 for a in cycle.state.allocs.values() if a.queue >= 0) + len(waiting)
    fair = max(1, sum(cycle.layout.class_capacity) // max(1, active))
    stmt = cycle.stmt
    rs = cycle.state_of(ResizeState)
    model_of = partial(_model, rs)
    spare = sum(a.gpus - a.job.size_range[0] for a in givers)  # all donors could give
    failed: dict[tuple[object, ...], int] = {}  # shape -> fewest GPUs no plan could free
    for job in waiting:
        if job.id not in status:
            continue  # placed meanwhile
        need = job.size_range[0] if job.is_elastic else job.gpus
        own = job.id in holding  # donors on its own reservation too: judged apart
        if not own and need > spare + cycle.state.free_of(cycle.classes_of(job)):
            continue  # the donors together cannot free enough
        key = (cycle.shape(job), cycle.state.epoch)
        if not own and need >= failed.get(key, 1 << 30):
            continue
        classes = set(cycle.classes_of(job))
        mine = donors(cycle, job.id) if own else givers
        usable = [a for a in mine if a.cls in classes and a.job.id not in stmt.resized]
        whole = job.is_elastic and job.gpus > job.size_range[0] and _owed_whole(cycle, job)
        plan = shrink_plan(cycle, job, usable, fair, whole, model_of, rs.per_node) if usable else {}
        if plan:  # the donors it shrank are resized now: they give no more to waiting jobs
            spare -= sum(a.gpus - a.job.size_range[0] for a in usable if a.job.id in plan)
        elif not own:
            failed[key] = min(failed.get(key, 1 << 30), need)


# -- 3. rebalance (actions/rebalance.py) -------------------------------------------------


def _unstarted(cycle: Cycle, a: Alloc) -> bool:
    """Placed in this cycle and not resized since: a job that has not started, so another
    size costs it no restart and it starts at least as placed (a job placed on its new size
    after a resize is `restarting` instead, free to move anywhere in its range)."""
    return a.placed_now and a.job.id not in cycle.stmt.resized


def _rebalance(cycle: Cycle, rs: ResizeState) -> None:
    if _owed(cycle):
        return  # reclaim acts first
    state = cycle.state
    hold = cycle.profile.resize_hold_s
    stmt = cycle.stmt
    by_cls: dict[int, list[Alloc]] = {}
    for a in donors(cycle):
        if cycle.now - a.started_at >= hold:
            by_cls.setdefault(a.cls, []).append(a)
    for a in state.allocs.values():  # started in this cycle: it may still start larger
        if _unstarted(cycle, a) and a.job.id in stmt.placed and a.job.is_elastic:
            by_cls.setdefault(a.cls, []).append(a)
    for a in restarting(cycle):  # restarting anyway: any size in its range, no restart more
        by_cls.setdefault(a.cls, []).append(a)
    for c, allocs in sorted(by_cls.items()):
        if len(allocs) < 2:
            continue  # one job alone: growth (below) is all there is
        entries = []
        for a in allocs:
            lo, _hi = a.job.size_range
            if _unstarted(cycle, a):
                lo = a.gpus  # not shrunk: it starts at least as placed
            m = _model(rs, a.job)
            one = m.goodput(1, 1)
            if one > 0.0:
                hi = min(max(a.gpus, _explored(a.job)), a.gpus + cycle.queues.limit_room(a.queue))
                entries.append(Entry(a, lo, hi, weight(a.job, one), m, one))
        queue_shares(entries, cycle.queues, rank_weights(entries, rs.per_node))
        guarantee_floors(entries, cycle.queues)
        plan_targets(entries, state.class_free[c], rs.per_node)
        _move(cycle, rs, entries, c)


def _move(cycle: Cycle, rs: ResizeState, entries: list[Entry], c: int) -> None:
    """Move jobs towards their targets where it is worth a restart (module docstring of
    `actions/rebalance.py`)."""
    prof = cycle.profile
    per_node = rs.per_node
    growers: list[tuple[float, Entry]] = []
    for e in entries:
        a = e.alloc
        if e.target > a.gpus:
            now_gp = e.model.goodput(a.gpus, len(a.parts))
            new_gp = e.model.goodput(e.target, packed_nodes(e.target, per_node))
            least = prof.resize_min_gain
            if not e.owed and not _unstarted(cycle, a) and a.job.id not in cycle.stmt.resized:
                least = max(least, regrow_gain(cycle, a))  # as into idle GPUs (review 18, F1)
            if now_gp > 0.0 and new_gp >= now_gp * (1.0 + least):
                growers.append((new_gp / now_gp - 1.0, e))
    if not growers:
        return
    # largest gain first, a growth its queue's guarantee owes before all (dropped last)
    growers.sort(key=lambda t: (not t[1].owed, -t[0], t[1].alloc.job.id))

    def loss(e: Entry) -> float:
        k = e.alloc.gpus
        return e.weight * (e.inverse(e.target, per_node) - e.inverse(k, per_node)) / (k - e.target)

    shrinkers = sorted(
        (e for e in entries if e.target < e.alloc.gpus), key=lambda e: (loss(e), e.alloc.job.id)
    )
    free = cycle.state.class_free[c]
    grow_q = {e.alloc.queue for _g, e in growers}
    need = sum(e.target - e.alloc.gpus for _g, e in growers) - free
    plan = shrinks_for(cycle, shrinkers, need, grow_q) if need > 0 else []
    got = sum(g for _e, g in plan)
    while growers and need > got:  # what cannot be freed: the smallest gains wait
        _gain, e = growers.pop()
        need -= e.target - e.alloc.gpus
    if not growers:
        return
    plan = shrinks_for(cycle, shrinkers, need, grow_q) if need > 0 else []
    if prof.resize_horizon_s > 0.0:  # the move must repay its restarts (an owed one need not)
        horizon = move_horizon(cycle, entries, c)
        while (
            growers
            and not growers[-1][1].owed
            and weighted_delay(cycle, per_node, horizon, growers, plan) >= 0.0
        ):
            _gain, e = growers.pop()
            need -= e.target - e.alloc.gpus
            plan = shrinks_for(cycle, shrinkers, need, grow_q) if need > 0 else []
        if not growers:
            return
        growers, plan = each_repays(
            cycle, per_node, horizon, growers, shrinkers, need, grow_q, plan
        )
        plan = fewest_shrinks(cycle, per_node, horizon, growers, shrinkers, grow_q, plan)
    stmt = cycle.stmt
    state = cycle.state
    cp = stmt.checkpoint()
    epoch = state.epoch
    to = ", ".join(sorted(e.alloc.job.id for _g, e in growers)[:3])
    owed_q = ", ".join(sorted({cycle.queues.name(e.alloc.queue) for _g, e in growers if e.owed}))
    why = f"(queue {owed_q} reclaims its guarantee)" if owed_q else "(more goodput per GPU)"
    for e, give in plan:
        a = e.alloc
        reason = f"shrunk {a.gpus} -> {a.gpus - give}: rebalanced to {to} {why}"
        shrink(cycle, a, a.gpus - give, reason)
    grown = 0
    for gain, e in growers:
        a = e.alloc
        before = stmt.resized.get(a.job.id)
        if before is not None and before.alloc.gpus == e.target:
            continue  # back to the size it ran at: a restart for nothing
        g_cp = stmt.checkpoint()
        g_epoch = state.epoch
        if _unstarted(cycle, a):  # not started yet: placed again
            stmt.release(a.job.id)
        else:  # restarted, or already restarting (still one restart)
            reason = f"grown {a.gpus} -> {e.target}: +{gain:.0%} goodput (rebalanced)"
            if e.owed:
                reason += f"; queue {cycle.queues.name(a.queue)} reclaims its guarantee"
            stmt.resize(a.job.id, reason)
        if cycle.try_place(a.job.with_gpus(e.target), "resize"):
            grown += 1
        else:
            stmt.rollback(g_cp)
            cycle.restore_epoch(g_epoch)
            cycle.status.pop(a.job.id, None)  # placed as before
    if not grown:
        stmt.rollback(cp)
        cycle.restore_epoch(epoch)


# -- 4. grow into idle GPUs ---------------------------------------------------------------


def _owed(cycle: Cycle) -> set[str]:
    """Queues owed their guarantee with a job waiting."""
    queues = cycle.queues
    return {
        j.queue
        for j in cycle.pending_jobs()
        if j.gpus and queues.within_guaranteed(queues.index[j.queue], j.gpus) < 0
    }


def _grow(cycle: Cycle, rs: ResizeState) -> None:
    state = cycle.state
    prof = cycle.profile
    stmt = cycle.stmt
    owed = _owed(cycle)
    unplaced: dict[str, int] = {}  # job -> the size it was tried at and did not fit
    ready = [
        a
        for a in donors(cycle)
        if cycle.now - a.started_at >= prof.resize_hold_s
        and a.gpus < a.job.size_range[1]
        and (not owed or a.job.queue in owed)  # reclaim would take it back at once
    ]
    factors = queue_factors([a.queue for a in ready], cycle.queues, DEFAULT_SPEEDUP_EXPONENT)
    while ready and any(state.class_free):
        best: tuple[float, Alloc, int, float] | None = None
        for a in ready:
            free = state.free_of(cycle.classes_of(a.job))
            room = cycle.queues.limit_room(a.queue)  # its queues' limits bound it too
            top = min(_explored(a.job), a.gpus + free, a.gpus + room)
            if top <= a.gpus:
                continue
            m = _model(rs, a.job)
            one = m.goodput(1, 1)
            now_gp = m.goodput(a.gpus, len(a.parts))
            need = max(required_gain(cycle, a.job), regrow_gain(cycle, a))
            for k in sizes_above(a.gpus, top, rs.per_node):
                gp = m.goodput(k, packed_nodes(k, rs.per_node))
                if now_gp > 0 and gp < now_gp * (1.0 + need):
                    continue
                per_gpu = (gp - now_gp) / (one if one > 0 else 1.0) / (k - a.gpus)
                per_gpu *= factors.get(a.queue, 1.0)
                if best is None or per_gpu > best[0]:
                    best = (per_gpu, a, k, gp / now_gp - 1.0 if now_gp > 0 else 1.0)
        if best is None:
            break
        _per_gpu, a, k, gain = best
        ready.remove(a)
        cp = stmt.checkpoint()
        epoch = state.epoch
        old = a.gpus
        stmt.resize(a.job.id, f"grown {old} -> {k}: +{gain:.0%} goodput from idle GPUs")
        if not cycle.try_place(a.job.with_gpus(k), "resize"):
            stmt.rollback(cp)
            cycle.restore_epoch(epoch)
            unplaced[a.job.id] = k
    if any(state.class_free):
        note_not_grown(cycle, owed, unplaced, lambda job: _model(rs, job), _explored, rs.per_node)


ACTIONS.register("resize", resize)
