"""Alpha-beta (latency-bandwidth) model of NCCL collectives.

This module owns the prediction of how long one collective (all_reduce, reduce_scatter,
all_gather, broadcast) takes on a set of GPUs, which algorithm (ring, tree, hierarchical, NVLS)
is fastest, and the comparison of those predictions with the published points in
``<shared>/planner/nccl_collectives.csv``. It is pure computation.

Model. A prediction is ``time = latency + bytes_moved / bandwidth`` with

* ``latency = base + sum(per-step latency of each step)``, the latency model of NCCL's
  ``src/graph/tuning.cc`` (CSV rows ``latency model,Ring allreduce`` and
  ``latency model,Tree allreduce``);
* the bandwidth term from nccl-tests' bus-bandwidth definitions (CSV ``busbw_factor`` rows):
  ``algbw = N / t`` and ``busbw = algbw * factor`` with ``factor = 2(n-1)/n`` for all_reduce,
  ``(n-1)/n`` for reduce_scatter and all_gather and ``1`` for broadcast. A ring moves exactly
  ``factor * N`` bytes through each GPU's link, so its busbw tends to the link bandwidth.

Two NCCL protocols are modelled: ``simple`` (full bandwidth, higher per-step latency) and ``ll``
(low latency: half the bandwidth, capped at ``llMaxBw``; lower per-step latency). Not modelled:
LL128, NCCL's per-channel bandwidth caps (``perChMaxTreeBw``, ``perChMaxRingLL128Bw``), the
x1.4 Ring/Simple multi-node latency factor and the Tree mid-size correction factors
(``time model,all`` row).

Constants and the CSV row each comes from (``record_type=nccl_tuning_constant`` rows, NVIDIA/nccl
``src/graph/tuning.cc`` and ``topo.h`` @5067397c, unless noted):

* base latency: ``baseLatency,Ring`` LL 6.6 us / Simple 8.4 us; ``baseLatency,Tree`` LL 6.8 us /
  Simple 8.4 us.
* per-step latency: ``hwLatency NVLink,Ring`` LL 0.6 / Simple 3.4 us; ``hwLatency NET,Ring`` LL
  2.7 / Simple 14.0 us. The Ring values are used for every algorithm (a `Link` has one latency
  per protocol); the Tree rows differ by at most 2.3 us per step.
* NVLS latency: ``hwLatency NVLink,NVLS/NVLSTree`` 25 us (Simple only).
* NVLink bandwidth: ``NVLink bw per link (model)`` 20.0 GB/s (SM80) / 20.6 GB/s (SM90) per link,
  times the link count: 12 for A100 (nccl-tests #149: 25 GB/s/link, 12 links) and 18 for H100
  and H200 (450 GB/s line rate per direction, nccl-tests #212, at 25 GB/s per link).
* network bandwidth: ``NET_BW default`` 12.0 GB/s per 100 Gbit/s of NIC.
* LL bandwidth: ``bandwidth refinements,Ring LL`` busBw = min(llMaxBw, 0.5 busBw), ``llMaxBw``
  87.7 GB/s (Ampere) / 141.0 GB/s (Hopper).
* tree bandwidth: ``bandwidth refinements,Tree allreduce`` busBw = 0.92 busBw, LL: /3.8;
  ``busBw->algBw,Tree allreduce`` algBw = 0.5 busBw.
* NVLS efficiency: ``nvlsEfficiency`` 0.85 (Hopper).

NVLS (NVLink SHARP, single node, all_reduce only) is this module's own reading: the switch
reduces, so each GPU sends and receives the message once and ``algbw = nvlsEfficiency *
NVLink bandwidth``; it is checked against the CSV's NVLS rows, not copied from NCCL.

Hierarchical all_reduce is intra-node reduce-scatter, an inter-node ring all_reduce of each
GPU's 1/ranks_per_node shard (all GPUs of a node in parallel, each on its own NIC) and an
intra-node all-gather, run back to back with one launch (one base latency).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final, Literal

from trainyard.planner.errors import PlannerError, unknown_name

__all__ = [
    "A100_NVLINK",
    "ALGORITHMS",
    "COLLECTIVES",
    "H100_NVLINK",
    "PROTOCOLS",
    "Choice",
    "Link",
    "LinkSet",
    "Prediction",
    "Topology",
    "best",
    "busbw_factor",
    "ib_link",
    "nvlink",
    "predict",
]

Collective = Literal["all_reduce", "reduce_scatter", "all_gather", "broadcast"]
Algorithm = Literal["ring", "tree", "hierarchical", "nvls"]
Protocol = Literal["simple", "ll"]

COLLECTIVES: Final[tuple[Collective, ...]] = (
    "all_reduce",
    "reduce_scatter",
    "all_gather",
    "broadcast",
)
ALGORITHMS: Final[tuple[Algorithm, ...]] = ("ring", "tree", "hierarchical", "nvls")
PROTOCOLS: Final[tuple[Protocol, ...]] = ("simple", "ll")

# baseLatency rows (us), keyed by (algorithm, protocol).
_BASE_LATENCY_US: Final[dict[tuple[str, str], float]] = {
    ("ring", "ll"): 6.6,
    ("ring", "simple"): 8.4,
    ("tree", "ll"): 6.8,
    ("tree", "simple"): 8.4,
    ("hierarchical", "ll"): 6.6,
    ("hierarchical", "simple"): 8.4,
}
NVLS_LATENCY_US: Final = 25.0  # hwLatency NVLink,NVLS/NVLSTree (Simple)
NVLS_EFFICIENCY_HOPPER: Final = 0.85  # nvlsEfficiency (Hopper)
TREE_BW_EFFICIENCY: Final = 0.92  # bandwidth refinements,Tree allreduce
TREE_LL_DIVISOR: Final = 3.8  # bandwidth refinements,Tree allreduce (LL)
TREE_ALGBW_RATIO: Final = 0.5  # busBw->algBw,Tree allreduce
LL_BW_RATIO: Final = 0.5  # bandwidth refinements,Ring LL
LL_MAX_BW_AMPERE: Final = 87.7  # llMaxBw Ampere-N1 (GB/s)
LL_MAX_BW_HOPPER: Final = 141.0  # llMaxBw Hopper-N1 (GB/s)
NVLINK_BW_PER_LINK_SM80: Final = 20.0  # NVLink bw per link (model), GB/s
NVLINK_BW_PER_LINK_SM90: Final = 20.6
NET_BW_PER_100GBIT: Final = 12.0  # NET_BW default, GB/s per 100 Gbit/s


@dataclass(frozen=True, slots=True)
class Link:
    """One GPU's link of one kind: effective bandwidth per direction and per-step latencies.

    `bandwidth_gbps` is GB/s (1e9 bytes/s) per direction per GPU, the most a ring's busbw can
    reach on it. `latency_us` is the per-step latency with the Simple protocol and
    `ll_latency_us` with the LL protocol (None: LL not modelled on this link).
    """

    bandwidth_gbps: float
    latency_us: float
    ll_latency_us: float | None = None

    def __post_init__(self) -> None:
        if not math.isfinite(self.bandwidth_gbps) or self.bandwidth_gbps <= 0:
            raise PlannerError("bandwidth_gbps", f"must be > 0 GB/s, got {self.bandwidth_gbps}")
        if not math.isfinite(self.latency_us) or self.latency_us < 0:
            raise PlannerError("latency_us", f"must be >= 0 us, got {self.latency_us}")
        if self.ll_latency_us is not None and (
            not math.isfinite(self.ll_latency_us) or self.ll_latency_us < 0
        ):
            raise PlannerError("ll_latency_us", f"must be >= 0 us, got {self.ll_latency_us}")


@dataclass(frozen=True, slots=True)
class LinkSet:
    """The links a planner times collectives on when they were measured (`trainyard plan
    --links`): `intra` joins the GPUs of one node, `inter` one GPU's share of the network (one
    NIC per GPU); None keeps the GPU catalogue's figure for that level. `source` says where the
    figures came from (a file name), for the plan's notes."""

    intra: Link | None = None
    inter: Link | None = None
    source: str = ""


