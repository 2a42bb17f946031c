"""What each console page shows, built from the services the REST API uses.

Every function takes the request's session, the caller's `Principal` and `now`, and returns
the values its template renders. Tenant isolation is the services' (`jobs.visible`,
`jobs.own_job`, `jobs.list_jobs`, ...): another tenant's job on the cluster map is a taken
GPU and nothing more. The queue figures that the API does not list (borrowed, lent, the
fair-share order) come from the scheduling core's own `QueueIndex`, fed with what the
queues hold now.
"""

from __future__ import annotations

import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

import trainyard.server.api.schemas as schemas
from trainyard import core
from trainyard.core.goodput import GoodputModel
from trainyard.core.queues import QueueIndex
from trainyard.server import lifecycle
from trainyard.server.api.auth import Principal
from trainyard.server.db import Health, Job, JobState, Node, Queue
from trainyard.server.loop.scheduling import split_reason
from trainyard.server.services import audit, jobs, reports, tenancy, tokens, usage
from trainyard.server.services.logs import JobLogs

PAGE_SIZE = 50
ACTIVE = (JobState.PENDING, *sorted(lifecycle.HOLDS_DEVICES))


# ---- the cluster map ------------------------------------------------------------------------


@dataclass
class Gpu:
    index: int
    gpu_type: str
    memory_gb: float
    virtual: bool
    health: Health
    holder: jobs.Holder | None

    @property
    def label(self) -> str:
        """What a screen reader (and the tooltip) says about this GPU."""
        kind = " virtual" if self.virtual else ""
        head = f"GPU {self.index}{kind} ({self.gpu_type}, {self.memory_gb:g} GB)"
        if self.health != Health.HEALTHY:
            head += f", {self.health.value}"
        if self.holder is None:
            return f"{head}: free"
        job = self.holder.job
        if job is None:
            return f"{head}: in use by another tenant's job"
        return f"{head}: job {job.id} ({job.name}), queue {job.queue}, user {job.user}"


@dataclass
class NodeView:
    name: str
    executor: str
    status: str  # healthy, cordoned, draining, unhealthy, lost
    reason: str | None
    virtual: bool
    cpus: float
    memory_gb: float
    last_heartbeat_at: float | None
    gpus: list[Gpu]


def _node_status(node: schemas.NodeOut) -> str:
    if node.health == Health.LOST:
        return "lost"
    if node.health == Health.UNHEALTHY:
        return "unhealthy"
    if node.drained_at is not None:
        return "draining"
    if not node.schedulable:
        return "cordoned"
    return "healthy"


def cluster(session: Session, who: Principal, now: float) -> dict[str, Any]:
    del now
    listed = jobs.list_nodes(session, who).nodes
    holders = jobs.device_holders(session, who)
    nodes = []
    legend: dict[str, schemas.JobSummary] = {}
    since: dict[str, float] = {}
    for n in listed:
        gpus = []
        for d in n.devices:
            holder = holders.get((n.name, d.index))
            gpus.append(Gpu(d.index, d.gpu_type, d.memory_gb, d.virtual, d.health, holder))
            if holder is not None and holder.job is not None:
                legend[holder.job.id] = holder.job
                since[holder.job.id] = holder.since
        nodes.append(
            NodeView(
                n.name,
                n.executor,
                _node_status(n),
                n.drain_reason,
                n.virtual,
                n.cpus,
                n.memory_gb,
                n.last_heartbeat_at,
                gpus,
            )
        )
    cells = [g for n in nodes for g in n.gpus]
    counts = jobs.state_counts(session, who)
    return {
        "nodes": nodes,
        "legend": sorted(legend.values(), key=lambda j: (j.queue, j.id)),
        "since": since,
        "totals": {
            "gpus": len(cells),
            "busy": sum(1 for g in cells if g.holder is not None),
            "others": sum(1 for g in cells if g.holder is not None and g.holder.job is None),
            "down": sum(1 for g in cells if g.health != Health.HEALTHY),
            "virtual": sum(1 for g in cells if g.virtual),
        },
        "pending": counts[JobState.PENDING],
        "running": counts[JobState.RUNNING],
    }


