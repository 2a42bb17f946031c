"""Deciding one arrival in a steady cluster without re-running the whole cycle.

`Scheduler` runs a full cycle on a snapshot and keeps its working state. When that cycle
changed nothing (the cluster is *steady*: everything that could start has started), a new job
J is decided by trying J alone, in the mode a full cycle would try it, on the kept state:

J's rank is where the walk over pending jobs (`order.PendingOrder`) reaches it; under
`las_drf` that is by the highest LAS level in its queue's list up to it, so an arrival that
would raise the level of jobs after it in its queue (possibly the head) runs the full cycle.

- J ranks after the blocked head of the line: a full cycle would fail every job before J
  exactly as before (same state, nothing placed), then try J in backfill mode under the same
  reservation holds; and whatever J takes, every job after J still fails (capacity only
  shrank). So trying J in backfill mode on the kept state gives the full cycle's decision.
- J ranks before the head (J is tried as allocate would, then the head's reservation is
  recomputed), J's placement lets a reclaim become possible elsewhere, or J itself needs
  evictions: J's own outcome is still exactly the full cycle's (everything considered before
  J is unchanged), but other jobs may now be decided differently, so `stale` is set and the
  shell runs a full cycle soon. Invalid input and non-steady states run the full cycle.

`decide_arrival(J)` returns a `Decision` about J (placement and any evictions it needs, or
J's pending reason and reservation); other pending jobs keep the reasons of the last full
cycle. A test checks against `run_cycle` on snapshot + J: J's outcome always equal, and the
whole decision equal whenever `stale` is not set.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import replace
from itertools import accumulate
from typing import Any

from trainyard.core.actions.backfill import place_backfill, reserve
from trainyard.core.cycle import Cycle, Status, run_actions
from trainyard.core.explain import build_decision
from trainyard.core.framework import EVICTORS, JOB_ORDERS, Profile, get_profile
from trainyard.core.order import share_path
from trainyard.core.plugins.job_orders import las_level
from trainyard.core.snapshot import Snapshot, validate
from trainyard.core.topology import Layout, build_layout
from trainyard.core.types import Decision, Job


def _spare_pass(snapshot: Snapshot) -> bool:
    """Would `run_cycle` run the spare pass first (core/spares.py)? Its cycle is not kept
    here, so arrivals are then decided by full cycles."""
    return any(j.recovering and j.gpus for j in snapshot.pending) and any(
        n.spare for n in snapshot.nodes
    )


class Scheduler:
    """A full cycle's state, kept to decide arrivals incrementally (see module docstring)."""

    def __init__(
        self, snapshot: Snapshot, profile: Profile | str = "default", layout: Layout | None = None
    ) -> None:
        self.profile = get_profile(profile) if isinstance(profile, str) else profile
        self.profile.validate()
        validate(snapshot, placements=False)
        self.snapshot = snapshot
        self.layout = layout or build_layout(snapshot.nodes, snapshot.topology)
        self.cycle = Cycle(snapshot, self.profile, self.layout)
        run_actions(self.cycle)
        self.decision = build_decision(self.cycle)
        self.steady = self.decision.is_empty and not _spare_pass(snapshot)
        self._base = self.cycle.stmt.checkpoint()
        self._holds = list(self.cycle.holds)
        self.stale = False  # see decide_arrival
        self._key = JOB_ORDERS.get(self.profile.job_order)
        self._prefix: dict[int, tuple[list[tuple[Any, ...]], list[int]]] = {}
        self.full_cycles = 0  # arrivals that needed a full cycle (for benchmarks)

    def _rank(self, job: Job) -> tuple[Any, ...]:
        """Where the walk over pending jobs (`order.PendingOrder`) reaches `job` in this
        steady state: (level, share path, queue, job order) under `drf` and `las_drf`."""
        profile = self.profile
        key = self._key(job, profile)
        if profile.queue_order == "global":
            return (key,)
        queues = self.cycle.queues
        q = queues.index[job.queue]
        level = 0
        if profile.queue_order == "las_drf" and queues.gpus[q]:
            keys, prefix = self._levels(q)
            i = bisect_left(keys, key)
            level = max(las_level(job, profile), prefix[i - 1] if i else 0)
        return (level, share_path(queues, q), q, key)

    def _levels(self, q: int) -> tuple[list[tuple[Any, ...]], list[int]]:
        """The job-order keys of queue `q`'s pending jobs in order, and the running maximum
        of their LAS levels (the level by which `las_drf` merges the queue's list)."""
        got = self._prefix.get(q)
        if got is None:
            profile = self.profile
            jobs = self.cycle.order.queue_jobs(q)  # already in job order
            prefix = list(accumulate((las_level(j, profile) for j in jobs), max))
            got = self._prefix[q] = ([self._key(j, profile) for j in jobs], prefix)
        return got

    def _raises_levels(self, job: Job) -> bool:
        """Under `las_drf`: would `job` raise the merge level of jobs after it in its
        queue (then they, possibly the head, move in the walk: a full cycle decides)?"""
        q = self.cycle.queues.index[job.queue]
        if self.profile.queue_order != "las_drf" or not self.cycle.queues.gpus[q]:
            return False  # a queue holding nothing is served at level 0 (order.py)
        keys, prefix = self._levels(q)
        i = bisect_left(keys, self._key(job, self.profile))
        return i < len(keys) and prefix[i] < las_level(job, self.profile)

    def _tied(self, job: Job, head: Job) -> bool:
        """Are `job` and `head` in different queues tied on fair share, under a tie-break
        by the size of each queue's next job?"""
        profile = self.profile
        if profile.queue_order == "global" or profile.queue_tie_break == "declared":
            return False
        if job.queue == head.queue:
            return False
        mine: tuple[Any, ...] = self._rank(job)
        theirs: tuple[Any, ...] = self._rank(head)
        return bool(mine[:2] == theirs[:2])

    def _full(self, job: Job) -> Decision:
        from trainyard.core.cycle import run_cycle

        self.full_cycles += 1
        snap = replace(self.snapshot, pending=(*self.snapshot.pending, job))
        return run_cycle(snap, self.profile, self.layout)

    def decide_arrival(self, job: Job) -> Decision:
        """What a full cycle on the kept snapshot plus `job` decides about `job`.

        The result is exact for `job`. It is exact for every other job too unless `stale` is
        set afterwards: then `job` took the head of the line or moved its reservation, and a
        full cycle may also start jobs that the old reservation held back (it never undoes
        what was decided here). The shell then runs a full cycle soon."""
        cycle = self.cycle
        if job.queue not in cycle.queues.index or job.id in cycle.state.allocs:
            return self._full(job)  # let validation speak
        if not self.steady:
            return self._full(job)
        profile = self.profile
        head = cycle.head if cycle.head is not None and cycle.head.id in cycle.status else None
        if head is not None and self._tied(job, head):
            return self._full(job)  # which queue goes first depends on the walk's next jobs
        if self._raises_levels(job):
            return self._full(job)  # jobs after it in its queue move in the walk
        ahead = head is not None and self._rank(job) < self._rank(head)
        if head is not None and profile.strict_order:
            if ahead:
                return self._full(job)
            cycle.status[job.id] = Status("order", other_job=head.id)
            return self._delta(job)
        queues = cycle.queues
        q = queues.index[job.queue]
        before = queues.over_guaranteed(q)
        if ahead and head is not None:
            placed = self._ahead_of_head(job, head)
        elif head is not None and "backfill" in profile.actions:
            holds = [(h.job.id, h.start, h.target) for h in cycle.holds]
            placed = place_backfill(cycle, job)
            if holds != [(h.job.id, h.start, h.target) for h in cycle.holds]:
                self.stale = True  # `job` took reserved devices its guarantee covers
        else:
            placed = cycle.try_place(job, "allocate")
        if placed:
            if "reclaim" in profile.actions and queues.over_guaranteed(q) > max(before, 0):
                self.stale = True  # others may now reclaim from `job`'s queue
            return self._delta(job)
        for name in profile.actions:  # the evicting ones, in the profile's order
            if name not in EVICTORS or cycle.quota_blocker(job) >= 0:
                continue
            if EVICTORS.get(name)(cycle, job):
                self.stale = True  # the evictions may let others start (or settle) too
                break
        return self._delta(job)

    def _ahead_of_head(self, job: Job, head: Job) -> bool:
        """`job` is considered before the blocked head: try it as allocate would (no holds),
        then redo the head's reservation as backfill would; flag `stale` if it moved."""
        cycle = self.cycle
        old = [(h.start, h.target) for h in cycle.holds]
        for h in list(cycle.holds):
            cycle.unhold(h)
        cycle.holds.clear()
        placed = cycle.try_place(job, "allocate")
        if not placed:
            self.stale = True  # `job` is the new head: reserve for it, as backfill would
            if "backfill" in self.profile.actions:
                reserve(cycle, job)
            return False
        new = reserve(cycle, head) if "backfill" in self.profile.actions else None
        moved = [(new.start, new.target)] if new is not None else []
        if moved != old:
            self.stale = True
        return True

    def _delta(self, job: Job) -> Decision:
        return build_decision(self.cycle, only=(job,))

    def forget(self, job_id: str) -> None:
        """Undo everything done for arrivals since the last full cycle."""
        cycle = self.cycle
        cycle.stmt.rollback(self._base)
        cycle.holds[:] = self._holds
        self.stale = False
        cycle.status.pop(job_id, None)
