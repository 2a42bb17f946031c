"""Unit tests of queues.QueueIndex: queue paths and counters, quota checks (limit and
guaranteed) and the share key that orders queues."""

from __future__ import annotations

import pytest

from trainyard.core import Queue
from trainyard.core.queues import QueueIndex

# -- queues.QueueIndex --------------------------------------------------------------------


def queue_index(*queues: Queue, gpus: int = 100, usage_weight: float = 0.5) -> QueueIndex:
    return QueueIndex(tuple(queues), gpus, 1000.0, 10_000.0, usage_weight)


def test_queue_paths_and_counters_include_ancestors() -> None:
    qi = queue_index(
        Queue("root", guaranteed=8, limit=10),
        Queue("team", parent="root", guaranteed=4),
        Queue("leaf", parent="team", guaranteed=2, limit=3),
        Queue("other"),
    )
    root, team, leaf, other = (qi.index[n] for n in ("root", "team", "leaf", "other"))
    assert qi.path[leaf] == (leaf, team, root)
    assert qi.path[other] == (other,)
    assert qi.roots == [root, other]
    assert qi.children[root] == [team]
    qi.add(leaf, 2, 4.0, 8.0)
    assert qi.gpus == [2, 2, 2, 0]
    assert qi.cpus[root] == 4.0 and qi.mem[team] == 8.0
    qi.add(team, 5, 0.0, 0.0)
    assert qi.gpus == [7, 7, 2, 0]


def test_queue_quota_checks_name_the_blocking_queue() -> None:
    qi = queue_index(
        Queue("root", guaranteed=8, limit=10),
        Queue("team", parent="root", guaranteed=4),
        Queue("leaf", parent="team", guaranteed=2, limit=3),
        Queue("other"),
    )
    root, team, leaf, other = (qi.index[n] for n in ("root", "team", "leaf", "other"))
    assert qi.within_limit(leaf, 3) == -1
    assert qi.within_limit(leaf, 4) == leaf  # the queue itself is checked first
    qi.add(team, 7, 0.0, 0.0)
    assert qi.within_limit(leaf, 3) == -1  # root: 7 + 3 <= 10
    assert qi.within_limit(leaf, 4) == leaf
    assert qi.within_limit(team, 3) == -1
    assert qi.within_limit(team, 4) == root
    assert qi.within_limit(other, 1000) == -1  # no limit anywhere on its path
    # guaranteed: non-preemptible jobs must stay inside it on the whole path
    assert qi.within_guaranteed(leaf, 2) == team  # leaf 0 + 2 <= 2, team 7 + 2 > 4
    assert qi.within_guaranteed(root, 1) == -1
    assert qi.within_guaranteed(root, 2) == root
    assert qi.within_guaranteed(other, 1) == other
    # GPUs a queue could lose with every queue on its path staying >= guaranteed
    assert qi.over_guaranteed(root) == 7 - 8
    assert qi.over_guaranteed(team) == min(7 - 4, 7 - 8)
    qi.add(root, 3, 0.0, 0.0)
    assert qi.over_guaranteed(team) == min(7 - 4, 10 - 8)
    assert qi.over_guaranteed(root) == 2


def test_share_key_serves_queues_below_guaranteed_first_by_fill() -> None:
    qi = queue_index(Queue("a", guaranteed=10), Queue("b", guaranteed=4), Queue("c"))
    a, b, c = qi.index["a"], qi.index["b"], qi.index["c"]
    qi.add(a, 5, 0.0, 0.0)
    qi.add(b, 1, 0.0, 0.0)
    assert qi.share_key(a) == (0, 0.5)
    assert qi.share_key(b) == (0, 0.25)
    assert qi.share_key(c)[0] == 1  # guaranteed 0: never below it
    assert sorted([a, b, c], key=qi.share_key) == [b, a, c]
    qi.add(b, 3, 0.0, 0.0)  # b reaches its guarantee: now ordered by share
    assert qi.share_key(b)[0] == 1
    assert sorted([a, b, c], key=qi.share_key) == [a, c, b]


def test_share_key_weights_dominant_share_and_usage() -> None:
    qi = queue_index(
        Queue("heavy", weight=2.0),
        Queue("light"),
        Queue("cpu"),
        Queue("old", usage=0.4),
        usage_weight=0.5,
    )
    heavy, light, cpu, old = (qi.index[n] for n in ("heavy", "light", "cpu", "old"))
    qi.add(heavy, 16, 0.0, 0.0)
    qi.add(light, 10, 0.0, 0.0)
    qi.add(cpu, 0, 300.0, 0.0)  # 30% of the CPUs: CPU is its dominant resource
    assert qi.share_key(heavy) == pytest.approx((1, 0.16 / 2.0))
    assert qi.share_key(light) == pytest.approx((1, 0.1))
    assert qi.share_key(cpu) == pytest.approx((1, 0.3))
    assert qi.share_key(old) == pytest.approx((1, 0.5 * 0.4))
    assert sorted([heavy, light, cpu, old], key=qi.share_key) == [heavy, light, old, cpu]