# ---- queues ---------------------------------------------------------------------------------


@dataclass
class QueueView:
    out: schemas.QueueOut
    depth: int
    in_use: int  # GPUs its jobs and its children's jobs hold
    borrowed: int  # held above its guarantee
    lent: int  # of its guarantee, unused while other queues run above theirs
    share_key: tuple[int, float]
    position: int | None = None  # in the fair-share order of the visible queues (1: next)
    children: list[str] = field(default_factory=list)


def _held(session: Session) -> dict[int, tuple[int, float, float]]:
    """(GPUs, CPUs, memory) held by each queue's own jobs."""
    rows = session.execute(
        select(Job.queue_id, func.sum(Job.gpus), func.sum(Job.cpus), func.sum(Job.memory_gb))
        .where(Job.state.in_(sorted(lifecycle.HOLDS_DEVICES)))
        .group_by(Job.queue_id)
    )
    return {q: (int(g or 0), float(c or 0), float(m or 0)) for q, g, c, m in rows}


def queues(session: Session, who: Principal, now: float, usage_weight: float) -> dict[str, Any]:
    del now
    visible = {q.name: q for q in jobs.list_queues(session, who).queues}
    rows = list(session.scalars(select(Queue).order_by(Queue.id)))
    names = {q.id: q.name for q in rows}
    nodes = list(session.scalars(select(Node)))
    total_gpus = sum(len(n.devices) for n in nodes)
    index = QueueIndex(
        tuple(
            core.Queue(
                q.name,
                names.get(q.parent_id) if q.parent_id else None,
                q.guaranteed,
                q.limit,
                q.weight,
                q.usage,
            )
            for q in rows
        ),
        total_gpus,
        sum(n.cpus for n in nodes),
        sum(n.memory_gb for n in nodes),
        usage_weight,
    )
    for queue_id, (gpus, cpus, mem) in _held(session).items():
        if queue_id in names:
            index.add(index.index[names[queue_id]], gpus, cpus, mem)
    used = {q.name: index.gpus[index.index[q.name]] for q in rows}
    borrowed = {q.name: max(0, used[q.name] - q.guaranteed) for q in rows}
    parent = {q.name: names.get(q.parent_id) if q.parent_id else None for q in rows}

    def ancestors(name: str) -> list[str]:
        chain = []
        while (up := parent[name]) is not None:
            chain.append(up)
            name = up
        return chain

    def lent(name: str, guaranteed: int) -> int:
        """Its unused guarantee, up to what queues outside its own line hold above theirs
        (counted at the highest queue that does not contain it: disjoint subtrees)."""
        idle = max(0, guaranteed - used[name])
        line = {name, *ancestors(name)}
        outside = [
            q for q in used
            if q not in line and (parent[q] in line or parent[q] is None)
            and name not in ancestors(q)
        ]  # fmt: skip
        return min(idle, sum(borrowed[q] for q in outside))

    views: dict[str, QueueView] = {}
    for q in rows:
        if q.name not in visible:
            continue
        i = index.index[q.name]
        views[q.name] = QueueView(
            visible[q.name], len(ancestors(q.name)), used[q.name], borrowed[q.name],
            lent(q.name, q.guaranteed), index.share_key(i),
        )  # fmt: skip
    for name, _view in views.items():
        up = parent[name]
        if up in views:
            views[up].children.append(name)

    def path_key(name: str) -> tuple[tuple[int, float], ...]:
        return tuple(views[a].share_key if a in views else (0, 0.0)
                     for a in [*reversed(ancestors(name)), name])  # fmt: skip

    leaves = [n for n, v in views.items() if not v.children]
    for position, name in enumerate(sorted(leaves, key=lambda n: (path_key(n), n)), start=1):
        views[name].position = position
    ordered: list[QueueView] = []

    def walk(name: str) -> None:
        ordered.append(views[name])
        for child in sorted(views[name].children):
            walk(child)

    for name in sorted(n for n in views if parent[n] not in views):
        walk(name)
    return {"queues": ordered, "total_gpus": total_gpus}