def nvlink(links: int, per_link_gbps: float = NVLINK_BW_PER_LINK_SM90) -> Link:
    """NVLink through NVSwitch: `links` links per GPU at NCCL's modelled per-link bandwidth."""
    if links < 1:
        raise PlannerError("links", f"must be >= 1, got {links}")
    # hwLatency NVLink,Ring: LL 0.6 us, Simple 3.4 us per step.
    return Link(links * per_link_gbps, latency_us=3.4, ll_latency_us=0.6)


def ib_link(gbit_per_gpu: float) -> Link:
    """A network link of `gbit_per_gpu` Gbit/s per GPU (for example 400 for one NDR NIC)."""
    if not math.isfinite(gbit_per_gpu) or gbit_per_gpu <= 0:
        raise PlannerError("gbit_per_gpu", f"must be > 0 Gbit/s, got {gbit_per_gpu}")
    # NET_BW default 12 GB/s per 100 Gbit; hwLatency NET,Ring: LL 2.7 us, Simple 14.0 us.
    return Link(gbit_per_gpu / 100.0 * NET_BW_PER_100GBIT, latency_us=14.0, ll_latency_us=2.7)


A100_NVLINK: Final = nvlink(12, NVLINK_BW_PER_LINK_SM80)  # 240 GB/s
H100_NVLINK: Final = nvlink(18, NVLINK_BW_PER_LINK_SM90)  # 370.8 GB/s (also H200)


