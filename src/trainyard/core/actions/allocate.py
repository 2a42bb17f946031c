"""allocate: place pending jobs in scheduling order, whole gangs only.

Walks the shared pending order. With `backfill` in the profile it stops at the first job that
does not fit for lack of room (the head of the line, which backfill then reserves for); jobs
blocked only by their queue's quota do not stop it. Without backfill it skips such jobs and
goes on (greedy), unless the profile has `strict_order` (classic FIFO): then it stops and every
job behind the head waits in order.
"""

from __future__ import annotations

from trainyard.core.cycle import CAPACITY_CODES, Cycle
from trainyard.core.framework import ACTIONS


def allocate(cycle: Cycle) -> None:
    backfill = "backfill" in cycle.profile.actions and cycle.profile.max_reservations > 0
    strict = cycle.profile.strict_order
    for job in cycle.order:
        if cycle.try_place(job, "allocate"):
            continue
        if cycle.status[job.id].code in CAPACITY_CODES and (backfill or strict):
            cycle.head = job
            return


ACTIONS.register("allocate", allocate)
