"""Draining nodes: the platform evicts the jobs running on a node being drained.

`trainyard admin node drain NODE` cordons the node (no new placement: `schedulable` false)
and sets `drained_at`. Each platform step, every RUNNING job with a device on such a node
goes RUNNING -> PREEMPTED with the reason `node NODE drained`; the step then stops its run
as for any eviction (the notice `preempt`, SIGTERM, the grace period), and once stopped it
is requeued (PENDING), with its progress kept, to run on other nodes. A preemption costs no
restart (`max_restarts`). Jobs still STARTING there are evicted once they run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from trainyard.server.db import Job, JobState
from trainyard.server.lifecycle import transition
from trainyard.server.services.nodes import draining_nodes

S = JobState


def running_on(session: Session, nodes: set[str]) -> dict[str, str]:
    """RUNNING jobs with a device on one of `nodes` -> the first such node's name."""
    if not nodes:
        return {}
    out: dict[str, str] = {}
    for job_id, placement in session.execute(
        select(Job.id, Job.placement).where(Job.state == S.RUNNING)
    ):
        on = sorted({str(p["node"]) for p in placement or ()} & nodes)
        if on:
            out[str(job_id)] = on[0]
    return out


def to_evict(session: Session) -> dict[str, str]:
    """RUNNING jobs with a device on a node being drained -> that node's name."""
    return running_on(session, draining_nodes(session))


def evict(session: Session, row: Job, node: str, now: float) -> bool:
    """Preempt `row` for the drain of `node` (False: it is no longer running)."""
    if row.state != S.RUNNING:
        return False
    reason = f"node {node} drained"
    transition(session, row, S.PREEMPTED, reason=reason[:64], now=now,
               details={"node": node, "action": "drain", "why": reason})  # fmt: skip
    return True


Work = Callable[[Session, Job, Any], None]


def work(node: str, now: float, then: Work) -> Work:
    """The platform's unit of work for one job on `node`: evict it, then `then` (stop its
    run) if it was still running."""

    def run(session: Session, row: Job, out: Any) -> None:
        if evict(session, row, node, now):
            then(session, row, out)

    return run
