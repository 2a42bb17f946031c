"""The queue factor of the elastic rebalance (`actions.rebalance.queue_shares`), the floors a
queue's guarantee sets (`guarantee_floors`) and, through the scenario cases in
tests/scenarios/cases/elastic.yaml, the horizon a move is judged over (`moves.move_horizon`)."""

from __future__ import annotations

import math

import pytest

from trainyard.core.actions.rebalance import Entry, guarantee_floors, queue_shares
from trainyard.core.goodput import fit
from trainyard.core.queues import QueueIndex
from trainyard.core.state import Alloc
from trainyard.core.types import Job, Queue


def _held(queues: QueueIndex, specs: list[tuple[str, int]]) -> list[Entry]:
    """Entries of jobs holding the given GPUs (minimum 1, maximum 16), counted in `queues`."""
    out = []
    for i, (name, gpus) in enumerate(specs):
        job = Job(id=f"j{i}", queue=name, gpus=gpus)
        q = queues.index[name]
        alloc = Alloc(job, q, 0, [(0, 1, 0.0, 0.0)], 0.0, gpus=gpus)
        out.append(Entry(alloc, 1, 16, 1.0, fit(job), 1.0))
        queues.add(q, gpus, 0.0, 0.0)
    return out


def _entries(queues: QueueIndex, names: list[str]) -> list[Entry]:
    """One-GPU jobs of the named queues."""
    return _held(queues, [(name, 1) for name in names])


def _index(*queues: Queue) -> QueueIndex:
    return QueueIndex(tuple(queues), 64, 64.0, 64.0, 0.0)


def _factors(entries: list[Entry], p: float) -> list[float]:
    return [e.weight ** (1.0 / (1.0 + p)) for e in entries]  # the share each job gets


def test_one_queue_is_unchanged() -> None:
    queues = _index(Queue("a", weight=5.0))
    entries = _entries(queues, ["a", "a", "a"])
    queue_shares(entries, queues, 0.5)
    assert [e.weight for e in entries] == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("p", [0.1, 0.5, 0.7])
def test_root_queues_split_by_weight_and_their_jobs_split_their_share(p: float) -> None:
    queues = _index(Queue("a", weight=3.0), Queue("b", weight=1.0))
    entries = _entries(queues, ["a", "a", "a", "b"])
    queue_shares(entries, queues, p)
    got = _factors(entries, p)
    # GPUs go in proportion to weight ^ 1/(1+p): a's three jobs 1/4 each, b's one 1/4
    assert got == pytest.approx([0.25, 0.25, 0.25, 0.25])
    two = _entries(queues, ["a", "b", "b"])
    queue_shares(two, queues, p)
    assert _factors(two, p) == pytest.approx([0.75, 0.125, 0.125])


def test_shares_follow_the_tree_and_a_parents_own_jobs() -> None:
    queues = _index(
        Queue("org", weight=1.0),
        Queue("x", parent="org", weight=1.0),
        Queue("y", parent="org", weight=3.0),
        Queue("other", weight=1.0),
    )
    p = 0.5
    entries = _entries(queues, ["x", "y", "other"])
    queue_shares(entries, queues, p)
    assert _factors(entries, p) == pytest.approx([0.125, 0.375, 0.5])
    # org's own job counts beside its children as one more child weighing their mean (2)
    own = _entries(queues, ["org", "x", "y", "other"])
    queue_shares(own, queues, p)
    assert _factors(own, p) == pytest.approx([1 / 6, 1 / 12, 0.25, 0.5])
    # queues without entries take no share: x alone under org gets all of org's half
    alone = _entries(queues, ["x", "other"])
    queue_shares(alone, queues, p)
    assert _factors(alone, p) == pytest.approx([0.5, 0.5])


def test_the_job_weights_are_kept_within_the_queue_factor() -> None:
    queues = _index(Queue("a", weight=1.0), Queue("b", weight=1.0))
    entries = _entries(queues, ["a", "b"])
    entries[0].weight = 4.0  # e.g. nearer its end (rebalance.weight)
    queue_shares(entries, queues, 0.5)
    assert entries[0].weight / entries[1].weight == pytest.approx(4.0)
    assert all(math.isfinite(e.weight) and e.weight > 0 for e in entries)


@pytest.mark.parametrize("scale", [0.01, 1.0, 100.0, 1e-200])
def test_only_the_ratios_of_weights_count(scale: float) -> None:
    queues = _index(
        Queue("p", weight=1.0 * scale),
        Queue("c", parent="p", weight=1.0 * scale),
        Queue("t", weight=1.0 * scale),
    )
    p = 0.5
    entries = _entries(queues, ["p", "c", "t"])
    queue_shares(entries, queues, p)
    assert _factors(entries, p) == pytest.approx([0.25, 0.25, 0.5])
    assert all(e.weight > 0.0 for e in entries)


def test_a_guarantee_owes_its_queue_what_it_lacks_shared_by_its_jobs() -> None:
    queues = _index(Queue("g", guaranteed=8), Queue("other"))
    entries = _held(queues, [("g", 1), ("g", 1), ("other", 14)])
    entries[0].hi = 4  # the first can grow by 3 only
    guarantee_floors(entries, queues)
    assert [(e.lo, e.owed) for e in entries] == [(4, 3), (4, 3), (1, 0)]  # 6 owed in all


def test_a_guarantee_owes_only_what_other_queues_hold_above_theirs() -> None:
    queues = _index(Queue("g", guaranteed=8), Queue("other", guaranteed=12))
    entries = _held(queues, [("g", 2), ("other", 14)])
    guarantee_floors(entries, queues)  # other may give 2: it is guaranteed 12
    assert [(e.lo, e.owed) for e in entries] == [(4, 2), (1, 0)]


def test_a_lone_queue_is_owed_nothing_by_its_own_jobs() -> None:
    queues = _index(Queue("all", guaranteed=64))  # the simulator's lone queue
    entries = _held(queues, [("all", 2), ("all", 14)])
    guarantee_floors(entries, queues)
    assert [(e.lo, e.owed) for e in entries] == [(1, 0), (1, 0)]


def test_a_guarantee_owes_nothing_beyond_its_parents() -> None:
    queues = _index(Queue("org"), Queue("team", parent="org", guaranteed=8), Queue("x"))
    entries = _held(queues, [("team", 1), ("org", 1), ("x", 14)])
    guarantee_floors(entries, queues)  # org guarantees nothing: reclaim could not take it
    assert [(e.lo, e.owed) for e in entries] == [(1, 0), (1, 0), (1, 0)]
