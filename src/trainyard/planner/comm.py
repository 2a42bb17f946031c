"""The links and topologies the time model and the launcher time collectives on.

This module owns turning a `GPU` (and, when given, measured `LinkSet` figures from
`trainyard.planner.links`) into the NVLink link inside a node (`intra_link`), the network link
across nodes (`inter_link`) and the `Topology` of a group of ranks (`topology`), and the time of
one collective (`collective_s`, the fastest algorithm by `collectives.best`) and of one
point-to-point send (`p2p_s`) on them. `compute.step_time`, `allocation` and `launch` share
these, so the launcher's NCCL choice is made on the topologies the step time prices. Pure
arithmetic; times are seconds.
"""

from __future__ import annotations

import math
from typing import Final

from trainyard.planner.collectives import Link, LinkSet, Topology, best, ib_link
from trainyard.planner.errors import PlannerError
from trainyard.planner.hardware import GPU

__all__ = [
    "NVLINK_EFFICIENCY",
    "collective_s",
    "inter_link",
    "intra_link",
    "p2p_s",
    "per_node",
    "topology",
]

# NCCL's modelled NVLink bandwidth over the datasheet rate: 240/300 GB/s on A100
# (collectives.A100_NVLINK); applied to `GPU.nvlink_gb_s` for every GPU.
NVLINK_EFFICIENCY: Final = 0.8


def intra_link(gpu: GPU, links: LinkSet | None = None) -> Link:
    """The link between GPUs of one node: the measured one in `links`, else NVLink at
    NVLINK_EFFICIENCY of the catalogue's rate."""
    if links is not None and links.intra is not None:
        return links.intra
    # Per-step latencies of collectives.nvlink (hwLatency NVLink,Ring: Simple 3.4, LL 0.6 us).
    return Link(NVLINK_EFFICIENCY * gpu.nvlink_gb_s, latency_us=3.4, ll_latency_us=0.6)


def inter_link(gpu: GPU, links: LinkSet | None = None) -> Link:
    """The link between nodes: the measured one in `links`, else InfiniBand at the catalogue's
    network rate. Raises `PlannerError` for a GPU without a network."""
    if links is not None and links.inter is not None:
        return links.inter
    if gpu.network_gb_s <= 0:
        raise PlannerError("network_gb_s", f"GPU {gpu.name!r} needs a network for multi-node")
    return ib_link(gpu.network_gb_s * 8)


def per_node(ranks: int, capacity: int) -> int:
    """Ranks of a group of `ranks` that share one node (NVLink domain) of `capacity` GPUs:
    gcd(ranks, capacity) on nodes of a power-of-two size (Megatron's rank order packs a
    group so), else, in a larger domain of another size (72 for a GB200 NVL72 rack), the
    largest divisor of ranks that fits in it."""
    capacity = max(1, capacity)
    if capacity & (capacity - 1) == 0:
        return math.gcd(ranks, capacity)
    return max(d for d in range(1, min(ranks, capacity) + 1) if ranks % d == 0)


def topology(ranks: int, ranks_per_node: int, gpu: GPU, links: LinkSet | None = None) -> Topology:
    """`ranks` GPUs, `ranks_per_node` of them (a divisor of ranks) sharing a node."""
    nodes = ranks // ranks_per_node
    inter = inter_link(gpu, links) if nodes > 1 else None
    return Topology(ranks_per_node, nodes=nodes, intra=intra_link(gpu, links), inter=inter)


def collective_s(collective: str, nbytes: float, topo: Topology) -> float:
    """One `collective` of `nbytes` on `topo` with the fastest algorithm (0 for one rank or no
    bytes)."""
    if topo.ranks == 1 or nbytes <= 0:
        return 0.0
    return best(collective, int(nbytes), topo).time_us * 1e-6


def p2p_s(nbytes: float, link: Link) -> float:
    """One point-to-point send of `nbytes` over `link` (latency + bytes / bandwidth)."""
    return link.latency_us * 1e-6 + nbytes / (link.bandwidth_gbps * 1e9)
