"""Fair-share history for the scheduler: each queue's decayed GPU usage, from accounting.

DRF orders queues by dominant share plus `Profile.usage_weight` times `core.Queue.usage`, the
queue's past use as a share of the cluster, decayed with a half-life (`--fairshare-half-life`,
default 7 days as Slurm's PriorityDecayHalfLife). `FairShare.shares` derives it from the
accounting records (`UsageRecord`, one per finished run interval) and the open intervals of
running jobs, with `trainyard.accounting.decayed` / `usage_share`: the functions the
simulator uses too. A queue's usage includes its descendants'. Closed records are read once
(the last ten half-lives at the first call, then only new rows by id) and their decayed sum is
aged in place; running jobs are read every refresh, at most every `refresh_s` seconds. The
shares are also written to `queues.usage` (in the round's transaction), which the API shows.
"""

from __future__ import annotations

import math
from collections import defaultdict

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from trainyard.accounting import DEFAULT_HALF_LIFE_S, decayed, usage_share, with_ancestors
from trainyard.server.db import Job, JobState, Queue, UsageRecord


class FairShare:
    def __init__(self, half_life_s: float = DEFAULT_HALF_LIFE_S, refresh_s: float = 30.0) -> None:
        if not half_life_s > 0:
            raise ValueError(f"half_life_s: must be > 0, got {half_life_s}")
        self.half_life_s = half_life_s
        self.refresh_s = refresh_s
        self._closed: dict[int, float] = defaultdict(float)  # queue id -> decayed GPU-s
        self._last_id = 0
        self._at: float | None = None  # when `_closed` was last aged
        self._shares: dict[int, float] = {}
        self._computed_at = -math.inf

    def shares(self, session: Session, now: float, total_gpus: int) -> dict[int, float]:
        """Queue id -> usage share (0..1), its descendants' use included."""
        if now - self._computed_at < self.refresh_s:
            return self._shares
        self._age(now)
        query = select(UsageRecord).where(UsageRecord.id > self._last_id)
        if self._last_id == 0:
            query = query.where(UsageRecord.ended_at > now - 10 * self.half_life_s)
        for r in session.scalars(query.order_by(UsageRecord.id)):
            self._closed[r.queue_id] += decayed([(r.started_at, r.ended_at, r.gpus)], now,
                                                self.half_life_s)  # fmt: skip
            self._last_id = max(self._last_id, r.id)
        per_queue = dict(self._closed)
        running = select(Job.queue_id, Job.started_at, Job.gpus).where(Job.state == S.RUNNING)
        for queue_id, started, gpus in session.execute(running):
            if started is not None:
                per_queue[queue_id] = per_queue.get(queue_id, 0.0) + decayed(
                    [(started, now, gpus)], now, self.half_life_s
                )
        parents: dict[int, int | None] = {
            qid: parent for qid, parent in session.execute(select(Queue.id, Queue.parent_id))
        }
        totals = with_ancestors(per_queue, parents)
        shares = {q: usage_share(v, total_gpus, self.half_life_s) for q, v in totals.items()}
        for queue_id in parents:  # kept on the rows too (`queues.usage`, shown by the API)
            value = round(shares.get(queue_id, 0.0), 6)
            if round(self._shares.get(queue_id, -1.0), 6) != value:
                session.execute(update(Queue).where(Queue.id == queue_id).values(usage=value))
        self._shares = shares
        self._computed_at = now
        return self._shares

    def _age(self, now: float) -> None:
        if self._at is not None and now > self._at:
            factor = 2.0 ** (-(now - self._at) / self.half_life_s)
            for q in self._closed:
                self._closed[q] *= factor
        self._at = now if self._at is None else max(self._at, now)


S = JobState
