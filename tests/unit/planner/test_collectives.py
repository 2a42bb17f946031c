"""Tests of the alpha-beta NCCL collective model (trainyard.planner.collectives)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared_data import SHARED, require
from trainyard.planner.collectives import (
    ALGORITHMS,
    COLLECTIVES,
    H100_NVLINK,
    PROTOCOLS,
    Link,
    Topology,
    best,
    busbw_factor,
    ib_link,
    predict,
)
from trainyard.planner.collectives_eval import Comparison, compare_to_published, summarize
from trainyard.planner.errors import PlannerError

GIB = 1 << 30


def bare(n: int, bw: float, alpha: float, nodes: int = 1, inter: Link | None = None) -> Topology:
    """A topology without NCCL's base latency: the textbook alpha-beta model."""
    return Topology(n, nodes=nodes, intra=Link(bw, alpha), inter=inter, base_latency_scale=0.0)


# --- hand-computed cases ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "nbytes", "bw", "alpha"), [(8, GIB, 100.0, 2.0), (2, 1000, 1.0, 0.0)]
)
def test_ring_all_reduce_hand_computed(n: int, nbytes: int, bw: float, alpha: float) -> None:
    p = predict("all_reduce", nbytes, bare(n, bw, alpha), "ring")
    expected = 2 * (n - 1) / n * nbytes / (bw * 1e3) + 2 * (n - 1) * alpha
    assert p.time_us == pytest.approx(expected)
    assert p.latency_us == pytest.approx(2 * (n - 1) * alpha)


def test_ring_all_reduce_8_gpus_1_gib_at_100_gbps() -> None:
    # 2*7/8 * 2^30 B / 100e9 B/s = 18790.48 us, plus 14 steps * 2 us.
    p = predict("all_reduce", GIB, bare(8, 100.0, 2.0), "ring")
    assert p.time_us == pytest.approx(18790.4809 + 28.0, rel=1e-6)
    # busbw tends to the link bandwidth as latency becomes negligible.
    assert p.busbw_gbps == pytest.approx(100.0 * 18790.4809 / (18790.4809 + 28.0), rel=1e-6)


@pytest.mark.parametrize("coll", ["reduce_scatter", "all_gather"])
def test_ring_reduce_scatter_all_gather_hand_computed(coll: str) -> None:
    p = predict(coll, 8_000_000, bare(4, 50.0, 1.5), "ring")
    assert p.time_us == pytest.approx(3 / 4 * 8_000_000 / 50e3 + 3 * 1.5)


def test_broadcast_hand_computed() -> None:
    p = predict("broadcast", 1_000_000, bare(4, 10.0, 1.0), "ring")
    assert p.time_us == pytest.approx(1_000_000 / 10e3 + 3 * 1.0)
    assert p.busbw_gbps == pytest.approx(p.algbw_gbps)


def test_ring_latency_uses_nccl_constants() -> None:
    # CSV: lat = baseLat + (nsteps - nInterSteps)*intraLat + nInterSteps*interLat,
    # Ring Simple baseLat 8.4, NVLink 3.4, NET 14.0; nsteps = 2(n-1), nInterSteps = 2(nNodes-1).
    topo = Topology(8, nodes=4, inter=ib_link(400))
    p = predict("all_reduce", 0, topo, "ring", "simple")
    assert p.time_us == pytest.approx(8.4 + (62 - 6) * 3.4 + 6 * 14.0)
    ll = predict("all_reduce", 0, topo, "ring", "ll")
    assert ll.time_us == pytest.approx(6.6 + 56 * 0.6 + 6 * 2.7)


def test_tree_latency_and_bandwidth() -> None:
    # lat = baseLat + 2*((ppn-1)*intraLat + log2(nNodes)*interLat); algBw = 0.5 * 0.92 * busBw.
    topo = Topology(8, nodes=16, inter=ib_link(400))
    p = predict("all_reduce", GIB, topo, "tree", "simple")
    assert p.latency_us == pytest.approx(8.4 + 2 * (7 * 3.4 + 4 * 14.0))
    bus = min(H100_NVLINK.bandwidth_gbps, 8 * 48.0)
    assert p.bandwidth_us == pytest.approx(GIB / (0.5 * 0.92 * bus * 1e3))


def test_hierarchical_hand_computed() -> None:
    topo = bare(4, 200.0, 1.0, nodes=2, inter=Link(20.0, 10.0))
    p = predict("all_reduce", 4_000_000, topo, "hierarchical")
    rs_ag = 2 * (3 / 4 * 4_000_000 / 200e3)
    inter = 2 * (1 / 2) * (4_000_000 / 4) / 20e3
    assert p.time_us == pytest.approx(rs_ag + inter + 2 * 3 * 1.0 + 2 * 1 * 10.0)


