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


def test_gc_paused_restores_a_disabled_collector() -> None:
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
