"""Apply a `Decision` to the `Snapshot` it was made from, as if executed instantly.

The result is the snapshot the next cycle would see if every eviction stopped at once and
every placement started at once (at `decision.now`): evicted jobs go back to pending, placed
jobs become running (at the size placed), resized jobs restart at their new size. The
scenario runner (`trainyard.scenario.steps`, several cycles) and the scheduler timing
(`trainyard.sim.timing`, the steady cluster) use it, and the tests use it to check stability
("a cycle on its own applied result changes nothing") and the absence of preemption
ping-pong. The simulator keeps its own job states and applies decisions to them
(`sim.engine`); the server writes them to its database
(`server.loop.scheduling.write_decision`). Pure, like the rest of the core.
"""

from __future__ import annotations

from dataclasses import replace

from trainyard.core.snapshot import Snapshot
from trainyard.core.types import Decision, RunningJob


def apply_decision(snapshot: Snapshot, decision: Decision, now: float | None = None) -> Snapshot:
    """The snapshot after `decision` took effect; `now` defaults to the decision's time."""
    evicted = {e.job_id for e in decision.evictions}
    placed = {p.job_id: p for p in decision.placements}
    resized = {r.job_id: r for r in decision.resizes}
    running: list[RunningJob] = []
    for r in snapshot.running:
        if r.job.id in evicted:
            continue
        z = resized.get(r.job.id)
        if z is None:
            running.append(r)
        else:  # restarted at its new size
            running.append(RunningJob(r.job.with_gpus(z.gpus), z.nodes, decision.now))
    back_to_pending = [r.job for r in snapshot.running if r.job.id in evicted]
    pending = []
    for job in snapshot.pending:
        p = placed.get(job.id)
        if p is None:
            pending.append(job)
        else:
            running.append(RunningJob(job.with_gpus(p.gpus), p.nodes, decision.now))
    return replace(
        snapshot,
        now=decision.now if now is None else now,
        running=tuple(running),
        pending=tuple(pending) + tuple(back_to_pending),
    )
