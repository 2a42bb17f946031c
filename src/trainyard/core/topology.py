"""The static shape of the cluster, indexed for fast placement.

`Layout` is built once from the nodes and the topology (and can be reused across cycles while
they do not change): integer node indices, device classes, the domain tree (one list of domains
per topology level, with children), and the NVLink island masks of every node. It holds no
free/used information; that is `state.ClusterState`, which changes during a cycle.

Level numbering: 0 is the outermost topology level (e.g. spine), `depth - 1` the innermost
(e.g. leaf switch). The whole cluster is the implicit root above level 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from trainyard.core.resources import DeviceClass, full_mask, mask_of
from trainyard.core.types import Node, Topology

ISLAND: Final = "island"
NODE: Final = "node"
CLUSTER: Final = "cluster"


@dataclass(slots=True)
class Layout:
    """Index of nodes, device classes and domains. Read-only after `build_layout`."""

    nodes: tuple[Node, ...]
    levels: tuple[str, ...]
    node_index: dict[str, int]
    classes: list[DeviceClass]
    class_of_node: list[int]  # -1 for nodes without GPUs
    class_capacity: list[int]  # usable GPUs of each class
    class_node_max: list[int]  # largest node of each class (GPUs)
    usable_mask: list[int]  # per node: devices that may be used at all
    islands: list[tuple[int, ...]]  # per node: island device masks
    domain_of: list[list[int]]  # [level][node] -> domain id at that level
    domain_names: list[list[str]]  # [level][domain] -> name
    children: list[list[list[int]]]  # [level][domain] -> child domains (or nodes at last level)
    domain_mask: list[list[int]]  # [level][domain] -> bitmask of its nodes
    top: list[int]  # children of the root: level-0 domains, or all nodes when depth == 0
    domain_capacity: list[list[list[int]]]  # [level][class][domain] -> usable GPUs
    leaf_of: list[int]  # per node: its innermost domain (-1 when there are no levels)
    names: list[str]  # per node: its name
    multi_island: list[bool]  # per class: some node of it has more than one NVLink island

    @property
    def depth(self) -> int:
        return len(self.levels)

    def level_index(self, name: str) -> int | None:
        """Index of a topology level name; `node`/`island` -> depth; `cluster` -> -1."""
        if name in (NODE, ISLAND):
            return self.depth
        if name == CLUSTER:
            return -1
        for i, level in enumerate(self.levels):
            if level == name:
                return i
        return None

    def classes_for(self, gpu_types: tuple[str, ...], min_memory: float) -> tuple[int, ...]:
        """Device classes acceptable for a job, in the job's order of preference."""
        if gpu_types:
            out = [
                c
                for t in gpu_types
                for c, (ctype, mem) in enumerate(self.classes)
                if ctype == t and mem >= min_memory
            ]
        else:
            out = [c for c, (_t, mem) in enumerate(self.classes) if mem >= min_memory]
        return tuple(out)


def build_layout(nodes: tuple[Node, ...], topology: Topology) -> Layout:
    """Index `nodes` under `topology` (the snapshot has been validated)."""
    levels = topology.levels
    depth = len(levels)
    classes: list[DeviceClass] = []
    class_ids: dict[DeviceClass, int] = {}
    class_of_node: list[int] = []
    usable: list[int] = []
    islands: list[tuple[int, ...]] = []
    for node in nodes:
        if node.gpus == 0:
            class_of_node.append(-1)
        else:
            key = (node.gpu_type, float(node.gpu_memory_gb))
            if key not in class_ids:
                class_ids[key] = len(classes)
                classes.append(key)
            class_of_node.append(class_ids[key])
        open_ = node.schedulable and not node.spare  # a spare: only core/spares.py uses it
        ok = full_mask(node.gpus) & ~mask_of(node.unavailable) if open_ else 0
        usable.append(ok)
        size = node.island_size or node.gpus or 1
        islands.append(
            tuple(full_mask(size) << (k * size) for k in range(max(1, node.gpus // size)))
        )

    ncls = len(classes)
    capacity = [0] * ncls
    node_max = [0] * ncls
    for i in range(len(nodes)):
        c = class_of_node[i]
        if c >= 0:
            capacity[c] += usable[i].bit_count()
            node_max[c] = max(node_max[c], usable[i].bit_count())

    domain_of: list[list[int]] = []
    domain_names: list[list[str]] = []
    domain_keys: list[dict[tuple[str, ...], int]] = []
    for level in range(depth):
        ids: dict[tuple[str, ...], int] = {}
        names: list[str] = []
        per_node: list[int] = []
        for node in nodes:
            prefix = node.path[: level + 1]
            if prefix not in ids:
                ids[prefix] = len(names)
                names.append("/".join(prefix))
            per_node.append(ids[prefix])
        domain_of.append(per_node)
        domain_names.append(names)
        domain_keys.append(ids)

    children: list[list[list[int]]] = []
    for level in range(depth):
        kids: list[list[int]] = [[] for _ in domain_names[level]]
        if level == depth - 1:
            for i in range(len(nodes)):
                kids[domain_of[level][i]].append(i)
        else:
            seen: set[int] = set()
            for i in range(len(nodes)):
                child = domain_of[level + 1][i]
                if child not in seen:
                    seen.add(child)
                    kids[domain_of[level][i]].append(child)
        children.append(kids)
    top = list(range(len(nodes))) if depth == 0 else sorted(set(domain_of[0]))

    dcap: list[list[list[int]]] = []
    for level in range(depth):
        per_class = [[0] * len(domain_names[level]) for _ in range(ncls)]
        for i in range(len(nodes)):
            c = class_of_node[i]
            if c >= 0:
                per_class[c][domain_of[level][i]] += usable[i].bit_count()
        dcap.append(per_class)

    masks: list[list[int]] = [[0] * len(domain_names[level]) for level in range(depth)]
    for level in range(depth):
        row = masks[level]
        for i, d in enumerate(domain_of[level]):
            row[d] |= 1 << i

    return Layout(
        nodes=nodes,
        levels=levels,
        node_index={n.name: i for i, n in enumerate(nodes)},
        classes=classes,
        class_of_node=class_of_node,
        class_capacity=capacity,
        class_node_max=node_max,
        usable_mask=usable,
        islands=islands,
        domain_of=domain_of,
        domain_names=domain_names,
        children=children,
        domain_mask=masks,
        top=top,
        domain_capacity=dcap,
        leaf_of=list(domain_of[depth - 1]) if depth else [-1] * len(nodes),
        names=[n.name for n in nodes],
        multi_island=[
            any(len(islands[i]) > 1 for i in range(len(nodes)) if class_of_node[i] == c)
            for c in range(ncls)
        ],
    )
