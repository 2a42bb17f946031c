"""The platform's view of its nodes: which exist and are alive, and whether their GPUs work.

`NodeWatch` owns, for one `Platform`:
- the local executor's machine (`register`) and its heartbeats (`membership.beat_local`,
  at most every `membership.HEARTBEAT_WRITE_S`; stale local nodes become LOST);
- an executor of many machines (`Executor.nodes`, e.g. Ray): its nodes into the database
  (`membership.sync`), at most every `nodes_every_s`, and only when they changed or a
  heartbeat is due;
- GPU health on the local machine (`exec/gpuhealth.py`, NVML), every `GPU_CHECK_EVERY_S`:
  a GPU found lost, with a critical XID or with uncorrectable ECC errors is marked
  UNHEALTHY (the scheduler places nothing on it) and its node is drained with the fault as
  the reason, so the jobs there are evicted, checkpoint and run elsewhere; the audit trail
  gets a `node.gpu_fault` entry by "trainyard". A GPU already UNHEALTHY is not reported
  again; `admin node undrain` takes it back, and the next check drains again if the fault
  is still there. On Ray the executor checks each node's GPUs there (`exec/ray/health.py`,
  `Executor.gpu_problems`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from trainyard.exec.base import Executor, NodeInfo
from trainyard.exec.gpuhealth import GpuHealth, GpuProblem
from trainyard.exec.gpus import GpuInventory
from trainyard.server.db import Health, Node
from trainyard.server.loop import membership
from trainyard.server.services import audit
from trainyard.server.services import nodes as node_service

log = logging.getLogger(__name__)

GPU_CHECK_EVERY_S = 10.0


def record_faults(session: Session, name: str, problems: list[GpuProblem], now: float) -> str:
    """Mark the faulty GPUs of node `name` UNHEALTHY and drain it; the reason ("" when every
    problem was known already)."""
    row = session.scalars(select(Node).where(Node.name == name)).one_or_none()
    if row is None:
        return ""
    devices = {d.index: d for d in row.devices}
    new = []
    for p in problems:
        device = devices.get(p.index)
        if device is not None:
            if device.health == Health.HEALTHY:
                device.health = Health.UNHEALTHY
                new.append(p)
        elif row.drained_at is None:  # a fault NVML could not place on one GPU
            new.append(p)
    if not new:
        return ""
    reason = "; ".join(f"GPU {p.index}: {p.detail}" if p.index >= 0 else p.detail for p in new)
    node_service.drain(session, name, now, reason[:255])
    found = [[p.index, p.kind, p.detail] for p in new]
    audit.record(session, actor=membership.SYSTEM, action="node.gpu_fault", target=name,
                 now=now, details={"problems": found})  # fmt: skip
    log.warning("node %s drained: %s", name, reason)
    return reason


class NodeWatch:
    """See the module docstring."""

    def __init__(
        self,
        session_factory: Callable[[], Session],
        executor: Executor,
        clock: Callable[[], float],
        nodes_every_s: float = 0.5,
        gpu_health: GpuHealth | None = None,
    ) -> None:
        self.session_factory = session_factory
        self.executor = executor
        self.clock = clock
        self.nodes_every_s = nodes_every_s
        self.gpu_health = gpu_health  # started, on this machine's GPUs (None: no checks)
        self.node_name: str | None = None  # this machine, for the local executor
        self.virtual = False  # its devices (or the executor's nodes) are declared
        self._at = float("-inf")
        self._seen: tuple[tuple[NodeInfo, ...], float] = ((), float("-inf"))
        self._gpus_at = float("-inf")

    def register(self, inventory: GpuInventory, name: str | None = None) -> str:
        """Store this machine and its devices unless a node of that name exists; the name."""
        name = name or inventory.hostname
        with self.session_factory() as s:
            row = membership.register_local(s, inventory, name, self.clock())
            try:
                s.commit()
            except IntegrityError:  # registered concurrently: use that one
                s.rollback()
                row = membership.register_local(s, inventory, name, self.clock())
            self.virtual = bool(row.virtual or any(d.virtual for d in row.devices))
        self.node_name = name
        return name

    def sync(self, now: float, force: bool = False) -> membership.Changes:
        """The executor's nodes (or this machine's heartbeat) into the database."""
        if not force and now - self._at < self.nodes_every_s:
            return membership.Changes()
        infos = self.executor.nodes()
        if infos is None:  # the local executor: this machine's heartbeat
            return self._beat(now, force)
        self._at = now
        # the database is read and written only when the nodes changed, or for heartbeats
        seen = tuple(infos)
        fresh = now - self._seen[1] < membership.HEARTBEAT_WRITE_S
        if not force and fresh and seen == self._seen[0]:
            return membership.Changes()
        with self.session_factory() as s:
            changes = membership.sync(s, infos, self.executor.name, now)
            s.commit()
        self._seen = (seen, now)
        self.virtual = any(n.virtual for n in infos)
        return changes

    def _beat(self, now: float, force: bool) -> membership.Changes:
        if self.node_name is None or (
            not force and now - self._seen[1] < membership.HEARTBEAT_WRITE_S
        ):
            return membership.Changes()
        self._at = now
        with self.session_factory() as s:
            changes = membership.beat_local(s, self.node_name, now)
            s.commit()
        self._seen = ((), now)
        return changes

    def check_gpus(self, now: float, force: bool = False) -> str:
        """Look at the GPUs (every GPU_CHECK_EVERY_S): this machine's, and those the executor
        checks on its nodes; "node: reason" of each node a new fault drained, or ""."""
        if not force and now - self._gpus_at < GPU_CHECK_EVERY_S:
            return ""
        self._gpus_at = now
        found = self.executor.gpu_problems()  # an executor of many machines checks its own
        if self.gpu_health is not None and self.node_name is not None:
            found[self.node_name] = self.gpu_health.check()
        found = {node: problems for node, problems in found.items() if problems}
        if not found:
            return ""
        reasons = []
        with self.session_factory() as s:
            for node, problems in sorted(found.items()):
                reason = record_faults(s, node, problems, now)
                if reason:
                    reasons.append(f"{node}: {reason}")
            s.commit()
        return "; ".join(reasons)

    def close(self) -> None:
        if self.gpu_health is not None:
            self.gpu_health.close()
