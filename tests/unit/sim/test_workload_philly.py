"""The Philly distributions kept in code are the ones counted from the trace."""

from __future__ import annotations

import random
from pathlib import Path

from shared_data import SHARED, require
from trainyard.sim.workload import philly


def _trace() -> Path:
    return require(SHARED / "traces" / "pollux" / "philly.csv", "check the Philly numbers")


def test_numbers_in_code_match_the_trace() -> None:
    path = _trace()
    fitted = philly.fit(path)
    assert fitted["gpu_counts"] == philly.GPU_COUNTS
    assert [tuple(q) for q in fitted["duration_quantiles"]] == list(philly.DURATION_QUANTILES)


def test_samples_follow_the_distribution() -> None:
    rng = random.Random(3)
    sizes = [philly.sample_gpus(rng) for _ in range(20_000)]
    share_single = sizes.count(1) / len(sizes)
    assert abs(share_single - 76627 / 82247) < 0.01
    assert set(sizes) <= set(philly.GPU_COUNTS)
    durations = sorted(philly.sample_duration(rng) for _ in range(20_000))
    median = durations[len(durations) // 2]
    assert 900 < median < 1400  # the trace's median run time is 1,144 s
    assert durations[0] >= 1.0 and durations[-1] <= 4_628_226.0
