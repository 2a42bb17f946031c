"""Simulated clusters: the `--cluster SPEC` grammar and YAML cluster files.

This module owns turning a cluster description into core `Node`s and a `Topology` (the devices
are always virtual: the simulator has no hardware behind them).

Grammar of SPEC (whitespace ignored), one or more groups joined by ``+``::

    NODESxGPUS[:TYPE][@NODES_PER_LEAF]

* ``16x4``: 16 nodes of 4 GPUs (type ``gpu``), one flat network;
* ``16x4:v100``: the same with V100s;
* ``8x4:k80+8x4:p100+8x4:v100``: a heterogeneous cluster (Gavel's);
* ``512x8@32``: 512 nodes of 8 GPUs, 32 nodes per leaf switch (topology level ``leaf``).

Any other SPEC that names an existing ``.yaml``/``.yml``/``.json`` file is read as a scenario
file (docs/scenarios.md) and its ``nodes``, ``topology`` and ``queues`` are used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from trainyard.core import Node, Queue, Topology
from trainyard.scenario import load_scenario
from trainyard.scenario.schema import ScenarioError
from trainyard.sim.workload import WorkloadError

__all__ = ["Cluster", "parse_cluster"]

_GROUP: Final = re.compile(r"^(\d+)x(\d+)(?::([A-Za-z0-9_.-]+))?(?:@(\d+))?$")
MAX_GPUS: Final = 1_000_000


@dataclass(frozen=True)
class Cluster:
    """Nodes (virtual devices), their topology, queues from a file (if any), and the SPEC."""

    nodes: tuple[Node, ...]
    topology: Topology
    spec: str
    queues: tuple[Queue, ...] = ()

    @property
    def gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    @property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(sorted({n.gpu_type for n in self.nodes}))


def _from_file(path: Path) -> Cluster:
    try:
        scenario = load_scenario(path)
    except ScenarioError as exc:
        raise WorkloadError("--cluster", str(exc)) from None
    snap = scenario.snapshot
    nodes = tuple(replace(n, virtual=True) for n in snap.nodes)
    return Cluster(nodes, snap.topology, str(path), snap.queues)


def parse_cluster(spec: str) -> Cluster:
    """A `Cluster` from SPEC (see the module docstring); `WorkloadError` naming --cluster."""
    text = "".join(spec.split())
    if text.lower().endswith((".yaml", ".yml", ".json")):
        file = Path(spec)
        if not file.is_file():
            raise WorkloadError("--cluster", f"file {spec} not found")
        return _from_file(file)
    if not text:
        raise WorkloadError("--cluster", "empty; write NODESxGPUS, e.g. 16x4")
    nodes: list[Node] = []
    leaves = False
    parsed = []
    for group in text.split("+"):
        m = _GROUP.match(group)
        if m is None:
            raise WorkloadError(
                "--cluster",
                f"cannot read {group!r}; write NODESxGPUS[:TYPE][@NODES_PER_LEAF], e.g. "
                "16x4, 16x4:v100, 8x4:k80+8x4:v100 or 512x8@32, or give a YAML file",
            )
        count, gpus, kind, per_leaf = int(m[1]), int(m[2]), m[3] or "gpu", m[4]
        if count < 1 or gpus < 1:
            raise WorkloadError("--cluster", f"{group!r}: nodes and GPUs must be >= 1")
        if per_leaf is not None and int(per_leaf) < 1:
            raise WorkloadError("--cluster", f"{group!r}: nodes per leaf must be >= 1")
        leaves = leaves or per_leaf is not None
        parsed.append((count, gpus, kind.lower(), int(per_leaf) if per_leaf else None))
    if sum(c * g for c, g, _, _ in parsed) > MAX_GPUS:
        raise WorkloadError("--cluster", f"more than {MAX_GPUS:,} GPUs; use a smaller cluster")
    index = 0
    leaf_base = 0
    for count, gpus, kind, per_leaf in parsed:
        for k in range(count):
            path: tuple[str, ...] = ()
            if leaves:
                leaf = leaf_base + (k // per_leaf if per_leaf else 0)
                path = (f"leaf{leaf}",)
            prefix = f"{kind}-" if len(parsed) > 1 else ""
            nodes.append(Node(f"{prefix}n{index}", gpus, gpu_type=kind, path=path, virtual=True))
            index += 1
        if leaves:
            leaf_base += -(-count // per_leaf) if per_leaf else 1
    topology = Topology(levels=("leaf",)) if leaves else Topology()
    return Cluster(tuple(nodes), topology, text)
