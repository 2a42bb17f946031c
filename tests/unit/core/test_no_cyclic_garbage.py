"""A cycle leaves no cyclic garbage, so shells may pause the collector around it
(`trainyard.runtime.gc_paused`) without memory piling up."""

from __future__ import annotations

import gc

from trainyard.core import apply_decision, run_cycle
from trainyard.core.incremental import Scheduler
from trainyard.runtime import gc_paused
from trainyard.sim.workload.cluster import snapshot


def test_a_cycle_creates_no_reference_cycles() -> None:
    snap = snapshot(512, 400, seed=5)
    run_cycle(snap, "default")  # warm module-level caches first
    gc.collect()
    with gc_paused():
        for profile in ("default", "fifo", "drf"):
            decision = run_cycle(snap, profile)
            Scheduler(apply_decision(snap, decision), profile)
        assert not gc.isenabled()
        unreachable = gc.collect()
    assert unreachable == 0
    assert gc.isenabled()


def test_a_blind_gang_reservation_creates_no_reference_cycles() -> None:
    """The drain order of a gang reserved for blind (`backfill._draining`) and the reclaim
    of an inner queue's own job run too (paths the synthetic snapshot above does not reach)."""
    from trainyard.scenario import load_scenario

    one_gpu = [
        {"id": f"j{n}{d}", "gpus": 1, "started_at": 100 + 10 * (2 * n + d),
         "placement": [{"node": f"n{n}", "devices": [d]}]}
        for n in range(4) for d in range(2)
    ]  # fmt: skip
    gang = load_scenario(
        {"now": 100000, "nodes": [{"name": "n{i}", "count": 4, "gpus": 2}],
         "running": one_gpu, "pending": [{"id": "gang", "gpus": 4, "nodes": 2}]}
    ).snapshot  # fmt: skip
    inner = load_scenario(
        {"now": 1000, "nodes": [{"name": "n0", "gpus": 4}],
         "queues": [{"name": "P", "guaranteed": 4}, {"name": "A", "parent": "P", "guaranteed": 2}],
         "running": [{"id": f"a{d}", "queue": "A", "gpus": 1,
                      "placement": [{"node": "n0", "devices": [d]}]} for d in range(4)],
         "pending": [{"id": "own", "queue": "P", "gpus": 2}]}
    ).snapshot  # fmt: skip
    assert run_cycle(gang, "default").reservations  # warm caches, and the path is taken
    assert run_cycle(inner, "default").evictions
    gc.collect()
    with gc_paused():
        run_cycle(gang, "default")
        run_cycle(inner, "default")
        unreachable = gc.collect()
    assert unreachable == 0


def test_gc_paused_restores_a_disabled_collector() -> None:
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