@dataclass(frozen=True, slots=True)
class Topology:
    """The ranks taking part: `nodes` nodes of `ranks_per_node` GPUs each.

    `intra` links the GPUs of one node, `inter` (one per GPU) links nodes; it is required when
    `nodes > 1`. `ll_max_bw_gbps` caps LL bandwidth (llMaxBw); `nvls` says whether the node's
    switch can reduce (NVLink SHARP); `base_latency_scale` multiplies NCCL's base latencies
    (0 gives the pure textbook alpha-beta model).
    """

    ranks_per_node: int
    nodes: int = 1
    intra: Link = H100_NVLINK
    inter: Link | None = None
    ll_max_bw_gbps: float = LL_MAX_BW_HOPPER
    nvls: bool = False
    nvls_efficiency: float = NVLS_EFFICIENCY_HOPPER
    base_latency_scale: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.ranks_per_node, int) or self.ranks_per_node < 1:
            raise PlannerError(
                "ranks_per_node", f"must be an integer >= 1, got {self.ranks_per_node}"
            )
        if not isinstance(self.nodes, int) or self.nodes < 1:
            raise PlannerError("nodes", f"must be an integer >= 1, got {self.nodes}")
        if self.nodes > 1 and self.inter is None:
            raise PlannerError("inter", f"an inter-node link is needed for {self.nodes} nodes")
        if not math.isfinite(self.ll_max_bw_gbps) or self.ll_max_bw_gbps <= 0:
            raise PlannerError("ll_max_bw_gbps", f"must be > 0, got {self.ll_max_bw_gbps}")
        if not 0 < self.nvls_efficiency <= 1:
            raise PlannerError("nvls_efficiency", f"must be in (0, 1], got {self.nvls_efficiency}")
        if not math.isfinite(self.base_latency_scale) or self.base_latency_scale < 0:
            raise PlannerError("base_latency_scale", f"must be >= 0, got {self.base_latency_scale}")

    @property
    def ranks(self) -> int:
        """Total ranks."""
        return self.ranks_per_node * self.nodes


@dataclass(frozen=True, slots=True)
class Prediction:
    """Predicted time of one collective with one algorithm and protocol."""

    collective: Collective
    algorithm: Algorithm
    protocol: Protocol
    nbytes: int
    time_us: float
    latency_us: float
    bandwidth_us: float
    ranks: int = 1

    @property
    def algbw_gbps(self) -> float:
        """nccl-tests algorithm bandwidth N / t in GB/s."""
        return self.nbytes / (self.time_us * 1e3) if self.time_us > 0 else 0.0

    @property
    def busbw_gbps(self) -> float:
        """nccl-tests bus bandwidth algbw * factor in GB/s."""
        return self.algbw_gbps * busbw_factor(self.collective, self.ranks)


