"""Re-planning for an actual allocation: the fastest layouts of a model on the GPUs the scheduler
placed, node by node (`search_allocation`), timed on the real topology of each layout's groups
(`placement_step_time`, `group_topologies`).

This module owns the mapping from ranks to nodes and the topology of tensor- and data-parallel
groups on an uneven allocation such as ``(8, 4, 4)``; enumeration, memory filter and ranking are
`trainyard.planner.search`'s (memory does not depend on placement), times come from
`compute.step_time` with its `tp_topology` / `dp_topology` overrides. Pure and deterministic.

Rank order. Global ranks fill the nodes in the order given (node 0 holds ranks
0..gpus_per_node[0]-1, and so on). Megatron-Core's default order (``initialize_model_parallel``,
``order="tp-cp-ep-dp-pp"``; without context or expert parallelism "tp-dp-pp") makes tensor
parallelism fastest, then data, then pipeline: rank = t + tp·(d + dp·p). So a pipeline stage
owns a contiguous block of tp·dp ranks and a data-parallel group is every tp-th rank inside it
(16 GPUs, tp=2, pp=4: TP groups [0,1], [2,3]...; DP groups [0,2], [1,3], [4,6]...; pipeline
groups [0,4,8,12]...). ``order="tp-pp-dp"`` (rank = t + tp·(p + pp·d)) is what
`search`'s uniform `nodes_of` model assumes; with it an allocation of whole equal nodes
reproduces `search` exactly. Megatron's order keeps DP groups at least as packed, so on equal
nodes it never predicts a slower step than `search`.

Topology of a group. A TP group must sit inside one node, so tp divides every node's GPU count
(node boundaries then fall on TP-group boundaries). A DP group may span several nodes unevenly,
e.g. ranks {0, 4, 8, 12} on (8, 4, 4) with tp=4: two ranks on node 0, one on each of the others.
A ring is bounded by its slowest hop, and in `collectives` a node's inter-node bandwidth is its
rank count times one NIC: each group is timed as spanning its `nodes` nodes with the most loaded
node's rank count and, separately, with the least loaded node's, and the slower of the two is
kept; the step waits for its slowest group, so the slowest group over the whole layout counts.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Literal

from trainyard.planner.collectives import LinkSet, Topology
from trainyard.planner.comm import inter_link, intra_link
from trainyard.planner.compute import StepTime, step_time
from trainyard.planner.errors import PlannerError
from trainyard.planner.hardware import GPU
from trainyard.planner.layout import ParallelLayout
from trainyard.planner.model import Model
from trainyard.planner.search import (
    HEADROOM,
    Plan,
    _check_inputs,
    _enumerate,
    _shapes,
    _smallest_fitting_count,
    _tp_options,
    ranked,
)

__all__ = [
    "MEGATRON_ORDER",
    "RankOrder",
    "group_topologies",
    "node_of_rank",
    "placement_step_time",
    "search_allocation",
]

RankOrder = Literal["tp-dp-pp", "tp-pp-dp"]
MEGATRON_ORDER: RankOrder = "tp-dp-pp"
_ORDERS: tuple[str, ...] = ("tp-dp-pp", "tp-pp-dp")


def _check_allocation(gpus_per_node: Sequence[int]) -> tuple[int, ...]:
    if isinstance(gpus_per_node, str | bytes) or not isinstance(gpus_per_node, Sequence):
        raise PlannerError(
            "gpus_per_node", "must be a list of GPU counts, one per node, e.g. [8, 4, 4]"
        )
    if not gpus_per_node:
        raise PlannerError(
            "gpus_per_node", "is empty: list one GPU count per allocated node, e.g. [8, 4, 4]"
        )
    for i, count in enumerate(gpus_per_node):
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise PlannerError(
                "gpus_per_node",
                f"node {i} has {count!r} GPUs; every count must be a positive integer "
                "(leave out nodes with no GPUs)",
            )
    return tuple(gpus_per_node)


def _check_order(order: str) -> None:
    if order not in _ORDERS:
        raise PlannerError("order", f"must be one of {', '.join(_ORDERS)}, got {order!r}")


def node_of_rank(gpus_per_node: Sequence[int]) -> list[int]:
    """The node index of each global rank, ranks filling the nodes in order."""
    counts = _check_allocation(gpus_per_node)
    return [node for node, count in enumerate(counts) for _ in range(count)]


def _rank_of(t: int, d: int, p: int, tp: int, pp: int, dp: int, order: str) -> int:
    if order == "tp-dp-pp":
        return t + tp * (d + dp * p)
    return t + tp * (p + pp * d)


def _spans(groups: list[list[int]], nodes: list[int]) -> set[tuple[int, int, int]]:
    """Distinct (nodes spanned, most ranks on a node, fewest ranks on a spanned node)."""
    out = set()
    for group in groups:
        per_node = Counter(nodes[r] for r in group)
        out.add((len(per_node), max(per_node.values()), min(per_node.values())))
    return out


def _topologies(
    spans: set[tuple[int, int, int]], gpu: GPU, links: LinkSet | None = None
) -> list[Topology]:
    candidates = set()
    for spanned, most, fewest in spans:
        candidates.update({(spanned, most), (spanned, fewest)})
    return [
        Topology(
            per_node,
            nodes=spanned,
            intra=intra_link(gpu, links),
            inter=inter_link(gpu, links) if spanned > 1 else None,
        )
        for spanned, per_node in sorted(candidates)
    ]


def group_topologies(
    layout: ParallelLayout,
    gpu: GPU,
    gpus_per_node: Sequence[int],
    *,
    order: RankOrder = MEGATRON_ORDER,
    links: LinkSet | None = None,
) -> tuple[list[Topology], list[Topology]]:
    """Candidate topologies of the layout's TP groups and DP groups on this allocation.

    Each list holds, for every distinct way a group of that kind sits on the nodes, a topology
    with the most loaded node's rank count and one with the least loaded node's (one when they
    agree); the slowest of them bounds the collective (see the module docstring). A list is
    empty when that dimension is 1. Raises `PlannerError` when the layout does not use every
    allocated GPU or a TP group would cross a node.
    """
    _check_order(order)
    nodes = node_of_rank(gpus_per_node)
    tp, pp, dp = layout.tp, layout.pp, layout.dp
    if layout.gpus != len(nodes):
        raise PlannerError(
            "layout",
            f"tp x pp x dp = {layout.gpus} but the allocation has {len(nodes)} GPUs; "
            "the layout must use every allocated GPU",
        )
    g = math.gcd(*gpus_per_node)
    if g % tp:
        raise PlannerError(
            "tp",
            f"tp ({tp}) must divide every node's GPU count {list(gpus_per_node)} so a "
            f"tensor-parallel group stays in one node; pick a divisor of {g}",
        )
    tp_groups = [
        [_rank_of(t, d, p, tp, pp, dp, order) for t in range(tp)]
        for d in range(dp)
        for p in range(pp)
    ]
    dp_groups = [
        [_rank_of(t, d, p, tp, pp, dp, order) for d in range(dp)]
        for t in range(tp)
        for p in range(pp)
    ]
    tp_topos = _topologies(_spans(tp_groups, nodes), gpu, links) if tp > 1 else []
    dp_topos = _topologies(_spans(dp_groups, nodes), gpu, links) if dp > 1 else []
    return tp_topos, dp_topos


def placement_step_time(
    model: Model,
    layout: ParallelLayout,
    gpu: GPU,
    gpus_per_node: Sequence[int],
    *,
    order: RankOrder = MEGATRON_ORDER,
    links: LinkSet | None = None,
) -> StepTime:
    """`compute.step_time` of `layout` on this allocation: the slowest over the candidate TP
    and DP group topologies of `group_topologies`. Raises `PlannerError` like it."""
    tp_topos, dp_topos = group_topologies(layout, gpu, gpus_per_node, order=order, links=links)
    return _slowest(model, layout, gpu, max(gpus_per_node), tp_topos, dp_topos, links)


def _slowest(
    model: Model,
    layout: ParallelLayout,
    gpu: GPU,
    nodes_of: int,
    tp_topos: list[Topology],
    dp_topos: list[Topology],
    links: LinkSet | None = None,
) -> StepTime:
    slowest: StepTime | None = None
    tp_options: list[Topology | None] = [*tp_topos] or [None]
    dp_options: list[Topology | None] = [*dp_topos] or [None]
    for tp_topo in tp_options:
        for dp_topo in dp_options:
            t = step_time(
                model,
                layout,
                gpu,
                nodes_of,
                tp_topology=tp_topo,
                dp_topology=dp_topo,
                links=links,
            )
            if slowest is None or t.iteration_s > slowest.iteration_s:
                slowest = t
    assert slowest is not None  # both loops run at least once
    return slowest


def search_allocation(
    model: Model,
    gpu: GPU,
    gpus_per_node: Sequence[int],
    top: int = 10,
    *,
    order: RankOrder = MEGATRON_ORDER,
    flash_attention: bool = True,
    links: LinkSet | None = None,
) -> list[Plan]:
    """The `top` fastest fitting layouts of `model` on the allocation `gpus_per_node`, best first.

    `gpus_per_node` lists the GPUs the scheduler gave on each node, e.g. ``(8, 4, 4)`` for 16
    GPUs on 3 nodes. tp divides every node's count; ranks follow `order` (Megatron's by
    default); collectives are timed on each layout's actual group topology. The search space,
    memory filter, ranking and `flash_attention` are `search`'s. Raises `PlannerError` naming
    the field for bad input or when no layout is valid or fits.
    """
    counts = _check_allocation(gpus_per_node)
    _check_order(order)
    n = sum(counts)
    _check_inputs(model, n, gpu, max(counts), top)
    g = math.gcd(*counts)
    shapes = [s for s in _shapes(model, n, g) if g % s[0] == 0]
    if not shapes:
        tps = [t for t in _tp_options(model, g) if g % t == 0]
        raise PlannerError(
            "gpus_per_node",
            f"{n} GPUs as {list(counts)} cannot be split as tp x pp x dp for {model.name!r}: "
            f"tp must be one of {tps} (it divides every node's count and the model's heads), "
            f"pp a divisor of layers ({model.layers}) and dp a divisor of global_batch "
            f"({model.global_batch}); ask for a GPU count of that form",
        )
    topologies: dict[tuple[int, int, int], tuple[list[Topology], list[Topology]]] = {}

    def timer(layout: ParallelLayout) -> StepTime:
        shape = (layout.tp, layout.pp, layout.dp)
        if shape not in topologies:
            topologies[shape] = group_topologies(layout, gpu, counts, order=order, links=links)
        return _slowest(model, layout, gpu, max(counts), *topologies[shape], links)

    plans = _enumerate(
        model, gpu, shapes, timer, flash_attention=flash_attention, context_parallel=False
    )
    if not plans:
        smallest = _smallest_fitting_count(model, n, gpu, g)
        hint = (
            f"ask for at least {smallest} GPUs (in nodes whose GPU count the tp divides)"
            if smallest is not None
            else "no GPU count fits: use a GPU with more memory or a smaller model/batch"
        )
        raise PlannerError(
            "gpus_per_node",
            f"no layout of {model.name!r} on {list(counts)} x {gpu.name} fits in "
            f"{HEADROOM:.0%} of {gpu.memory_gb:g} GB per GPU (even with ZeRO-3 and full "
            f"recompute); {hint}",
        )
    return ranked(plans)[:top]