# ---- jobs -----------------------------------------------------------------------------------


def job_list(session: Session, who: Principal, where: jobs.Filters, page: int) -> dict[str, Any]:
    listed = jobs.list_jobs(session, who, where, limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE)
    reasons: dict[str, str] = {}
    pending = [j.id for j in listed.jobs if j.state == JobState.PENDING]
    if pending:
        rows = session.execute(select(Job.id, Job.pending_reason).where(Job.id.in_(pending)))
        reasons = {job_id: split_reason(text)[1] for job_id, text in rows if text}
    return {
        "jobs": listed.jobs,
        "more": listed.more,
        "page": page,
        "reasons": reasons,
        "counts": jobs.state_counts(session, who),
        "queue_names": [q.name for q in jobs.list_queues(session, who).queues],
        "states": list(JobState),
    }


@dataclass
class Checkpoint:
    name: str
    bytes: int
    modified: float


def checkpoints(logs: JobLogs | None, job_id: str) -> list[Checkpoint]:
    """The regular files in the job's checkpoint directory (`TRAINYARD_CHECKPOINT_DIR`),
    newest first; none when this server keeps no job files. Links are left out, not
    followed: the server reads as root, and a job's link to a file only root may read
    (`/etc/shadow`, the database's WAL) would show its size and modification time."""
    if logs is None:
        return []
    directory = Path(logs.runs_dir) / "jobs" / job_id / "checkpoints"
    found = []
    try:
        entries = list(directory.iterdir())
    except OSError:
        return []
    for entry in entries:
        try:
            info = entry.lstat()
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode) and not entry.name.startswith("."):
            found.append(Checkpoint(entry.name, info.st_size, info.st_mtime))
    return sorted(found, key=lambda c: (-c.modified, c.name))[:50]


def _gpus_over_time(detail: schemas.JobDetail, now: float) -> list[tuple[float, float]]:
    """(time, GPUs held) at each event: the placement taken when starting or resizing,
    none once the job stopped holding devices."""
    points: list[tuple[float, float]] = []
    held = 0
    for event in detail.events:
        placement = event.details.get("placement")
        if event.to_state in (JobState.STARTING, JobState.RESIZING) and isinstance(placement, list):
            held = sum(len(p.get("devices", ())) for p in placement if isinstance(p, dict))
        elif event.to_state not in lifecycle.HOLDS_DEVICES:
            held = 0
        points.append((event.time, float(held)))
    if points and detail.finished_at is None:
        points.append((now, points[-1][1]))
    return points


def _efficiency(batch: int, base: int, sqr: float | None, var: float | None) -> float | None:
    """Pollux's statistical efficiency of a step at `batch` relative to `base` (the core's
    goodput model's `gain`, per sample); None without gradient statistics."""
    if sqr is None or var is None or sqr + var <= 0 or batch <= 0:
        return None
    model = GoodputModel(
        overhead=0.0, per_sample=0.0, sync_node=0.0, sync_net=0.0, batch=base, max_batch=base,
        max_local_batch=0, grad_sqr=sqr, grad_var=var,
    )  # fmt: skip
    return model.gain(float(batch)) * base / batch


