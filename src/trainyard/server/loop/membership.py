"""Which nodes exist and are alive: the server's own machine, or what a Ray cluster reports.

- `register_local(session, inventory, name, now)`: the local executor's machine, stored
  with its devices unless a node of that name exists.
- `sync(session, infos, executor, now)`: an executor of many machines (`Executor.nodes`).
  A node new to the database is stored with its devices (and its topology path from its
  labels); a known node that is alive is HEALTHY again if it was LOST (a node that
  restarted), gains devices it did not have, and gets a heartbeat; a node the executor
  reports dead, or no longer reports at all, becomes LOST. The scheduler places nothing on
  a LOST node (`scheduling._nodes`); jobs running there fail as their ranks are lost and
  are requeued at no cost (`Platform`). Cordons and drains are the operator's and are kept.

- `beat_local(session, name, now)`: the local executor's heartbeats. The server's own
  node gets a heartbeat (and is HEALTHY again if it was LOST: the server came back); any
  other node of the local executor whose last heartbeat is older than `LOCAL_LOST_AFTER_S`
  becomes LOST (its server stopped: a renamed host, or a machine that is gone), and the
  jobs recorded as running there are recovered like those of any lost node.

Each change is logged, recorded in the audit trail as the system's (`actor` "trainyard":
`node.joined`, `node.lost`, `node.back`) and returned (`Changes`), so the caller can wake
the loop.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from trainyard.exec.base import NodeInfo
from trainyard.exec.gpus import GpuInventory
from trainyard.server.db import Device, Health, Node
from trainyard.server.services import audit

log = logging.getLogger(__name__)

HEARTBEAT_WRITE_S = 5.0  # an alive node's last_heartbeat_at is written at most this often
LOCAL_LOST_AFTER_S = 30.0  # a local node without a heartbeat for this long is LOST
SYSTEM = "trainyard"  # the audit trail's actor for what the platform itself does


@dataclass
class Changes:
    joined: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    back: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.joined or self.lost or self.back)


def _event(session: Session, action: str, name: str, now: float, why: str) -> None:
    audit.record(session, actor=SYSTEM, action=action, target=name, now=now,
                 details={"why": why})  # fmt: skip


def register_local(session: Session, inventory: GpuInventory, name: str, now: float) -> Node:
    """Store this machine and its devices unless a node of that name exists (the row)."""
    row = session.scalars(select(Node).where(Node.name == name)).first()
    if row is not None:
        return row
    row = Node(
        name=name,
        cpus=float(inventory.cpus),
        memory_gb=float(inventory.memory_gb),
        virtual=inventory.virtual,
        registered_at=now,
        last_heartbeat_at=now,
    )
    row.devices = [
        Device(index=g.index, gpu_type=g.name, memory_gb=g.memory_gb, uuid=g.uuid[:64],
               virtual=g.virtual)
        for g in inventory.gpus
    ]  # fmt: skip
    session.add(row)
    return row


def _devices(info: NodeInfo, have: Iterable[int]) -> list[Device]:
    known = set(have)
    return [
        Device(index=i, gpu_type=info.gpu_type[:64], memory_gb=info.gpu_memory_gb,
               virtual=info.virtual)
        for i in range(info.gpus)
        if i not in known
    ]  # fmt: skip


def sync(session: Session, infos: list[NodeInfo], executor: str, now: float) -> Changes:
    """Bring the stored nodes in line with what the executor reports (module docstring)."""
    changes = Changes()
    rows = {row.name: row for row in session.scalars(select(Node))}
    alive = {n.name: n for n in infos if n.alive}
    for name, info in alive.items():
        row = rows.get(name)
        if row is None:
            row = Node(
                name=name[:128],
                address=info.address[:255],
                executor=executor,
                cpus=info.cpus,
                memory_gb=info.memory_gb,
                topology_path=list(info.topology),
                virtual=info.virtual,
                registered_at=now,
                last_heartbeat_at=now,
            )
            row.devices = _devices(info, ())
            session.add(row)
            changes.joined.append(name)
            log.info("node %s joined: %d GPUs (%s)", name, info.gpus, info.gpu_type)
            _event(session, "node.joined", name, now, f"{info.gpus} x {info.gpu_type}")
            continue
        if row.health == Health.LOST:
            row.health = Health.HEALTHY
            changes.back.append(name)
            log.info("node %s is back", name)
            _event(session, "node.back", name, now, f"{executor} reports it alive again")
        row.executor = executor
        row.address = info.address[:255]
        row.cpus, row.memory_gb = info.cpus, info.memory_gb
        if info.topology and list(row.topology_path or ()) != list(info.topology):
            row.topology_path = list(info.topology)
        added = _devices(info, (d.index for d in row.devices))
        if added:
            row.devices.extend(added)
        for device in row.devices:
            want = Health.HEALTHY if device.index < info.gpus else Health.LOST
            if device.health in (Health.HEALTHY, Health.LOST) and device.health != want:
                device.health = want
        last = row.last_heartbeat_at
        if last is None or now - last >= HEARTBEAT_WRITE_S or name in changes.back:
            row.last_heartbeat_at = now
    for name, row in rows.items():
        if name in alive or row.health == Health.LOST:
            continue
        row.health = Health.LOST
        changes.lost.append(name)
        log.warning("node %s lost (its executor no longer reports it alive)", name)
        _event(session, "node.lost", name, now, f"{executor} no longer reports it alive")
    return changes


def beat_local(
    session: Session, name: str, now: float, lost_after_s: float = LOCAL_LOST_AFTER_S
) -> Changes:
    """The local executor's heartbeats (module docstring)."""
    changes = Changes()
    for row in session.scalars(select(Node).where(Node.executor == "local")):
        if row.name == name:
            row.last_heartbeat_at = now
            if row.health == Health.LOST:
                row.health = Health.HEALTHY
                changes.back.append(name)
                _event(session, "node.back", name, now, "its server is running again")
            continue
        last = row.last_heartbeat_at if row.last_heartbeat_at is not None else row.registered_at
        if row.health != Health.LOST and now - last > lost_after_s:
            row.health = Health.LOST
            changes.lost.append(row.name)
            log.warning("node %s lost (no heartbeat for %.0f s)", row.name, now - last)
            _event(session, "node.lost", row.name, now,
                   f"no heartbeat from its server for {now - last:.0f} s")  # fmt: skip
    return changes
