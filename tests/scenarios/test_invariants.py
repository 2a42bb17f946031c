"""The invariant checker itself: it accepts a real decision and rejects corrupted ones."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from trainyard.core import Decision, Eviction, NodeDevices, PendingReason, Placement, Snapshot
from trainyard.scenario import load_scenario, schedule

from .invariants import check_decision

SCENARIO = {
    "now": 1000,
    "topology": {"levels": ["leaf"]},
    "nodes": [{"name": "n{i}", "count": 2, "gpus": 8, "path": ["l0"], "island_size": 4}],
    "running": [
        {"id": "low", "priority": 0, "placement": [{"node": "n0", "devices": "all"}]},
        {"id": "np", "preemptible": False, "placement": [{"node": "n1", "devices": "0-3"}]},
    ],
    "pending": [
        {"id": "urgent", "gpus": 8, "priority": 9},
        {"id": "small", "gpus": 2, "priority": 1},
        {"id": "waits", "gpus": 8},
    ],
}


def _place(d: Decision, job: str, node: str, devices: tuple[int, ...]) -> Decision:
    p = next(p for p in d.placements if p.job_id == job)
    moved = p._replace(nodes=(NodeDevices(node, devices),))
    return replace(d, placements=tuple(moved if q is p else q for q in d.placements))


CORRUPT: list[tuple[str, Callable[[Decision], Decision], str]] = [
    ("double-booked", lambda d: _place(d, "small", "n1", (3, 4)), "double-booked"),
    ("split-gang", lambda d: _place(d, "small", "n1", (4,)), "gang split"),
    ("bad-device", lambda d: _place(d, "small", "n1", (8, 9)), "not on n1"),
    (
        "evict-non-preemptible",
        lambda d: replace(
            d, evictions=(*d.evictions, Eviction("np", "default", 4, "preempt", "urgent", "x"))
        ),
        "non-preemptible",
    ),
    (
        "unexplained",
        lambda d: replace(d, pending={k: v for k, v in d.pending.items() if k != "waits"}),
        "pending explained",
    ),
    (
        "empty-message",
        lambda d: replace(d, pending={**d.pending, "waits": PendingReason("capacity", " ")}),
        "empty explanation",
    ),
    (
        "not-pending",
        lambda d: replace(
            d, placements=(*d.placements, Placement("low", "default", (), "allocate"))
        ),
        "was not pending",
    ),
]


def _decision() -> tuple[Snapshot, Decision]:
    scenario = load_scenario(SCENARIO)
    return scenario.snapshot, schedule(scenario, "priority")


def test_real_decision_passes() -> None:
    snap, dec = _decision()
    assert {p.job_id for p in dec.placements} == {"urgent", "small"}
    assert [e.job_id for e in dec.evictions] == ["low"]
    check_decision(snap, dec)


@pytest.mark.parametrize(
    ("corrupt", "fragment"), [c[1:] for c in CORRUPT], ids=[c[0] for c in CORRUPT]
)
def test_corrupted_decision_is_caught(corrupt: Callable[[Decision], Decision], fragment: str):
    snap, dec = _decision()
    with pytest.raises(AssertionError, match=fragment):
        check_decision(snap, corrupt(dec))
