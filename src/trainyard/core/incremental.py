"""Deciding one arrival in a steady cluster without re-running the whole cycle.

`Scheduler` runs a full cycle on a snapshot and keeps its working state. When that cycle
changed nothing (the cluster is *steady*: everything that could start has started), a new job
J is decided by trying J alone, in the mode a full cycle would try it, on the kept state:

- J ranks after the blocked head of the line: a full cycle would fail every job before J
  exactly as before (same state, nothing placed), then try J in backfill mode under the same
  reservation holds; and whatever J takes, every job after J still fails (capacity only
  shrank). So trying J in backfill mode on the kept state gives the full cycle's decision.
- J ranks before the head, or J's placement lets a reclaim become possible elsewhere, or J
  itself needs evictions: the outcome may move other jobs, so the full cycle runs instead.

`decide_arrival(J)` returns a `Decision` about J (placement, or J's pending reason and
reservation); other pending jobs keep the reasons of the last full cycle. A property test
checks that the placements and evictions always equal those of `run_cycle` on snapshot + J.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from trainyard.core.actions.backfill import place_backfill
from trainyard.core.actions.preempt import preempt_for
from trainyard.core.actions.reclaim import reclaim_for
from trainyard.core.cycle import CAPACITY_CODES, Cycle, Status, run_actions
from trainyard.core.explain import build_decision
from trainyard.core.framework import JOB_ORDERS, Profile, get_profile
from trainyard.core.snapshot import Snapshot, validate
from trainyard.core.topology import Layout, build_layout
from trainyard.core.types import Decision, Job


class Scheduler:
    """A full cycle's state, kept to decide arrivals incrementally (see module docstring)."""

    def __init__(
        self, snapshot: Snapshot, profile: Profile | str = "default", layout: Layout | None = None
    ) -> None:
        self.profile = get_profile(profile) if isinstance(profile, str) else profile
        self.profile.validate()
        validate(snapshot)
        self.snapshot = snapshot
        self.layout = layout or build_layout(snapshot.nodes, snapshot.topology)
        self.cycle = Cycle(snapshot, self.profile, self.layout)
        run_actions(self.cycle)
        self.decision = build_decision(self.cycle)
        self.steady = self.decision.is_empty
        self._base = self.cycle.stmt.checkpoint()
        self._holds = len(self.cycle.holds)
        self._key = JOB_ORDERS.get(self.profile.job_order)
        self.full_cycles = 0  # arrivals that needed a full cycle (for benchmarks)

    def _rank(self, job: Job) -> tuple[Any, ...]:
        profile = self.profile
        if profile.queue_order == "global":
            return (self._key(job, profile),)
        queues = self.cycle.queues
        q = queues.index[job.queue]
        path = tuple(queues.share_key(a) for a in reversed(queues.path[q]))
        return (path, q, self._key(job, profile))

    def _full(self, job: Job) -> Decision:
        from trainyard.core.cycle import run_cycle

        self.full_cycles += 1
        snap = replace(self.snapshot, pending=(*self.snapshot.pending, job))
        return run_cycle(snap, self.profile, self.layout)

    def decide_arrival(self, job: Job) -> Decision:
        """What a full cycle on the kept snapshot plus `job` would decide about `job`."""
        cycle = self.cycle
        if job.queue not in cycle.queues.index or job.id in cycle.state.allocs:
            return self._full(job)  # let validation speak
        if not self.steady:
            return self._full(job)
        head = cycle.head
        if head is not None and head.id in cycle.status and self._rank(job) < self._rank(head):
            return self._full(job)
        if head is not None and self.profile.strict_order:
            cycle.status[job.id] = Status("order", other_job=head.id)
            return self._delta(job)
        if head is None and any(st.code in CAPACITY_CODES for st in cycle.status.values()):
            return self._full(job)  # greedy profile: other blocked jobs may be behind J
        queues = cycle.queues
        q = queues.index[job.queue]
        before = queues.over_guaranteed(q)
        backfill = head is not None and "backfill" in self.profile.actions
        placed = place_backfill(cycle, job) if backfill else cycle.try_place(job, "allocate")
        if placed:
            if "reclaim" in self.profile.actions and queues.over_guaranteed(q) > max(before, 0):
                self.forget(job.id)
                return self._full(job)
            return self._delta(job)
        for name, attempt in (("reclaim", reclaim_for), ("preempt", preempt_for)):
            if (
                name in self.profile.actions
                and cycle.quota_blocker(job) < 0
                and attempt(cycle, job)
            ):
                self.forget(job.id)
                return self._full(job)
        return self._delta(job)

    def _delta(self, job: Job) -> Decision:
        self.cycle.extra_jobs[job.id] = job
        return build_decision(self.cycle, only=(job.id,))

    def forget(self, job_id: str) -> None:
        """Undo everything done for arrivals since the last full cycle."""
        cycle = self.cycle
        cycle.stmt.rollback(self._base)
        del cycle.holds[self._holds :]
        cycle.status.pop(job_id, None)
        cycle.extra_jobs.pop(job_id, None)
