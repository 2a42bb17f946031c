"""When a running elastic job may grow into idle GPUs, and why it was not grown.

This module owns `required_gain` (the gain a restart of a running job must bring, the rule
the resize action's growth and rebalance apply), `regrow_gain` (what a growth of a job that
has run larger must bring, in both passes too) and the note the resize action leaves for
each running elastic job below its `max_gpus` that GPUs of its type are left idle for and
that it did not grow (`note_not_grown`, `core.NotGrown`: every resize carries its reason, and
so does the absence of one a user waits for; `trainyard describe` shows it). The note names
the first rule of the growth pass (`actions/resize.py`, pass 4) that held the job back:

- its `min_runtime` has not passed, or it was (re)started at its size less than
  `Profile.resize_hold_s` ago (with the time that lifts it);
- a queue owed its guarantee has jobs waiting, and only that queue's jobs grow;
- the size it was tried at found no placement on the idle GPUs;
- its goodput model predicts no gain, or less than `Profile.resize_min_gain`;
- the gain does not yet repay a restart over the time the job has run (`required_gain`),
  with the time it will: (age + c) / (age - R·c) - 1 <= g when age >= c·(1 + (1 + g)·R) / g,
  c the restart charge, R the restarts so far, g the gain;
- the job has run larger than now and the gain does not repay a restart within the time it
  has run at its size now (`regrow_gain`), with the time it will: its last start + c / g.
Where both restart rules hold it, the time is the later of the two.

A job that met every rule and still was not grown had the idle GPUs taken by jobs with more
gain per GPU; it gets no note. Pure: it reads the cycle and writes `Cycle.not_grown`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from trainyard.core.actions.donors import donors
from trainyard.core.actions.rebalance import sizes_above
from trainyard.core.cycle import Cycle
from trainyard.core.goodput import GoodputModel, packed_nodes
from trainyard.core.queues import QueueIndex
from trainyard.core.state import Alloc
from trainyard.core.types import Job, NotGrown

__all__ = ["note_not_grown", "regrow_gain", "required_gain"]


def required_gain(cycle: Cycle, job: Job) -> float:
    """The relative goodput gain a move of running `job` must bring: `resize_min_gain`, or
    more while a restart would cost a large share of what the job has run (Profile
    `resize_restart_s`)."""
    prof = cycle.profile
    c = prof.resize_restart_s
    if c <= 0.0:
        return prof.resize_min_gain
    age = cycle.now - job.submit_time
    done = age - job.restarts * c
    if done <= 0.0:
        return math.inf
    return max(prof.resize_min_gain, (age + c) / done - 1.0)


def regrow_gain(cycle: Cycle, a: Alloc) -> float:
    """The relative gain a growth of `a` must bring when its job has run larger than it runs
    now (a step sample at more GPUs: it was shrunk, or restarted smaller): enough to repay a
    restart (`resize_restart_s`) within the time it has run at its size now. A job shrunk
    for each short arrival was grown back as each one ended, two restarts every arrival for
    +11% (outside review 14, F8): the GPUs it grows into are as likely to be asked for again
    as soon as it lost them last. Not while its queue is below its guarantee and a queue
    beside it (or beside one of its ancestors) borrows beyond its own: that queue's next
    arrival would take the idle GPUs for good, nothing waiting to reclaim them (outside
    review 18, F5); beside queues within their guarantees the rule holds, or a job shrunk
    for its own queue's short arrivals was grown back after each (review 19, F1). The
    rebalance asks the same of a growth that restarts a job."""
    c = cycle.profile.resize_restart_s
    if c <= 0.0 or a.gpus >= _largest_run(a.job):
        return 0.0
    queues = cycle.queues
    if queues.within_guaranteed(a.queue, 1) < 0 and _borrowed_beside(queues, a.queue):
        return 0.0
    return c / max(cycle.now - a.started_at, 1e-9)


def _borrowed_beside(queues: QueueIndex, q: int) -> bool:
    """Does a sibling of `q` or of one of its ancestors hold more than its guarantee?"""
    for a in queues.path[q]:
        parent = queues.parent[a]
        for b in queues.roots if parent < 0 else queues.children[parent]:
            if b != a and queues.gpus[b] > queues.guaranteed[b]:
                return True
    return False


def regrow_until(cycle: Cycle, a: Alloc, gain: float) -> float:
    """When `regrow_gain` no longer holds `a` back for `gain` (whole seconds)."""
    return float(math.ceil(a.started_at + cycle.profile.resize_restart_s / gain))


def _largest_run(job: Job) -> int:
    samples = job.elastic.samples if job.elastic is not None else ()
    return max((s.gpus for s in samples), default=job.gpus)


def note_not_grown(
    cycle: Cycle,
    owed: set[str],
    unplaced: dict[str, int],
    model_of: Callable[[Job], GoodputModel],
    explored: Callable[[Job], int],
    per_node: int,
) -> None:
    """Note why each running elastic job below its `max_gpus`, with GPUs of its type idle,
    was not grown (`Cycle.not_grown`; the cycle keeps the notes of jobs whose GPUs are still
    idle at its end). `owed`: the queues owed their guarantee with jobs waiting; `unplaced`:
    jobs tried at a size that found no placement; `model_of` and `explored`: the resize
    action's goodput model of a job and the largest size it may grow to."""
    state = cycle.state
    movable = {a.job.id for a in donors(cycle)}
    resized = cycle.stmt.resized
    for a in list(state.allocs.values()):
        job = a.job
        if a.queue < 0 or not job.is_elastic or a.placed_now or job.id in resized:
            continue
        classes = cycle.classes_of(job)
        free = state.free_of(classes)
        if free <= 0 or a.gpus >= job.size_range[1]:
            continue
        held = _held(cycle, a, job.id in movable, owed, unplaced)
        if held is None and job.id in movable:
            top = min(explored(job), a.gpus + free, a.gpus + cycle.queues.limit_room(a.queue))
            held = _too_little(cycle, a, model_of(job), top, per_node)
        if held is not None:
            cycle.not_grown[job.id] = (classes, held)