@dataclass(frozen=True, slots=True)
class Choice:
    """The fastest algorithm for one collective, with the reason in words."""

    prediction: Prediction
    why: str

    @property
    def algorithm(self) -> Algorithm:
        return self.prediction.algorithm

    @property
    def time_us(self) -> float:
        return self.prediction.time_us

    @property
    def busbw_gbps(self) -> float:
        return self.prediction.busbw_gbps


def _check_collective(collective: str) -> Collective:
    for name in COLLECTIVES:
        if collective == name:
            return name
    raise unknown_name("collective", "collective", collective, list(COLLECTIVES))


def _check_nbytes(nbytes: int) -> None:
    if isinstance(nbytes, bool) or not isinstance(nbytes, int):
        raise PlannerError("nbytes", f"must be an integer byte count, got {nbytes!r}")
    if nbytes < 0:
        raise PlannerError("nbytes", f"must be >= 0, got {nbytes}")


def busbw_factor(collective: str, ranks: int) -> float:
    """nccl-tests' busbw/algbw factor (CSV ``busbw_factor`` rows, PERFORMANCE.md @a0b82b22)."""
    coll = _check_collective(collective)
    if ranks < 1:
        raise PlannerError("ranks", f"must be >= 1, got {ranks}")
    if coll == "all_reduce":
        return 2 * (ranks - 1) / ranks
    if coll == "broadcast":
        return 1.0
    return (ranks - 1) / ranks


def _step_latency(link: Link, protocol: Protocol) -> float:
    if protocol == "ll":
        if link.ll_latency_us is None:
            raise PlannerError("protocol", "LL is not modelled on a link without ll_latency_us")
        return link.ll_latency_us
    return link.latency_us


def _proto_bw(bw: float, protocol: Protocol, topo: Topology) -> float:
    """Ring bandwidth refinement per protocol (Ring LL: min(llMaxBw, 0.5 busBw))."""
    if protocol == "ll":
        return min(topo.ll_max_bw_gbps, LL_BW_RATIO * bw)
    return bw


def _ring_bus_bw(topo: Topology) -> float:
    """Bus bandwidth of a flat ring: NVLink in-node, all of a node's NICs across nodes."""
    if topo.nodes == 1 or topo.inter is None:
        return topo.intra.bandwidth_gbps
    return min(topo.intra.bandwidth_gbps, topo.ranks_per_node * topo.inter.bandwidth_gbps)


def _us(nbytes: float, gbps: float) -> float:
    return nbytes / (gbps * 1e3)


def _ring(coll: Collective, n: float, topo: Topology, proto: Protocol) -> tuple[float, float]:
    ranks, nodes = topo.ranks, topo.nodes
    intra = _step_latency(topo.intra, proto)
    inter = _step_latency(topo.inter, proto) if topo.inter is not None else 0.0
    rounds = 2 if coll == "all_reduce" else 1
    steps = rounds * (ranks - 1)
    inter_steps = rounds * (nodes - 1)
    lat = (steps - inter_steps) * intra + inter_steps * inter
    bw = _proto_bw(_ring_bus_bw(topo), proto, topo)
    return lat, _us(busbw_factor(coll, ranks) * n, bw)


def _tree(n: float, topo: Topology, proto: Protocol) -> tuple[float, float]:
    intra = _step_latency(topo.intra, proto)
    inter = _step_latency(topo.inter, proto) if topo.inter is not None else 0.0
    lat = 2 * ((topo.ranks_per_node - 1) * intra + math.log2(topo.nodes) * inter)
    bus = TREE_BW_EFFICIENCY * _ring_bus_bw(topo)
    if proto == "ll":
        bus /= TREE_LL_DIVISOR
    return lat, _us(n, TREE_ALGBW_RATIO * bus)


