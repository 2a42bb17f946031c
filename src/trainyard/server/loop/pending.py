"""The pending queue as a scheduling round reads it: cheap when the queue is long.

A round needs every ready PENDING job as a `core.Job`, in submission order, plus what it
read of each (version, pending reason, estimated start) to detect concurrent changes and to
write only the reasons that changed. Building thousands of `core.Job`s from full rows every
round dominated the loop's cost, so `PendingCache` keeps the built jobs between rounds, keyed
by id and checked against the row's `version`: a lifecycle transition (the only change that
alters what the core reads) bumps the version, while the scheduler's own reason writes do
not. Each round then reads four narrow columns of every pending job and full rows only for
jobs that are new or changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from trainyard import core
from trainyard.server.db import Job as JobRow
from trainyard.server.db import JobState

Seen = tuple[int, str | None, float | None]  # version, pending reason, estimated start
_LIGHT = (
    JobRow.id, JobRow.version, JobRow.queue_id, JobRow.pending_reason, JobRow.estimated_start,
)  # fmt: skip
FULL_COLUMNS = (
    JobRow.id, JobRow.queue_id, JobRow.gpus, JobRow.priority, JobRow.submitted_at,
    JobRow.gpu_types, JobRow.gpu_memory_gb, JobRow.cpus, JobRow.memory_gb, JobRow.preemptible,
    JobRow.min_runtime, JobRow.expected_duration, JobRow.attained_service, JobRow.topology,
    JobRow.nodes,
    JobRow.name, JobRow.version, JobRow.min_gpus, JobRow.max_gpus, JobRow.recover_first,
)  # fmt: skip
CHUNK = 500


def _chunks(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class PendingCache:
    """Built `core.Job`s of pending jobs, kept between rounds (see the module docstring)."""

    def __init__(self) -> None:
        self._jobs: dict[str, tuple[int, str, core.Job]] = {}

    def __len__(self) -> int:
        return len(self._jobs)

    def load(
        self,
        session: Session,
        now: float,
        queue_names: dict[int, str],
        build: Callable[[Any, str], core.Job],
    ) -> tuple[list[core.Job], dict[str, Seen]]:
        """The ready pending jobs in submission order, and what was read of each."""
        ready = (JobRow.next_retry_at.is_(None)) | (JobRow.next_retry_at <= now)
        light = session.execute(
            select(*_LIGHT)
            .where(JobRow.state == JobState.PENDING, ready)
            .order_by(JobRow.submitted_at, JobRow.id)
        )
        order: list[str] = []
        seen: dict[str, Seen] = {}
        missing: list[str] = []
        for row in light:
            order.append(row.id)
            seen[row.id] = (row.version, row.pending_reason, row.estimated_start)
            hit = self._jobs.get(row.id)
            if hit is None or hit[0] != row.version or hit[1] != queue_names[row.queue_id]:
                missing.append(row.id)
        for ids in _chunks(missing, CHUNK):
            for full in session.execute(select(*FULL_COLUMNS).where(JobRow.id.in_(ids))):
                queue = queue_names[full.queue_id]
                self._jobs[full.id] = (full.version, queue, build(full, queue))
                if full.id in seen:  # changed between the two reads: keep the version built
                    seen[full.id] = (full.version, *seen[full.id][1:])
        if len(self._jobs) > len(order):  # forget jobs that left the queue
            wanted = set(order)
            self._jobs = {k: v for k, v in self._jobs.items() if k in wanted}
        return [self._jobs[job_id][2] for job_id in order if job_id in self._jobs], seen
