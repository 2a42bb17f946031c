"""The placement scorers, called directly: (cluster state, job, candidates) -> which wins.

Each row builds a small cluster (one leaf level: `l0` busy, `l1` empty unless a row says
otherwise), a job and candidate placements, and states the order each scorer must put them
in. `binpack` and `spread` are set against each other on the same candidates: they must
disagree wherever the candidates' leaves differ in fullness.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import snapshots

from trainyard.core import get_profile, run_cycle
from trainyard.core.cycle import Cycle
from trainyard.core.framework import SCORERS
from trainyard.core.placement import Candidate
from trainyard.core.snapshot import Snapshot
from trainyard.core.types import Job, Node, NodeDevices, Queue, RunningJob, Topology

TOPO = Topology(levels=("leaf",))


def _node(name: str, leaf: str, gpus: int = 8, island: int = 0) -> Node:
    return Node(name=name, gpus=gpus, path=(leaf,), island_size=island)


def _running(jid: str, node: str, devices: tuple[int, ...]) -> RunningJob:
    job = Job(id=jid, queue="q", gpus=len(devices))
    return RunningJob(job, (NodeDevices(node, devices),), 0.0)


@dataclass(frozen=True)
class Row:
    name: str
    nodes: tuple[Node, ...]
    running: tuple[RunningJob, ...]
    job: Job
    parts: tuple[tuple[tuple[str, int], ...], ...]  # each candidate: (node, GPUs) parts
    # scorer -> candidate indices, best first (ties keep their listed order)
    order: dict[str, list[int]]


# l0 holds n0 (6 of 8 GPUs busy) and n1 (empty); l1 holds n2 and n3 (both empty).
BUSY_L0 = (
    _node("n0", "l0"),
    _node("n1", "l0"),
    _node("n2", "l1"),
    _node("n3", "l1"),
)
SIX_ON_N0 = (_running("r0", "n0", (0, 1, 2, 3, 4, 5)),)

ROWS = (
    Row(
        "best fit: the node left with the least free room wins fragmentation",
        BUSY_L0,
        SIX_ON_N0,
        Job(id="j", queue="q", gpus=2),
        ((("n1", 2),), (("n0", 2),)),
        {"fragmentation": [1, 0]},
    ),
    Row(
        "binpack prefers the fuller leaf, spread the emptier one",
        BUSY_L0,
        SIX_ON_N0,
        Job(id="j", queue="q", gpus=2),
        ((("n1", 2),), (("n2", 2),)),
        {"binpack": [0, 1], "spread": [1, 0]},
    ),
    Row(
        "one node beats a gang over two nodes; one leaf beats the whole cluster",
        BUSY_L0,
        SIX_ON_N0,
        Job(id="j", queue="q", gpus=8),
        ((("n2", 4), ("n3", 4)), (("n3", 8),), (("n1", 4), ("n2", 4))),
        {"topology": [1, 0, 2]},
    ),
    Row(
        "on a node of two NVLink islands, a job that fits one free island scores higher",
        (_node("n0", "l0", island=4), _node("n1", "l0", island=4)),
        # n0: one device busy in each island (3 + 3 free); n1: island 0 busy (0 + 4 free)
        (
            _running("a", "n0", (0,)),
            _running("b", "n0", (4,)),
            _running("c", "n1", (0, 1, 2, 3)),
        ),
        Job(id="j", queue="q", gpus=4),
        ((("n0", 4),), (("n1", 4),)),
        {"topology": [1, 0]},
    ),
)


def _candidates(cycle: Cycle, row: Row) -> list[Candidate]:
    layout = cycle.layout
    index = layout.node_index
    out = []
    for spec in row.parts:
        parts = [(index[name], k) for name, k in spec]
        nodes = [n for n, _k in parts]
        cls = layout.class_of_node[nodes[0]]
        if len(nodes) == 1:
            out.append(Candidate(cls, parts, layout.depth, nodes[0]))
            continue
        leaves = {layout.domain_of[0][n] for n in nodes}
        if len(leaves) == 1:
            out.append(Candidate(cls, parts, 0, leaves.pop()))
        else:
            out.append(Candidate(cls, parts, -1, 0))
    return out


def _ranked(values: list[float]) -> list[int]:
    return sorted(range(len(values)), key=lambda i: (-values[i], i))


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_scorer_orders(row: Row) -> None:
    snap = Snapshot(
        now=0.0,
        nodes=row.nodes,
        topology=TOPO,
        queues=(Queue("q", guaranteed=64),),
        running=row.running,
        pending=(row.job,),
    )
    cycle = Cycle(snap, get_profile("default"))
    cands = _candidates(cycle, row)
    for name, expected in row.order.items():
        values = SCORERS.get(name)(cycle.state, row.job, cands)
        assert len(values) == len(cands)
        assert all(0.0 <= v <= 1.0 for v in values), (name, values)
        assert _ranked(values) == expected, f"{name}: {values}"
        # strictly ordered where the row says one wins over another
        assert len({round(values[i], 9) for i in expected}) == len(expected), (name, values)


def test_binpack_and_spread_are_mirror_images() -> None:
    row = ROWS[1]
    snap = Snapshot(0.0, row.nodes, TOPO, (Queue("q", guaranteed=64),), row.running, (row.job,))
    cycle = Cycle(snap, get_profile("default"))
    cands = _candidates(cycle, row)
    pack = SCORERS.get("binpack")(cycle.state, row.job, cands)
    spread = SCORERS.get("spread")(cycle.state, row.job, cands)
    assert [round(a + b, 9) for a, b in zip(pack, spread, strict=True)] == [1.0] * len(cands)


# The same built-in scorers under other names (distinct function objects): a profile of
# these is not fused, so the cycle rates every candidate through `placement.choose`.
for _name in ("topology", "fragmentation", "binpack", "spread"):
    _builtin = SCORERS.get(_name)
    SCORERS.register(f"{_name}-unfused", lambda s, j, c, f=_builtin: f(s, j, c))


@settings(max_examples=200, deadline=None)
@given(snapshots(), st.sampled_from(["default", "priority", "drf", "las"]), st.booleans())
def test_the_fused_single_node_choice_is_the_choice_of_the_scorers(
    snap: Snapshot, name: str, spread: bool
) -> None:
    """`scoring.best_single_node` (the cycle's fast path for a job that fits one node of
    one class) decides exactly as the scorers through `choose` would, on clusters with
    several device classes, NVLink islands, drained nodes and spares."""
    base = get_profile(name)
    scorers = (("topology", 4.0), ("spread", 1.0)) if spread else base.scorers
    fused = base.with_overrides(scorers=scorers)
    plain = base.with_overrides(scorers=tuple((f"{n}-unfused", w) for n, w in scorers))
    a, b = run_cycle(snap, fused), run_cycle(snap, plain)
    assert (a.placements, a.evictions, a.resizes, a.reservations) == (
        b.placements, b.evictions, b.resizes, b.reservations,
    )  # fmt: skip
    assert {k: v.message for k, v in a.pending.items()} == {
        k: v.message for k, v in b.pending.items()
    }
