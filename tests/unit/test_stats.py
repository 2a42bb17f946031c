"""`trainyard.stats.percentile`: the project's one percentile (numpy's inverted_cdf)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from trainyard.stats import METHOD, percentile


def test_percentile_nearest_rank() -> None:
    assert percentile([], 99) is None
    assert percentile([5.0], 99) == 5.0
    # ranks ceil(p/100 * 4) of [1, 2, 3, 4]: p25 -> 1, p50 -> 2, p75 -> 3, p99 -> 4, p100 -> 4
    assert [percentile([4, 3, 2, 1], p) for p in (25, 50, 75, 99, 100)] == [1, 2, 3, 4, 4]
    # p99 of 1..300: rank ceil(297.0) = 297 (no float drift to 298)
    assert percentile(list(range(1, 301)), 99) == 297
    # p99 of 1..101: rank ceil(99.99) = 100
    assert percentile(list(range(1, 102)), 99) == 100
    assert percentile([3.0, 1.0, 2.0], 0) == 1.0
    # p99.9 of 1..1000: rank 999 (99.9 / 100 is not 0.999 in floats; the rounding keeps it)
    assert percentile(list(range(1, 1001)), 99.9) == 999
    with pytest.raises(ValueError):
        percentile([1.0], -1)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_percentile_is_numpys_named_method() -> None:
    rng = random.Random(7)
    for n in (1, 2, 5, 100, 1001):
        values = [rng.random() for _ in range(n)]
        for p in (1, 25, 50, 90, 99):
            assert percentile(values, p) == np.quantile(values, p / 100, method=METHOD)