def _held(
    cycle: Cycle, a: Alloc, movable: bool, owed: set[str], unplaced: dict[str, int]
) -> NotGrown | None:
    """The rule other than its gain that kept `a` from growing, or None."""
    prof, job, now = cycle.profile, a.job, cycle.now
    if not movable:
        if now - a.started_at < job.min_runtime:
            return NotGrown(
                f"runs its min_runtime ({job.min_runtime:.0f} s) before a resize",
                a.started_at + job.min_runtime,
            )
        return None  # not preemptible, or held by the operator: nothing to explain here
    if now - a.started_at < prof.resize_hold_s:
        return NotGrown(
            f"started at this size less than {prof.resize_hold_s:.0f} s ago: a job runs a "
            "while at a size before it is resized again (resize hold)",
            a.started_at + prof.resize_hold_s,
        )
    if owed and job.queue not in owed:
        return NotGrown(
            f"queue {', '.join(sorted(owed))} is owed its guarantee and has jobs waiting: "
            "only its jobs grow into idle GPUs until they have started"
        )
    queues = cycle.queues
    if queues.has_limits and queues.limit_room(a.queue) <= 0:
        blocker = queues.within_limit(a.queue, 1)
        lim = queues.limit[blocker] if blocker >= 0 else None
        return NotGrown(f"queue {queues.name(blocker)} is at its limit ({lim} GPUs)")
    if job.id in unplaced:
        return NotGrown(f"no placement of {unplaced[job.id]} GPUs fits the idle GPUs")
    return None


def _too_little(
    cycle: Cycle, a: Alloc, model: GoodputModel, top: int, per_node: int
) -> NotGrown | None:
    """Why the gain `model` predicts for `a` at sizes up to `top` did not grow it, or None."""
    prof, job = cycle.profile, a.job
    now_gp = model.goodput(a.gpus, len(a.parts))
    sizes = sizes_above(a.gpus, top, per_node)
    if now_gp <= 0 or not sizes:
        return None
    gain, k = max((model.goodput(k, packed_nodes(k, per_node)) / now_gp - 1.0, k) for k in sizes)
    gain = round(gain, 2)  # the note changes when the percentage it prints does
    if gain <= 0.0:
        return NotGrown(
            f"its goodput model predicts no gain from more GPUs (at best {gain:+.0%}, at {k})"
        )
    if gain < prof.resize_min_gain:
        return NotGrown(
            f"+{gain:.0%} goodput at {k} GPUs is below the {prof.resize_min_gain:.0%} a "
            "resize must bring"
        )
    regrow = regrow_gain(cycle, a)
    lifts = regrow_until(cycle, a, gain) if gain < regrow else -math.inf
    c = prof.resize_restart_s
    if gain < required_gain(cycle, job):  # a restart costs more than the gain repays yet
        return NotGrown(
            f"+{gain:.0%} goodput at {k} GPUs does not yet repay a restart ({c:.0f} s; "
            f"{job.restarts} so far) over the time the job has run",
            max(job.submit_time + c * (1.0 + (1.0 + gain) * job.restarts) / gain, lifts),
        )
    if gain < regrow:
        return NotGrown(
            f"+{gain:.0%} goodput at {k} GPUs does not repay a restart ({c:.0f} s) within "
            f"the {cycle.now - a.started_at:.0f} s it has run at {a.gpus} GPUs, and it has run "
            "larger: a job is grown back only once its size has lasted",
            lifts,
        )
    return None  # it qualified: the idle GPUs went to jobs with more gain per GPU