def test_nccl_tests_busbw_factors() -> None:
    assert busbw_factor("all_reduce", 8) == pytest.approx(14 / 8)
    assert busbw_factor("reduce_scatter", 8) == pytest.approx(7 / 8)
    assert busbw_factor("all_gather", 8) == pytest.approx(7 / 8)
    assert busbw_factor("broadcast", 8) == 1.0


def test_single_rank_is_free() -> None:
    assert predict("all_reduce", GIB, Topology(1)).time_us == 0.0


# --- properties ------------------------------------------------------------------------------

topologies = st.builds(
    Topology,
    ranks_per_node=st.integers(1, 16),
    nodes=st.integers(1, 64),
    intra=st.builds(
        Link,
        st.floats(1.0, 1000.0),
        st.floats(0.0, 20.0),
        st.one_of(st.none(), st.floats(0.0, 5.0)),
    ),
    inter=st.builds(Link, st.floats(1.0, 100.0), st.floats(0.0, 30.0), st.floats(0.0, 10.0)),
    nvls=st.booleans(),
)
sizes = st.integers(0, 1 << 36)


@given(topologies, sizes, sizes, st.sampled_from(COLLECTIVES))
def test_time_non_decreasing_in_bytes(topo: Topology, a: int, b: int, coll: str) -> None:
    small, large = sorted((a, b))
    assert best(coll, small, topo).time_us <= best(coll, large, topo).time_us
    for proto in ("simple", "ll") if topo.intra.ll_latency_us is not None else ("simple",):
        t_small = predict(coll, small, topo, "ring", proto).time_us
        assert t_small <= predict(coll, large, topo, "ring", proto).time_us


@given(topologies, sizes, st.sampled_from(ALGORITHMS), st.sampled_from(PROTOCOLS))
def test_never_negative(topo: Topology, nbytes: int, algo: str, proto: str) -> None:
    try:
        p = predict("all_reduce", nbytes, topo, algo, proto)
    except PlannerError:
        return  # algorithm/protocol not applicable to this topology
    assert p.time_us >= 0 and p.latency_us >= 0 and p.bandwidth_us >= 0
    assert p.busbw_gbps >= 0 and math.isfinite(p.time_us)


@given(topologies, sizes, st.sampled_from(COLLECTIVES))
def test_ring_busbw_never_above_link_bandwidth(topo: Topology, nbytes: int, coll: str) -> None:
    p = predict(coll, nbytes, topo, "ring")
    assert p.busbw_gbps <= topo.intra.bandwidth_gbps * (1 + 1e-9)
    if topo.nodes > 1 and topo.inter is not None:
        assert p.busbw_gbps <= topo.ranks_per_node * topo.inter.bandwidth_gbps * (1 + 1e-9)


# --- best() ----------------------------------------------------------------------------------


@pytest.mark.parametrize("nodes", [8, 16, 64])
@pytest.mark.parametrize("nbytes", [8, 64 << 10])
def test_best_is_tree_for_small_messages_across_many_nodes(nodes: int, nbytes: int) -> None:
    choice = best("all_reduce", nbytes, Topology(8, nodes=nodes, inter=ib_link(400)))
    assert choice.algorithm == "tree"
    assert choice.why.startswith("tree: latency-bound at ")
    assert f"across {nodes} nodes" in choice.why


def test_best_why_names_the_size() -> None:
    choice = best("all_reduce", 64 << 10, Topology(8, nodes=16, inter=ib_link(400)))
    assert "tree: latency-bound at 64 KiB across 16 nodes" in choice.why


@pytest.mark.parametrize(
    ("topo", "nbytes", "expected"),
    [
        (Topology(8), GIB, "ring"),  # one node, no NVLS
        (Topology(8, nodes=2, inter=ib_link(400)), GIB, "ring"),
        (Topology(8, nodes=16, inter=ib_link(400)), 16 * GIB, "ring"),
        (Topology(8, nodes=16, inter=ib_link(100)), GIB, "ring"),
        # Few nodes on a slow network: hierarchical sends only 2(nodes-1)/nodes * N/ppn
        # bytes per GPU across nodes, against the ring's 2(n-1)/n * N/ppn.
        (Topology(8, nodes=2, inter=ib_link(100)), GIB, "hierarchical"),
    ],
)
def test_best_is_ring_or_hierarchical_for_large_messages(
    topo: Topology, nbytes: int, expected: str
) -> None:
    choice = best("all_reduce", nbytes, topo)
    assert choice.algorithm == expected
    assert "bandwidth-bound" in choice.why
    assert choice.busbw_gbps > 0


