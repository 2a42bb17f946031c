"""Unit tests of the core's bit helpers (resources) and of the layout that topology.build_layout
derives from the nodes: device classes, islands, domains and capacities."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from state_fixtures import TWO_LEVELS

from trainyard.core import Node, Topology, build_layout
from trainyard.core.resources import bits, full_mask, lowest, lowest_n, mask_of

# -- resources ----------------------------------------------------------------------------


def test_bit_helpers_on_known_values() -> None:
    assert mask_of([]) == 0
    assert mask_of([0, 3, 5]) == 0b101001
    assert mask_of([2, 2]) == 0b100
    assert list(bits(0)) == []
    assert list(bits(0b101001)) == [0, 3, 5]
    assert lowest(0b101000) == 3
    assert lowest(1) == 0
    assert lowest_n(0b101101, 0) == 0
    assert lowest_n(0b101101, 2) == 0b101
    assert lowest_n(0b101101, 4) == 0b101101
    assert full_mask(0) == 0
    assert full_mask(1) == 1
    assert full_mask(8) == 0xFF


@settings(deadline=None)
@given(st.sets(st.integers(0, 70)), st.data())
def test_bit_helpers_agree_with_sets(indices: set[int], data: st.DataObject) -> None:
    mask = mask_of(indices)
    assert list(bits(mask)) == sorted(indices)
    assert mask.bit_count() == len(indices)
    if indices:
        assert lowest(mask) == min(indices)
    n = data.draw(st.integers(0, len(indices)))
    assert list(bits(lowest_n(mask, n))) == sorted(indices)[:n]
    size = data.draw(st.integers(0, 70))
    assert list(bits(full_mask(size))) == list(range(size))


# -- topology.build_layout ----------------------------------------------------------------

LAYOUT_NODES = (
    Node("n0", 8, "H100", 80.0, path=("s0", "l0"), island_size=4),
    Node("n1", 8, "H100", 80.0, path=("s0", "l0"), unavailable=(1,)),
    Node("n2", 4, "A100", 40.0, path=("s0", "l1"), schedulable=False),
    Node("n3", 4, "H100", 80.0, path=("s1", "l0"), island_size=2),  # not the same l0
    Node("n4", 0, path=("s1", "l2")),  # a CPU-only node
)


def test_layout_indexes_nodes_and_device_classes() -> None:
    layout = build_layout(LAYOUT_NODES, TWO_LEVELS)
    assert layout.depth == 2
    assert layout.node_index == {"n0": 0, "n1": 1, "n2": 2, "n3": 3, "n4": 4}
    assert layout.classes == [("H100", 80.0), ("A100", 40.0)]
    assert layout.class_of_node == [0, 0, 1, 0, -1]
    # unschedulable nodes and unavailable devices are not usable
    assert layout.usable_mask == [0xFF, 0xFD, 0, 0xF, 0]
    assert layout.class_capacity == [8 + 7 + 4, 0]
    assert layout.class_node_max == [8, 0]


def test_layout_islands() -> None:
    layout = build_layout(LAYOUT_NODES, TWO_LEVELS)
    assert layout.islands[0] == (0x0F, 0xF0)
    assert layout.islands[1] == (0xFF,)  # island_size 0: the node is one island
    assert layout.islands[2] == (0xF,)
    assert layout.islands[3] == (0b0011, 0b1100)


def test_layout_domains_children_and_capacities() -> None:
    layout = build_layout(LAYOUT_NODES, TWO_LEVELS)
    assert layout.domain_names == [["s0", "s1"], ["s0/l0", "s0/l1", "s1/l0", "s1/l2"]]
    assert layout.domain_of == [[0, 0, 0, 1, 1], [0, 0, 1, 2, 3]]
    assert layout.children == [[[0, 1], [2, 3]], [[0, 1], [2], [3], [4]]]
    assert layout.top == [0, 1]
    # [level][class][domain] -> usable GPUs
    assert layout.domain_capacity == [
        [[15, 4], [0, 0]],
        [[15, 0, 4, 0], [0, 0, 0, 0]],
    ]


def test_layout_level_names_and_acceptable_classes() -> None:
    layout = build_layout(LAYOUT_NODES, TWO_LEVELS)
    assert layout.level_index("spine") == 0
    assert layout.level_index("leaf") == 1
    assert layout.level_index("node") == 2
    assert layout.level_index("island") == 2
    assert layout.level_index("cluster") == -1
    assert layout.level_index("rack") is None
    assert layout.classes_for((), 0.0) == (0, 1)
    assert layout.classes_for(("A100",), 0.0) == (1,)
    assert layout.classes_for(("A100", "H100"), 0.0) == (1, 0)  # the job's preference order
    assert layout.classes_for((), 50.0) == (0,)
    assert layout.classes_for(("A100",), 50.0) == ()
    assert layout.classes_for(("V100",), 0.0) == ()


def test_layout_without_topology_levels() -> None:
    nodes = (Node("a", 2), Node("b", 4, gpu_type="L40"), Node("c", 2))
    layout = build_layout(nodes, Topology())
    assert layout.depth == 0
    assert layout.top == [0, 1, 2]
    assert layout.domain_of == []
    assert layout.children == []
    assert layout.domain_capacity == []
    assert layout.class_of_node == [0, 1, 0]
    assert layout.class_capacity == [4, 4]
    assert layout.class_node_max == [2, 4]
