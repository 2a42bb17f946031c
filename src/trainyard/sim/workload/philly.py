"""Job-size and duration distributions fitted to the Microsoft Philly trace.

Source: the 82,247 jobs of `pollux/philly.csv` (the Philly trace as shipped with the Pollux
OSDI'21 artifact; Jeon et al., ATC'19, CC-BY-4.0), counted once with
`python -m trainyard.sim.workload.philly PATH` (see `fit` below) and stored here as numbers, so
nothing at run time depends on the trace file.
"""

from __future__ import annotations

import bisect
import csv
import itertools
import json
import random
import sys
from collections import Counter
from pathlib import Path

from trainyard.stats import percentile

# GPUs per job -> number of Philly jobs of that size (82,247 in all).
GPU_COUNTS: dict[int, int] = {
    1: 76627,
    2: 1818,
    4: 1870,
    8: 1643,
    12: 7,
    16: 199,
    24: 7,
    32: 67,
    64: 6,
    128: 3,
}

# Run time quantiles (q, seconds), all sizes together (`trainyard.stats.percentile`).
DURATION_QUANTILES: tuple[tuple[float, float], ...] = (
    (0.0, 1.0),
    (0.05, 48.0),
    (0.1, 61.0),
    (0.2, 75.0),
    (0.3, 209.0),
    (0.4, 599.0),
    (0.5, 1144.0),
    (0.6, 1821.0),
    (0.7, 2549.0),
    (0.8, 4244.0),
    (0.9, 11266.0),
    (0.95, 43648.0),
    (0.99, 254884.0),
    (1.0, 4628226.0),
)

_SIZES = sorted(GPU_COUNTS)
_CUM: list[float] = []
_acc = 0
for _s in _SIZES:
    _acc += GPU_COUNTS[_s]
    _CUM.append(_acc / sum(GPU_COUNTS.values()))


def sample_gpus(rng: random.Random) -> int:
    """A job size drawn from the Philly distribution."""
    return _SIZES[min(bisect.bisect_left(_CUM, rng.random()), len(_SIZES) - 1)]


def sample_duration(rng: random.Random) -> float:
    """A run time (s) drawn from the Philly quantiles, log-linear between them."""
    u = rng.random()
    qs = DURATION_QUANTILES
    for (q0, d0), (q1, d1) in itertools.pairwise(qs):
        if u <= q1:
            t = (u - q0) / (q1 - q0) if q1 > q0 else 0.0
            return float(d0 * (d1 / d0) ** t)
    return qs[-1][1]


def _quantile(values: list[float], q: float) -> float:
    found = percentile(values, 100 * q)
    assert found is not None
    return found


def fit(path: Path) -> dict[str, object]:
    """Recount the numbers above from a Philly CSV (columns num_gpus, duration)."""
    sizes: Counter[int] = Counter()
    durations: list[float] = []
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            sizes[int(row["num_gpus"])] += 1
            durations.append(float(row["duration"]))
    durations.sort()
    quantiles = [(q, _quantile(durations, q)) for q, _d in DURATION_QUANTILES]
    return {"gpu_counts": dict(sorted(sizes.items())), "duration_quantiles": quantiles}


if __name__ == "__main__":
    print(json.dumps(fit(Path(sys.argv[1])), indent=2))