def test_best_uses_nvls_for_large_messages_when_available() -> None:
    assert best("all_reduce", GIB, Topology(8, nvls=True)).algorithm == "nvls"
    # NVLS's 25 us latency loses to ring LL (15 us) at small sizes.
    assert best("all_reduce", 1024, Topology(8, nvls=True)).algorithm == "ring"


@pytest.mark.parametrize("coll", ["reduce_scatter", "all_gather", "broadcast"])
def test_best_for_other_collectives_is_ring(coll: str) -> None:
    assert best(coll, GIB, Topology(8, nodes=4, inter=ib_link(400))).algorithm == "ring"


# --- bad input -------------------------------------------------------------------------------


def test_zero_ranks_is_rejected() -> None:
    with pytest.raises(ValueError, match="ranks_per_node"):
        Topology(0)
    with pytest.raises(ValueError, match="nodes"):
        Topology(8, nodes=0)


def test_negative_bytes_is_rejected() -> None:
    with pytest.raises(ValueError, match="nbytes: must be >= 0"):
        predict("all_reduce", -1, Topology(8))
    with pytest.raises(PlannerError) as info:
        best("all_reduce", -5, Topology(8))
    assert info.value.field == "nbytes"


def test_unknown_collective_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"collective: unknown collective 'allreduce'"):
        best("allreduce", 1024, Topology(8))
    with pytest.raises(PlannerError) as info:
        predict("alltoall", 1024, Topology(8))
    assert info.value.field == "collective"


def test_other_bad_inputs() -> None:
    with pytest.raises(PlannerError, match="algorithm"):
        predict("all_reduce", 1, Topology(8), "butterfly")
    with pytest.raises(PlannerError, match="algorithm"):
        predict("reduce_scatter", 1, Topology(8), "tree")
    with pytest.raises(PlannerError, match="inter"):
        Topology(8, nodes=2)
    with pytest.raises(PlannerError, match="bandwidth_gbps"):
        Link(0.0, 1.0)


# --- against the published points (shared/planner/nccl_collectives.csv) ----------------------

# Stated/measured rows that miss ±20%, listed so the test fails if the model gets worse
# *or* better for them. NVLS on 5 GPUs: the model's constant NVLS algbw gives +20.0%.
KNOWN_OUTSIDE_20PCT = {"measured H100-SXM NVLS n=5"}


@pytest.fixture(scope="module")
def published() -> list[Comparison]:
    return compare_to_published(require(SHARED / "planner" / "nccl_collectives.csv", "compare"))


def test_every_comparable_row_is_compared(published: list[Comparison]) -> None:
    curve = [r for r in published if r.description.startswith("measured_curve")]
    assert len(curve) == 32  # 8 B .. 16 GiB
    points = [r for r in published if not r.description.startswith("measured_curve")]
    assert len(points) == 15  # all stated/measured rows except the #1054 link fraction


def test_h100_curve_large_messages_within_20_percent(published: list[Comparison]) -> None:
    rows = [r for r in published if r.description.startswith("measured_curve")]
    large = [r for r in rows if r.regime == "bandwidth"]
    assert len(large) == 5  # 1 GiB .. 16 GiB
    bad = [(r.description, r.relative_error) for r in large if abs(r.relative_error) > 0.20]
    assert not bad


def test_h100_curve_latency_floor_within_2x(published: list[Comparison]) -> None:
    small = [r for r in published if r.regime == "latency"]
    assert len(small) == 14  # 8 B .. 64 KiB
    for r in small:
        assert r.predicted_time_us is not None and r.published_time_us is not None
        ratio = r.predicted_time_us / r.published_time_us
        assert 0.5 <= ratio <= 2.0, r.description


def test_stated_and_measured_points_within_20_percent(published: list[Comparison]) -> None:
    points = [r for r in published if not r.description.startswith("measured_curve")]
    outside = {r.description.split(" (")[0] for r in points if abs(r.relative_error) > 0.20}
    assert outside == KNOWN_OUTSIDE_20PCT
    for r in points:
        assert abs(r.relative_error) <= 0.21, r.description
    worst, median = summarize(points, "bandwidth")
    assert worst <= 0.21 and median <= 0.15
