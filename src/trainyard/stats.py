"""Percentiles: the project's one definition, used by every report, benchmark and fit.

`percentile` is numpy's `percentile` with ``method="inverted_cdf"`` (Hyndman and Fan's
definition 1, the nearest-rank percentile): the smallest observed value whose empirical
cumulative share is at least p/100. So a p99 is always a value that was observed (never an
interpolation between two), and p50 of an even count is the lower of the two middle values.
Nothing else in `trainyard` computes a percentile or quantile by hand.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np

__all__ = ["METHOD", "percentile"]

METHOD: Final = "inverted_cdf"


def percentile(values: Sequence[float], p: float) -> float | None:
    """The `METHOD` percentile `p` of `values` (0 <= p <= 100; 0 is the smallest value).

    None for no values.
    """
    if not 0 <= p <= 100:
        raise ValueError(f"percentile must be in [0, 100], got {p}")
    if not values:
        return None
    # p/100 rounded, so that 99.9 is the quantile 0.999 and not 0.9990000000000001 (which
    # would move a value on an exact rank, e.g. the 999th of 1,000, to the next one)
    q = round(p / 100, 12)
    return float(np.quantile(np.asarray(values, dtype=float), q, method=METHOD))
