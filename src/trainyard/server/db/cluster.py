"""What jobs run in and on: hierarchical queues, nodes and their devices.

Invariants:
- Queue names are unique across the cluster (the scheduling core addresses queues by name);
  `parent_id` forms a tree, `guaranteed`/`limit` are GPU counts, `weight` a fair-share weight,
  `usage` the decayed historical use the scheduler loop maintains (a share of the cluster).
- A node's devices have distinct `index` values; `virtual` marks devices that were declared
  (`--virtual-gpus N`) rather than discovered, and every output must say so.
- Health is whatever the node's executor last reported; the scheduler loop reads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import ForeignKey, String, UniqueConstraint, false
from sqlalchemy.orm import Mapped, mapped_column, relationship

from trainyard.server.db.base import Base, Health, Timestamp, str_enum

if TYPE_CHECKING:
    from trainyard.server.db.tenancy import Tenant


class Queue(Base):
    """A node of the queue tree; jobs are submitted to queues."""

    __tablename__ = "queues"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    tenant_id: Mapped[int | None] = mapped_column(
        ForeignKey("tenants.id", ondelete="CASCADE"), index=True, default=None
    )
    parent_id: Mapped[int | None] = mapped_column(
        ForeignKey("queues.id", ondelete="RESTRICT"), index=True, default=None
    )
    guaranteed: Mapped[int] = mapped_column(default=0)
    limit: Mapped[int | None] = mapped_column(default=None)
    weight: Mapped[float] = mapped_column(default=1.0)
    usage: Mapped[float] = mapped_column(default=0.0)
    # the highest priority its jobs may ask for (None: no limit of its own; ancestors' apply)
    max_priority: Mapped[int | None] = mapped_column(default=None)
    # the priority of its jobs whose spec names none (None: the nearest ancestor's, else 0)
    default_priority: Mapped[int | None] = mapped_column(default=None)
    created_at: Mapped[float] = mapped_column(Timestamp)

    tenant: Mapped[Tenant | None] = relationship()
    parent: Mapped[Queue | None] = relationship(remote_side=[id], back_populates="children")
    children: Mapped[list[Queue]] = relationship(back_populates="parent")


class Node(Base):
    """A machine an executor manages; its GPUs are the `devices`."""

    __tablename__ = "nodes"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    address: Mapped[str] = mapped_column(String(255), default="")
    executor: Mapped[str] = mapped_column(String(32), default="local")
    cpus: Mapped[float] = mapped_column(default=0.0)
    memory_gb: Mapped[float] = mapped_column(default=0.0)
    topology_path: Mapped[list[Any]] = mapped_column(default=list)
    island_size: Mapped[int] = mapped_column(default=0)
    schedulable: Mapped[bool] = mapped_column(default=True)
    # set by `admin node drain`: the jobs running here are evicted (None: not draining)
    drained_at: Mapped[float | None] = mapped_column(Timestamp, default=None)
    # why: the operator's `--reason`, or the GPU fault that drained it (loop/gpuwatch.py)
    drain_reason: Mapped[str | None] = mapped_column(String(255), default=None)
    virtual: Mapped[bool] = mapped_column(default=False)
    # a hot spare this round (`trainyard up --spares N`; loop/spares.py), for operators to see
    spare: Mapped[bool] = mapped_column(default=False, server_default=false())
    health: Mapped[Health] = mapped_column(str_enum(Health, 16), default=Health.HEALTHY)
    registered_at: Mapped[float] = mapped_column(Timestamp)
    last_heartbeat_at: Mapped[float | None] = mapped_column(Timestamp, default=None)

    devices: Mapped[list[Device]] = relationship(
        back_populates="node",
        cascade="all, delete-orphan",
        passive_deletes=True,
        order_by="Device.index",
    )


class Device(Base):
    """One accelerator of a node."""

    __tablename__ = "devices"
    __table_args__ = (UniqueConstraint("node_id", "index", name="uq_devices_node_id_index"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    node_id: Mapped[int] = mapped_column(ForeignKey("nodes.id", ondelete="CASCADE"))
    index: Mapped[int]
    gpu_type: Mapped[str] = mapped_column(String(64))
    memory_gb: Mapped[float]
    uuid: Mapped[str | None] = mapped_column(String(64), default=None)
    virtual: Mapped[bool] = mapped_column(default=False)
    health: Mapped[Health] = mapped_column(str_enum(Health, 16), default=Health.HEALTHY)

    node: Mapped[Node] = relationship(back_populates="devices")