def _hierarchical(n: float, topo: Topology, proto: Protocol) -> tuple[float, float]:
    ppn, nodes = topo.ranks_per_node, topo.nodes
    assert topo.inter is not None
    intra_lat = _step_latency(topo.intra, proto)
    inter_lat = _step_latency(topo.inter, proto)
    intra_bw = _proto_bw(topo.intra.bandwidth_gbps, proto, topo)
    inter_bw = _proto_bw(topo.inter.bandwidth_gbps, proto, topo)
    lat = 2 * (ppn - 1) * intra_lat + 2 * (nodes - 1) * inter_lat
    shard_time = _us(2 * (nodes - 1) / nodes * n / ppn, inter_bw)
    bw_time = 2 * _us((ppn - 1) / ppn * n, intra_bw) + shard_time
    return lat, bw_time


def _supported(coll: Collective, algorithm: Algorithm, topo: Topology) -> str | None:
    """None if the algorithm applies, else why not."""
    if algorithm == "ring":
        return None
    if coll != "all_reduce":
        return f"{algorithm} is modelled for all_reduce only"
    if algorithm == "hierarchical" and (topo.nodes < 2 or topo.ranks_per_node < 2):
        return "hierarchical needs >= 2 nodes of >= 2 ranks"
    if algorithm == "nvls" and (not topo.nvls or topo.nodes != 1):
        return "nvls needs one node whose switch can reduce (Topology.nvls)"
    return None


def predict(
    collective: str,
    nbytes: int,
    topology: Topology,
    algorithm: str = "ring",
    protocol: str = "simple",
) -> Prediction:
    """Predicted time of `collective` on `nbytes` bytes (nccl-tests' size S) on `topology`."""
    coll = _check_collective(collective)
    _check_nbytes(nbytes)
    algo: Algorithm | None = next((a for a in ALGORITHMS if a == algorithm), None)
    if algo is None:
        raise unknown_name("algorithm", "algorithm", algorithm, list(ALGORITHMS))
    proto: Protocol | None = next((p for p in PROTOCOLS if p == protocol), None)
    if proto is None:
        raise unknown_name("protocol", "protocol", protocol, list(PROTOCOLS))
    reason = _supported(coll, algo, topology)
    if reason is not None:
        raise PlannerError("algorithm", reason)
    if algo == "nvls" and proto != "simple":
        raise PlannerError("protocol", "nvls runs with the simple protocol only")
    if topology.ranks == 1:
        return Prediction(coll, algo, proto, nbytes, 0.0, 0.0, 0.0, 1)
    n = float(nbytes)
    if algo == "ring":
        lat, bw_us = _ring(coll, n, topology, proto)
    elif algo == "tree":
        lat, bw_us = _tree(n, topology, proto)
    elif algo == "hierarchical":
        lat, bw_us = _hierarchical(n, topology, proto)
    else:
        lat = NVLS_LATENCY_US
        bw_us = _us(n, topology.nvls_efficiency * topology.intra.bandwidth_gbps)
    if algo != "nvls":
        lat += topology.base_latency_scale * _BASE_LATENCY_US[(algo, proto)]
    return Prediction(coll, algo, proto, nbytes, lat + bw_us, lat, bw_us, topology.ranks)


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            value = nbytes / scale
            return f"{value:g} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{nbytes} B"


def best(collective: str, nbytes: int, topology: Topology) -> Choice:
    """The fastest modelled algorithm and protocol, with its time, busbw and a reason."""
    coll = _check_collective(collective)
    _check_nbytes(nbytes)
    candidates: list[Prediction] = []
    for algo in ALGORITHMS:
        if _supported(coll, algo, topology) is not None:
            continue
        for proto in PROTOCOLS:
            if algo == "nvls" and proto != "simple":
                continue
            links = [topology.intra] + ([topology.inter] if topology.inter is not None else [])
            if proto == "ll" and any(link.ll_latency_us is None for link in links):
                continue
            candidates.append(predict(coll, nbytes, topology, algo, proto))
    # Ties go to the earlier candidate (ring before tree, simple before LL).
    top = min(candidates, key=lambda p: p.time_us)
    bound = "latency-bound" if top.latency_us >= top.bandwidth_us else "bandwidth-bound"
    where = f" across {topology.nodes} nodes" if topology.nodes > 1 else ""
    why = f"{top.algorithm}: {bound} at {_size(nbytes)}{where} ({top.protocol} protocol)"
    return Choice(top, why)