def job_detail(
    session: Session, who: Principal, job_id: str, now: float, logs: JobLogs | None
) -> dict[str, Any]:
    detail = jobs.describe_job(session, who, job_id)
    samples = reports.history(session, detail.id)
    base = samples[0].batch if samples else 0
    world, throughput, goodput, loss = [], [], [], []
    for s in samples:
        world.append((s.time, float(s.world_size)))
        rate = s.batch / s.step_time if s.step_time > 0 else 0.0
        throughput.append((s.time, rate))
        gain = _efficiency(s.batch, base, s.grad_sqr, s.grad_var)
        if gain is not None:
            goodput.append((s.time, rate * gain))
        if s.loss is not None:
            loss.append((s.time, s.loss))
    code, reason = split_reason(detail.pending_reason)
    workers = int((detail.spec or {}).get("workers", 1) or 1)
    return {
        "job": detail,
        "reason_code": code,
        "reason": reason,
        "ranks": list(range(min(workers, 64))),
        "attempts": list(range(max(0, detail.attempt - 1), -1, -1)),
        "live_attempt": max(0, detail.attempt - 1),
        "checkpoints": checkpoints(logs, detail.id),
        "gpus_over_time": _gpus_over_time(detail, now),
        "world": world,
        "throughput": throughput,
        "goodput": goodput,
        "loss": loss,
        "writable": who.role.value != "viewer" and who.job_id is None,
        "ended": detail.state in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED),
    }


# ---- usage ----------------------------------------------------------------------------------


def usage_page(
    session: Session, who: Principal, now: float, *, since: float, until: float, by: str
) -> dict[str, Any]:
    series = usage.series(session, tenant_id=who.tenant_id, since=since, until=until,
                          buckets=48, by=by, now=now)  # fmt: skip
    totals = usage.usage(session, tenant_id=who.tenant_id, since=since, until=until, by=by,
                         now=now)  # fmt: skip
    capacity = sum(len(n.devices) for n in session.scalars(select(Node)))
    width = (series.edges[1] - series.edges[0]) / 3600.0 if len(series.edges) > 1 else 1.0
    mids = [(a + b) / 2 for a, b in zip(series.edges, series.edges[1:], strict=False)]
    utilisation = [
        (t, 100.0 * h / (capacity * width)) if capacity else (t, 0.0)
        for t, h in zip(mids, series.cluster_gpu_hours, strict=True)
    ]
    ours = [sum(v[i] for v in series.gpu_hours.values()) for i in range(len(mids))]
    share = [(t, 100.0 * h / (capacity * width)) if capacity else (t, 0.0)
             for t, h in zip(mids, ours, strict=True)]  # fmt: skip
    return {
        "by": by,
        "since": since,
        "until": until,
        "rows": totals,
        "stacked": {
            key: list(zip(mids, values, strict=True))
            for key, values in sorted(series.gpu_hours.items(), key=lambda kv: -sum(kv[1]))
        },
        "utilisation": utilisation,
        "share": share,
        "capacity": capacity,
        "bucket_hours": width,
    }


# ---- the tenant (admins) and tokens ---------------------------------------------------------


def admin(session: Session, who: Principal, now: float) -> dict[str, Any]:
    tenant = tenancy.tenant_view(session, who, now=now)
    spent = None
    if tenant.budget_gpu_hours is not None and tenant.budget_period_s:
        rows = usage.usage(session, tenant_id=who.tenant_id, since=now - tenant.budget_period_s,
                           until=now, by="tenant", now=now)  # fmt: skip
        spent = sum(r.gpu_seconds for r in rows) / 3600.0
    events, more = audit.events(session, tenant_id=who.tenant_id, since=now - 7 * 86400,
                                limit=1000)  # fmt: skip
    return {
        "tenant": tenant,
        "spent": spent,
        "tokens": tokens.list_tokens(session, who).tokens,
        "audit": list(reversed(events))[:100],
        "audit_more": more or len(events) > 100,
    }


def own_tokens(session: Session, who: Principal) -> dict[str, Any]:
    """The caller's own tokens (an admin sees the tenant's on the Tenant page)."""
    mine = [t for t in tokens.list_tokens(session, who).tokens if t.user == who.user_name]
    return {"tokens": mine}
