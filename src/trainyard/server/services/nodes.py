"""Operator actions on nodes: list them; cordon one (no new job placed on it; running jobs
keep running), drain one (cordoned, and the jobs running there are evicted by the platform:
they checkpoint on the notice `preempt` and are requeued, to run elsewhere) and return it to
service (undrain), or forget one that left for good (remove). Same conventions as
`trainyard.server.services.admin`: plain results, `AdminError` naming the field for bad
input, nothing written on error. The scheduler reads
`Node.schedulable` every round and the platform `Node.drained_at` every step, so a running
server honours them at once.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from trainyard.errors import suggest
from trainyard.server.db import Health, Job, Node
from trainyard.server.lifecycle import HOLDS_DEVICES
from trainyard.server.services.admin import AdminError


@dataclass(frozen=True)
class NodeInfo:
    name: str
    schedulable: bool
    health: str
    virtual: bool
    gpus: int
    gpu_type: str
    jobs: int  # jobs holding devices on it
    last_heartbeat_at: float | None
    drained_at: float | None = None
    drain_reason: str | None = None
    unhealthy_gpus: tuple[int, ...] = ()  # device indices a GPU fault took out
    spare: bool = False  # a hot spare this round (`trainyard up --spares N`)

    @property
    def state(self) -> str:
        """schedulable (spare: kept idle for recovering jobs), cordoned, draining (jobs still
        there) or drained."""
        if self.schedulable:
            return "spare" if self.spare else "schedulable"
        if self.drained_at is None:
            return "cordoned"
        return "draining" if self.jobs else "drained"


def _node(session: Session, name: str) -> Node:
    row = session.scalars(select(Node).where(Node.name == name)).one_or_none()
    if row is None:
        names = list(session.scalars(select(Node.name)))
        close = suggest(name, names)
        hint = (
            f"; did you mean {close[0]!r}?" if close else f"; nodes: {', '.join(names) or 'none'}"
        )
        raise AdminError("node", f"no node named {name!r}{hint}")
    return row


def _jobs_on(session: Session, name: str) -> int:
    holding = session.scalars(select(Job.placement).where(Job.state.in_(HOLDS_DEVICES)))
    return sum(1 for placement in holding if any(p.get("node") == name for p in placement or ()))


def _info(session: Session, row: Node) -> NodeInfo:
    devices = list(row.devices)
    return NodeInfo(
        name=row.name,
        schedulable=row.schedulable,
        health=str(getattr(row.health, "value", row.health)),
        virtual=bool(row.virtual or any(d.virtual for d in devices)),
        gpus=len(devices),
        gpu_type=devices[0].gpu_type if devices else "-",
        jobs=_jobs_on(session, row.name),
        last_heartbeat_at=row.last_heartbeat_at,
        drained_at=row.drained_at,
        drain_reason=row.drain_reason,
        unhealthy_gpus=tuple(d.index for d in devices if d.health != Health.HEALTHY),
        spare=row.spare,
    )


def list_nodes(session: Session) -> list[NodeInfo]:
    rows = session.scalars(select(Node).options(selectinload(Node.devices)).order_by(Node.name))
    return [_info(session, row) for row in rows]


def set_schedulable(session: Session, name: str, schedulable: bool) -> NodeInfo:
    """Cordon (`schedulable=False`) or return a node to service (which ends a drain too,
    and takes its GPUs that a fault marked unhealthy back: the GPU checks drain it again if
    the fault is still there); idempotent."""
    row = _node(session, name)
    row.schedulable = schedulable
    if schedulable:
        row.drained_at = None
        row.drain_reason = None
        for device in row.devices:  # the operator says it is repaired; checks say if not
            if device.health == Health.UNHEALTHY:
                device.health = Health.HEALTHY
    session.flush()
    return _info(session, row)


def drain(session: Session, name: str, now: float, reason: str | None = None) -> NodeInfo:
    """Cordon the node and have its running jobs evicted; idempotent (the first time and
    its reason stay; a reason given later is kept if there was none)."""
    if reason is not None and len(reason) > 255:
        raise AdminError("reason", f"at most 255 characters (got {len(reason)})")
    row = _node(session, name)
    row.schedulable = False
    if row.drained_at is None:
        row.drained_at = now
    if reason and not row.drain_reason:
        row.drain_reason = reason
    session.flush()
    return _info(session, row)


def remove(session: Session, name: str) -> NodeInfo:
    """Forget a node that left for good (a Ray worker gone, this machine's node after the
    server moved to Ray): only a lost one on which no job holds devices. It comes back as a
    new node if its executor reports it again."""
    row = _node(session, name)
    info = _info(session, row)
    if row.health != Health.LOST:
        raise AdminError(
            "node",
            f"node {name!r} is {info.health}, not lost: only a node that stopped reporting is "
            "removed (cordon or drain a live one)",
        )
    if info.jobs:
        raise AdminError(
            "node",
            f"{info.jobs} job(s) still hold devices on node {name!r}; cancel or requeue them first",
        )
    session.delete(row)
    session.flush()
    return info


def draining_nodes(session: Session) -> set[str]:
    """The names of the nodes being drained."""
    return set(session.scalars(select(Node.name).where(Node.drained_at.is_not(None))))


__all__ = ["NodeInfo", "drain", "draining_nodes", "list_nodes", "remove", "set_schedulable"]
