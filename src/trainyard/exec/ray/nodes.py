"""The nodes of a Ray cluster as trainyard nodes: names, GPUs, types and topology labels.

`from_ray(records, virtual)` turns `ray.nodes()` records into `NodeInfo`s (pure: tested
without Ray). What each field comes from, labels first (`ray start --labels`, or
`Cluster.add_node(labels=...)`):

- name: label `trainyard.io/node`; else `ray-` and the first 12 characters of Ray's node id
  (a node that restarts without the label comes back as a new node);
- GPUs: Ray's `GPU` resource (whole GPUs; a fraction is rounded down);
- GPU type: label `trainyard.io/gpu-type`, else a custom resource `gpu_type_<T>`, else Ray's
  `accelerator_type:<T>` resource, else "gpu" (or "virtual" for declared GPUs);
- GPU memory (GB): label `trainyard.io/gpu-memory-gb`, else 80 for virtual GPUs, else 0
  (unknown);
- topology: labels `trainyard.io/rack` and `trainyard.io/leaf` (the path rack, leaf; nodes
  under one leaf switch are closest);
- virtual: the executor was told its GPUs are declared, not real (`--virtual-gpus`), or
  label `trainyard.io/virtual-gpus` is "1" / "true".

The head node (Ray's `node:__internal_head__` resource) is skipped when it offers no GPUs:
it runs the server, not jobs. A node Ray reports dead is kept with `alive=False`, unless
a live node of the same name exists (it restarted). Two live nodes claiming one name (a
mistyped label, or a machine posing as another to be sent its jobs) are not merged: the
one already known under the name keeps it (`prefer`), else the smaller Ray node id, the
same choice on every call, and `duplicates` lists the clash for the executor to report.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from trainyard.exec.base import NodeInfo

log = logging.getLogger(__name__)

LABEL = "trainyard.io/"
VIRTUAL_MEMORY_GB = 80.0
# The head's `_system_config` (`ray start --head --system-config`) that notices a dead node in
# about 1.5 s instead of about 14 s (docs/ray.md).
FAST_HEALTH_CHECKS = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 500,
    "health_check_timeout_ms": 500,
    "health_check_failure_threshold": 3,
}


def node_name(record: Mapping[str, Any]) -> str:
    labels = record.get("Labels") or {}
    name = labels.get(LABEL + "node")
    return str(name) if name else f"ray-{str(record.get('NodeID', ''))[:12]}"


def _gpu_type(labels: Mapping[str, str], resources: Mapping[str, float], virtual: bool) -> str:
    if labels.get(LABEL + "gpu-type"):
        return str(labels[LABEL + "gpu-type"])
    for prefix in ("gpu_type_", "accelerator_type:"):
        for key in sorted(resources):
            if key.startswith(prefix) and len(key) > len(prefix):
                return key[len(prefix) :]
    return "virtual" if virtual else "gpu"


def _truthy(value: object) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes")


def from_ray(
    records: Iterable[Mapping[str, Any]],
    virtual: bool = False,
    prefer: Mapping[str, str] | None = None,
) -> list[NodeInfo]:
    """`NodeInfo`s of `ray.nodes()` records, by name (see the module docstring); `prefer`:
    the Ray node id each name was given to before."""
    found: dict[str, NodeInfo] = {}
    for rec in records:
        resources: Mapping[str, float] = rec.get("Resources") or {}
        labels: Mapping[str, str] = rec.get("Labels") or {}
        gpus = int(resources.get("GPU", 0.0) + 1e-9)
        if "node:__internal_head__" in resources and gpus == 0:
            continue
        is_virtual = virtual or _truthy(labels.get(LABEL + "virtual-gpus", ""))
        memory = labels.get(LABEL + "gpu-memory-gb")
        try:
            gpu_memory = float(memory) if memory else (VIRTUAL_MEMORY_GB if is_virtual else 0.0)
        except ValueError:
            gpu_memory = 0.0
        topology = tuple(
            str(labels[LABEL + level]) for level in ("rack", "leaf") if labels.get(LABEL + level)
        )
        info = NodeInfo(
            name=node_name(rec),
            address=str(rec.get("NodeManagerAddress", "")),
            cpus=float(resources.get("CPU", 0.0)),
            memory_gb=round(float(resources.get("memory", 0.0)) / 1e9, 1),
            gpus=gpus,
            gpu_type=_gpu_type(labels, resources, is_virtual),
            gpu_memory_gb=gpu_memory,
            virtual=is_virtual,
            alive=bool(rec.get("Alive", False)),
            topology=topology,
            labels={str(k): str(v) for k, v in labels.items()},
            engine_id=str(rec.get("NodeID", "")),
        )
        if _takes_over(info, found.get(info.name), prefer or {}):
            found[info.name] = info
    return sorted(found.values(), key=lambda n: n.name)


def _takes_over(new: NodeInfo, old: NodeInfo | None, prefer: Mapping[str, str]) -> bool:
    """Whether `new` is the node of its name rather than `old` (module docstring): a live
    node over a dead one; of two live ones, the one known under the name, else the smaller
    Ray node id."""
    if old is None or new.alive != old.alive:
        return old is None or new.alive
    if not new.alive:
        return False
    known = prefer.get(new.name)
    if known in (new.engine_id, old.engine_id):
        return known == new.engine_id
    return new.engine_id < old.engine_id


def duplicates(records: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Names claimed by more than one live node: name -> each claimant's "<node id> at
    <address>", sorted."""
    claims: dict[str, list[str]] = {}
    for rec in records:
        if rec.get("Alive"):
            where = f"{str(rec.get('NodeID', ''))[:12]} at {rec.get('NodeManagerAddress', '?')}"
            claims.setdefault(node_name(rec), []).append(where)
    return {name: sorted(c) for name, c in claims.items() if len(c) > 1}


def report_clashes(
    clashes: dict[str, list[str]], found: list[NodeInfo], logged: dict[str, list[str]]
) -> dict[str, list[str]]:
    """Log each clash of `duplicates` not in `logged` (the last call's) as an error naming
    the node kept; the clashes to pass as `logged` next time."""
    for name, claims in clashes.items():
        if logged.get(name) != claims:
            kept = next((n.engine_id[:12] for n in found if n.name == name), "?")
            log.error("two live Ray nodes claim the name %s (%s): jobs go to %s only; give the "
                      "other a label trainyard.io/node of its own", name, ", ".join(claims),
                      kept)  # fmt: skip
    return clashes


def summary(nodes: Iterable[NodeInfo]) -> str:
    """One line on the nodes of a Ray cluster (the server's banner), saying when their GPUs
    are declared."""
    alive = [n for n in nodes if n.alive]
    gpus = sum(n.gpus for n in alive)
    virtual = any(n.virtual for n in alive)
    kind = " VIRTUAL GPUs (declared, not real: jobs on them run on the CPU)" if virtual else " GPUs"
    names = ", ".join(f"{n.name} ({n.gpus})" for n in alive[:8])
    more = f", and {len(alive) - 8} more" if len(alive) > 8 else ""
    return f"{len(alive)} Ray nodes, {gpus}{kind}: {names}{more}"
