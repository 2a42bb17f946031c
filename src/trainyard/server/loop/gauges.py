"""The platform's gauges, refreshed from the database after each scheduling round: queue
lengths, GPUs allocated and free by type, jobs by state, and the GPUs each job holding
devices runs at (an elastic job's world size)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from trainyard.server.db import Health, JobState
from trainyard.server.db import Job as JobRow
from trainyard.server.db import Node as NodeRow
from trainyard.server.db import Queue as QueueRow
from trainyard.server.lifecycle import HOLDS_DEVICES
from trainyard.server.metrics import PLATFORM, PlatformMetrics

S = JobState


def _placement(doc: list[Any] | None) -> list[tuple[str, int]]:
    return [(str(e["node"]), int(d)) for e in doc or () for d in e["devices"]]


def refresh_gauges(session: Session, metrics: PlatformMetrics = PLATFORM) -> None:
    """Queue lengths, GPUs allocated / free by type and jobs by state, from the database."""
    queues = {q.id: q.name for q in session.scalars(select(QueueRow))}
    by_queue = Counter[tuple[int, JobState]]()
    by_state = Counter[JobState]()
    for queue_id, state, n in session.execute(
        select(JobRow.queue_id, JobRow.state, func.count()).group_by(JobRow.queue_id, JobRow.state)
    ):
        by_queue[(queue_id, JobState(state))] += n
        by_state[JobState(state)] += n
    metrics.queue_pending.replace(({"queue": name}, by_queue[(qid, S.PENDING)])
                                  for qid, name in queues.items())  # fmt: skip
    metrics.queue_running.replace(({"queue": name}, by_queue[(qid, S.RUNNING)])
                                  for qid, name in queues.items())  # fmt: skip
    metrics.jobs.replace(({"state": s.value}, by_state[s]) for s in JobState)
    held: set[tuple[str, int]] = set()
    holding = select(JobRow.id, JobRow.queue_id, JobRow.state, JobRow.gpus, JobRow.placement)
    sizes = []
    for job_id, queue_id, state, size, doc in session.execute(
        holding.where(JobRow.state.in_(HOLDS_DEVICES))
    ):
        held.update(_placement(doc))
        labels = {"job": job_id, "queue": queues.get(queue_id, "?"), "state": JobState(state).value}
        sizes.append((labels, float(size)))
    metrics.job_gpus.replace(sizes)
    gpus = Counter[tuple[str, str]]()
    for node in session.scalars(select(NodeRow)):
        usable = node.schedulable and node.health == Health.HEALTHY
        for dev in node.devices:
            if (node.name, dev.index) in held:
                gpus[("allocated", dev.gpu_type)] += 1
            elif usable and dev.health == Health.HEALTHY:
                gpus[("free", dev.gpu_type)] += 1
            else:
                gpus[("free", dev.gpu_type)] += 0
    types = {t for _, t in gpus}
    metrics.gpus.replace(
        ({"state": s, "type": t}, gpus[(s, t)])
        for t in sorted(types)
        for s in ("allocated", "free")
    )
