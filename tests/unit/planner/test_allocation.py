"""Re-planning for an actual allocation (trainyard.planner.allocation): rank placement and group
topologies by hand, agreement with `search` on whole equal nodes, the TP-inside-a-node rule,
uneven splits never predicted faster than packed ones, and bad input."""

from __future__ import annotations

import pytest

from trainyard.planner.allocation import (
    RankOrder,
    group_topologies,
    node_of_rank,
    placement_step_time,
    search_allocation,
)
from trainyard.planner.collectives import Topology
from trainyard.planner.compute import step_time
from trainyard.planner.errors import PlannerError
from trainyard.planner.hardware import gpu
from trainyard.planner.layout import ParallelLayout
from trainyard.planner.model import Model
from trainyard.planner.presets import preset
from trainyard.planner.search import search

A100 = gpu("A100-80GB")
# 64 heads: tp = 8 is valid and among the fitting layouts on 16 GPUs.
MID = Model("mid", layers=16, hidden=4096, heads=64, seq_len=2048, vocab=32000, global_batch=128)
ALL = 100_000  # `top` large enough to return every fitting layout


def _shape(topo: Topology) -> tuple[int, int]:
    return (topo.nodes, topo.ranks_per_node)


def test_node_of_rank_fills_nodes_in_order() -> None:
    assert node_of_rank((2, 1, 3)) == [0, 0, 1, 2, 2, 2]


def test_hand_checked_uneven_dp_group() -> None:
    # (8, 4, 4), tp=4, dp=4, Megatron order: DP group of tp-rank 0 is ranks 0, 4, 8, 12 on nodes
    # 0, 0, 1, 2: three nodes, 2 ranks on the most loaded, 1 on the least loaded.
    lay = ParallelLayout(tp=4, dp=4, sequence_parallel=True)
    tp_topos, dp_topos = group_topologies(lay, A100, (8, 4, 4))
    assert [_shape(t) for t in tp_topos] == [(1, 4)]
    assert sorted(_shape(t) for t in dp_topos) == [(3, 1), (3, 2)]
    # The step is timed on the slower of the two DP candidates.
    times = [
        step_time(MID, lay, A100, 8, tp_topology=tp_topos[0], dp_topology=d).iteration_s
        for d in dp_topos
    ]
    assert placement_step_time(MID, lay, A100, (8, 4, 4)).iteration_s == max(times)


def test_megatron_order_example() -> None:
    # Megatron's docstring example: 16 GPUs, tp=2, pp=4 -> DP groups [0, 2], [1, 3], ...
    # which stay inside a node of 8; with the tp-pp-dp order the DP group is {0, 8}.
    lay = ParallelLayout(tp=2, pp=4, dp=2, sequence_parallel=True)
    _, megatron = group_topologies(lay, A100, (8, 8))
    _, strided = group_topologies(lay, A100, (8, 8), order="tp-pp-dp")
    assert [_shape(t) for t in megatron] == [(1, 2)]
    assert [_shape(t) for t in strided] == [(2, 1)]


def test_tp_never_crosses_a_node() -> None:
    plans = search_allocation(MID, A100, (8, 4, 4), top=ALL)
    tps = {p.layout.tp for p in plans}
    assert 8 not in tps and 4 in tps
    assert 8 in {p.layout.tp for p in search_allocation(MID, A100, (8, 8), top=ALL)}
    with pytest.raises(PlannerError) as err:
        group_topologies(ParallelLayout(tp=8, dp=2), A100, (8, 4, 4))
    assert err.value.field == "tp"


@pytest.mark.parametrize("model", [MID, preset("gpt3-1.3b")], ids=lambda m: m.name)
def test_two_full_nodes_match_search(model: Model) -> None:
    expected = search(model, 16, A100, nodes_of=8, top=ALL)
    # search's uniform model is the tp-pp-dp rank order: identical plans.
    assert search_allocation(model, A100, (8, 8), top=ALL, order="tp-pp-dp") == expected
    assert search_allocation(model, A100, (8, 8), order="tp-pp-dp") == expected[:10]
    # Megatron's order packs DP groups at least as tightly: same layouts, never slower.
    megatron = {p.layout: p for p in search_allocation(model, A100, (8, 8), top=ALL)}
    assert set(megatron) == {p.layout for p in expected}
    for plan in expected:
        got = megatron[plan.layout]
        assert got.memory == plan.memory
        assert got.time.iteration_s <= plan.time.iteration_s * (1 + 1e-12)


def test_one_node_matches_search_in_either_order() -> None:
    expected = search(MID, 8, A100, nodes_of=8, top=ALL)
    assert search_allocation(MID, A100, (8,), top=ALL) == expected
    assert search_allocation(MID, A100, (8,), top=ALL, order="tp-pp-dp") == expected


@pytest.mark.parametrize(
    ("packed", "split"),
    [((8, 8), (8, 4, 4)), ((8, 8), (4, 4, 4, 4)), ((8, 4, 4), (4, 4, 4, 4)), ((8, 8), (2,) * 8)],
)
@pytest.mark.parametrize("order", ["tp-dp-pp", "tp-pp-dp"])
def test_more_nodes_never_faster(
    packed: tuple[int, ...], split: tuple[int, ...], order: RankOrder
) -> None:
    fast = {p.layout: p for p in search_allocation(MID, A100, packed, top=ALL, order=order)}
    slow = search_allocation(MID, A100, split, top=ALL, order=order)
    common = [p for p in slow if p.layout in fast]
    assert common
    for plan in common:
        assert plan.time.iteration_s >= fast[plan.layout].time.iteration_s * (1 - 1e-12)


def test_ranked_fastest_first() -> None:
    plans = search_allocation(MID, A100, (8, 4, 4))
    assert len(plans) == 10
    times = [p.time.iteration_s for p in plans]
    assert times == sorted(times)


@pytest.mark.parametrize("bad", [(), [], (8, 0), (8, -4), (8, True), (8, 2.0), "88", 16])
def test_bad_allocation_names_the_field(bad: object) -> None:
    with pytest.raises(PlannerError) as err:
        search_allocation(MID, A100, bad)  # type: ignore[arg-type]
    assert err.value.field == "gpus_per_node"


def test_bad_order_and_top() -> None:
    with pytest.raises(PlannerError) as err:
        search_allocation(MID, A100, (8, 8), order="pp-dp-tp")  # type: ignore[arg-type]
    assert err.value.field == "order"
    with pytest.raises(PlannerError) as err:
        search_allocation(MID, A100, (8, 8), top=0)
    assert err.value.field == "top"


def test_no_split_and_no_fit_are_clear() -> None:
    # 7 GPUs: tp must divide 7 and 64 heads -> tp = 1; 7 divides neither the layers, nor the
    # layers plus embedding and loss (18, uneven stages), nor the batch.
    with pytest.raises(PlannerError, match="tp x pp x dp") as err:
        search_allocation(MID, A100, (7,))
    assert err.value.field == "gpus_per_node"
    big = preset("gpt3-175b")
    with pytest.raises(PlannerError, match="ask for at least") as err:
        search_allocation(big, A100, (2,))
    assert err.value.field == "gpus_per_node"


def test_layout_must_use_the_allocation() -> None:
    with pytest.raises(PlannerError) as err:
        placement_step_time(MID, ParallelLayout(tp=2, dp=2), A100, (8,))
    assert err.value.field == "layout"
