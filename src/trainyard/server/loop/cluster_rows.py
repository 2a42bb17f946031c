"""The cluster's nodes and queues as the scheduling core sees them, read from the database.

- `nodes(session)`: every node, with one device per index `0..max(index)`; devices that are
  not healthy (or missing indices) are `unavailable`, and a node that is not healthy or not
  `schedulable` is given as not schedulable (its running jobs still hold their devices).
  Also the depth of the nodes' `topology_path`; a node whose path is shorter (one registered
  by an executor that knows no topology, beside nodes of one that does: a home first run on
  Ray, then on this machine alone) is given domains of its own at the levels it does not
  name, so it shares no domain with another node.
- `queues(session, usage)`: every queue with its parent's name, guarantee, limit, weight and
  usage (the fair-share history when given, else the stored figure), and id -> name. Queues
  on a cycle of parents (`in_cycles`) are given as roots, with an error in the log: a bad
  tree must not stop every round.
- `topology_of(depth)`: topology levels are not stored yet: `level0`, `level1`, ...
"""

from __future__ import annotations

import logging
from dataclasses import replace

from sqlalchemy import select
from sqlalchemy.orm import Session

from trainyard import core
from trainyard.core import Topology
from trainyard.server.db import Health
from trainyard.server.db import Node as NodeRow
from trainyard.server.db import Queue as QueueRow

__all__ = ["in_cycles", "nodes", "padded", "queues", "topology_of"]

log = logging.getLogger(__name__)


def nodes(session: Session) -> tuple[tuple[core.Node, ...], int]:
    out = []
    depth = 0
    for row in session.scalars(select(NodeRow).order_by(NodeRow.name)):
        devices = list(row.devices)
        count = max((d.index for d in devices), default=-1) + 1
        healthy = {d.index for d in devices if d.health == Health.HEALTHY}
        first = devices[0] if devices else None
        path = tuple(str(p) for p in row.topology_path or ())
        depth = max(depth, len(path))
        out.append(
            core.Node(
                name=row.name,
                gpus=count,
                gpu_type=first.gpu_type if first else "gpu",
                gpu_memory_gb=first.memory_gb if first else 0.0,
                cpus=row.cpus,
                memory_gb=row.memory_gb,
                path=path,
                island_size=row.island_size,
                schedulable=row.schedulable and row.health == Health.HEALTHY,
                unavailable=tuple(i for i in range(count) if i not in healthy),
                virtual=row.virtual or any(d.virtual for d in devices),
                down=_down(row),
            )
        )
    out = [
        n if len(n.path) == depth else replace(n, path=padded(n.path, depth, n.name)) for n in out
    ]
    return tuple(out), depth


def padded(path: tuple[str, ...], depth: int, name: str) -> tuple[str, ...]:
    """`path` with a domain of node `name`'s own at each of the `depth` levels it does not name
    (found by an outside review: a home's nodes of two executors, with paths of different
    depths, made the core refuse every snapshot, so nothing was scheduled again)."""
    return path + tuple(f"~{name}" for _ in range(depth - len(path)))


def queues(
    session: Session, usage: dict[int, float]
) -> tuple[tuple[core.Queue, ...], dict[int, str]]:
    rows = list(session.scalars(select(QueueRow).order_by(QueueRow.id)))
    names = {q.id: q.name for q in rows}
    cut = in_cycles({q.id: q.parent_id for q in rows})
    if cut:
        log.error("queue tree: %s form a cycle of parents; scheduled as roots until an admin "
                  "fixes it (trainyard admin queue set NAME --parent ...)",
                  ", ".join(sorted(names[i] for i in cut)))  # fmt: skip
    queues = tuple(
        core.Queue(
            name=q.name,
            parent=names.get(q.parent_id) if q.parent_id is not None and q.id not in cut else None,
            guaranteed=q.guaranteed,
            limit=q.limit,
            weight=q.weight,
            usage=usage.get(q.id, 0.0) if usage else q.usage,
        )
        for q in rows
    )
    return queues, names


def in_cycles(parents: dict[int, int | None]) -> set[int]:
    """The queues on a cycle of parents (a tree stored before changes of it were locked,
    `services/admin_queues.py`): the core refuses such a snapshot, so every round failed."""
    cut: set[int] = set()
    for start in parents:
        path: list[int] = []
        node: int | None = start
        while node is not None and node not in path and node not in cut:
            path.append(node)
            node = parents.get(node)
        if node is not None and node in path:
            cut.update(path[path.index(node) :])
    return cut


def topology_of(depth: int) -> Topology:
    """The topology of nodes whose `topology_path` has `depth` parts: levels `level0`, ..."""
    return Topology(levels=tuple(f"level{i}" for i in range(depth)))


def _down(row: NodeRow) -> str:
    """How reasons name a node that takes no work (`core.Node.down`): lost, cordoned (not
    schedulable, its jobs left running), or "" (drained, or schedulable)."""
    if row.health == Health.LOST:
        return "lost"
    return "cordoned" if not row.schedulable and row.drained_at is None else ""
