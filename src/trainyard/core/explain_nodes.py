"""Why GPUs a waiting job could use are not free to it: drained or cordoned nodes, hot
spares kept for recovering jobs, failed devices (the clauses `explain.py` adds to a reason,
so that "0 free" never hides GPUs an operator could give back).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from trainyard.core.types import OPERATOR_HOLDS, Job, Node

if TYPE_CHECKING:
    from trainyard.core.cycle import Cycle


def drained(cycle: Cycle, job: Job) -> tuple[str, bool]:
    """Where GPUs of the job's kind exist but may not be used: drained (unschedulable)
    nodes and failed devices ("" when there are none); True when a node is only drained
    (an operator undrains it: the job waits), False when only failed devices stand in the
    way (it cannot run until they are repaired)."""
    out = []
    temporary = False
    for node in cycle.snapshot.nodes:
        if job.gpu_types and node.gpu_type not in job.gpu_types:
            continue
        if node.gpu_memory_gb < job.gpu_memory_gb or not node.gpus:
            continue
        if not node.schedulable:
            out.append(f"{node.name} ({node.gpus} GPUs) is {_held_as(node)}")
            temporary = True
        elif node.spare:
            out.append(f"{node.name} ({node.gpus} GPUs) is a hot spare, kept for recovering jobs")
            temporary = True
        elif node.unavailable:
            out.append(f"{node.name} has {len(node.unavailable)} failed GPUs")
    if not out:
        return "", False
    shown = ", ".join(out[:3]) + (f" and {len(out) - 3} more" if len(out) > 3 else "")
    return f"the rest are not schedulable: {shown}", temporary


@dataclass(slots=True)
class SpareIndex:
    """The snapshot's hot spares as (name, GPUs, class), listed once per cycle."""

    nodes: list[tuple[str, int, int]] | None = None


def on_spares(cycle: Cycle, job: Job) -> str:
    """ "; N more idle on hot spares ..." when spare nodes of the job's classes are idle (a
    job not recovering may not use them: core/spares.py)."""
    if job.recovering:
        return ""
    spares = cycle.state_of(SpareIndex)
    if spares.nodes is None:
        class_of = cycle.layout.class_of_node
        spares.nodes = [
            (n.name, n.gpus - len(n.unavailable), class_of[i])
            for i, n in enumerate(cycle.snapshot.nodes)
            if n.spare
        ]
    idle = _of_classes(cycle, job, spares.nodes)
    if not idle:
        return ""
    names = _names(idle)
    return (
        f"; {sum(k for _n, k in idle)} more on hot spares ({names}), kept for jobs "
        "recovering from a failure"
    )


@dataclass(slots=True)
class DrainedIndex:
    """The snapshot's drained (unschedulable) nodes with free GPUs, as (name, free GPUs,
    class), listed once per cycle."""

    nodes: list[tuple[str, int, int]] | None = None
    words: dict[str, str] = field(default_factory=dict)  # name -> "drained" / "cordoned"


def on_drained(cycle: Cycle, job: Job) -> str:
    """ "; the only node with N free GPUs is drained (X)" or "; N more free on drained
    nodes (X, Y)" when drained nodes of the job's classes have free GPUs, so that "0 free"
    never hides GPUs an operator could give back by undraining."""
    index = cycle.state_of(DrainedIndex)
    if index.nodes is None:
        snapshot = cycle.snapshot
        drained = {
            n.name: _held_as(n)
            for n in snapshot.nodes
            if not n.schedulable and n.down in OPERATOR_HOLDS and n.gpus
        }
        used: dict[str, int] = dict.fromkeys(drained, 0)
        if drained:
            for r in snapshot.running:
                for part in r.placement:
                    if part.node in used:
                        used[part.node] += len(part.devices)
        class_of = cycle.layout.class_of_node
        index.nodes = [
            (n.name, n.gpus - len(n.unavailable) - used[n.name], class_of[i])
            for i, n in enumerate(snapshot.nodes)
            if n.name in drained and n.gpus - len(n.unavailable) - used[n.name] > 0
        ]
        index.words = drained
    idle = _of_classes(cycle, job, index.nodes)
    if not idle:
        return ""
    per = job.gpus // max(job.nodes, 1)
    holds = [name for name, k in idle if k >= per]
    if len(holds) == 1 and job.nodes <= 1 and job.gpus <= max(k for _n, k in idle):
        k = max(k for _n, k in idle)
        word = index.words[holds[0]]
        return f"; the only node with {k} free GPU{'s' if k != 1 else ''} is {word} ({holds[0]})"
    total = sum(k for _n, k in idle)
    words = sorted({index.words[name] for name, _k in idle})
    return f"; {total} more free on {' or '.join(words)} nodes ({_names(idle)})"


def _held_as(node: Node) -> str:
    """How a node that is not schedulable is said to be: its `down`, or "drained"."""
    return node.down or "drained"


def _of_classes(cycle: Cycle, job: Job, nodes: list[tuple[str, int, int]]) -> list[tuple[str, int]]:
    """(name, GPUs) of the listed (name, GPUs, class) nodes of one of the job's classes."""
    if not nodes:
        return []
    classes = cycle.classes_of(job)
    return [(name, k) for name, k, c in nodes if c in classes]


def _names(idle: list[tuple[str, int]]) -> str:
    """The first three node names, then "..." when there are more."""
    return ", ".join(name for name, _k in idle[:3]) + (" ..." if len(idle) > 3 else "")
