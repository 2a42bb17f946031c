"""Job arrival process fitted to the Microsoft Philly trace: a 24-hour diurnal rate profile and
the inter-arrival gap distribution, kept as numbers in code.

Source: the 82,247 submission timestamps of `pollux/philly.csv` (the Philly trace as shipped
with the Pollux OSDI'21 artifact; Jeon et al., ATC'19, CC-BY-4.0), counted once with
`python -m trainyard.sim.workload.arrivals PATH` (see `fit`) and stored here, so nothing at run
time depends on the trace file.

Model (a time-warped renewal process):

* `HOURLY_SHARE[h]` is the share of all jobs submitted in hour ``h`` (0-23) of the trace's own
  clock. It defines a rate multiplier ``24 * HOURLY_SHARE[h]`` (mean 1 over a day) and an
  *operational clock* ``tau(t)``, the integral of that multiplier from midnight; busy hours run
  the operational clock fast, quiet hours slow.
* `GAP_QUANTILES` are quantiles (q, seconds) of the gaps between consecutive submissions
  measured on the operational clock, so they carry the burstiness of the trace without its
  diurnal swing (which the warp puts back).

`sample_arrivals` draws gaps from those quantiles (linear between them), adds them up on the
operational clock from midnight, and maps the sums back to real seconds. Sampled hourly shares
match `HOURLY_SHARE` within ~0.01 and the median gap matches; the mean real gap comes out
~128 s against the trace's 114 s (linear interpolation over the sparse top 0.01% of gaps).
"""

from __future__ import annotations

import bisect
import csv
import datetime as dt
import itertools
import json
import random
import sys
from pathlib import Path

from trainyard.stats import percentile

__all__ = [
    "GAP_QUANTILES",
    "HOURLY_SHARE",
    "MEAN_GAP_S",
    "fit",
    "operational_time",
    "real_time",
    "sample_arrivals",
    "sample_gap",
]

# Share of Philly jobs submitted in each hour of the day (trace clock), hours 0..23.
HOURLY_SHARE: tuple[float, ...] = (
    0.0531,
    0.04102,
    0.04663,
    0.04596,
    0.02918,
    0.04803,
    0.06969,
    0.08704,
    0.04623,
    0.04191,
    0.04268,
    0.03622,
    0.03121,
    0.02936,
    0.02657,
    0.02704,
    0.03673,
    0.02783,
    0.03336,
    0.03035,
    0.04235,
    0.0382,
    0.04724,
    0.04208,
)

# Inter-arrival gap quantiles (q, operational seconds) between consecutive submissions.
GAP_QUANTILES: tuple[tuple[float, float], ...] = (
    (0.0, 0.0),
    (0.05, 0.0),
    (0.1, 0.869),
    (0.15, 1.153),
    (0.2, 2.033),
    (0.25, 2.596),
    (0.3, 3.357),
    (0.35, 4.346),
    (0.4, 5.501),
    (0.45, 6.741),
    (0.5, 8.815),
    (0.55, 11.268),
    (0.6, 14.623),
    (0.65, 19.971),
    (0.7, 28.434),
    (0.75, 48.046),
    (0.8, 100.354),
    (0.85, 196.669),
    (0.9, 355.46),
    (0.95, 521.568),
    (0.99, 765.914),
    (0.995, 1032.26),
    (0.999, 2366.69),
    (0.9995, 10510.866),
    (0.9999, 50461.358),
    (1.0, 245749.322),
)

# Mean real gap (s): the trace's span divided by its number of gaps.
MEAN_GAP_S: float = 114.397

_Q_GRID: tuple[float, ...] = (
    *(round(0.05 * i, 2) for i in range(20)),
    0.99,
    0.995,
    0.999,
    0.9995,
    0.9999,
    1.0,
)
_DAY = 86_400.0
_HOUR = 3_600.0


def _cumulative(shares: tuple[float, ...]) -> list[float]:
    """Operational seconds elapsed at the start of each hour (25 entries, last = one day)."""
    out = [0.0]
    for share in shares:
        out.append(out[-1] + 24.0 * share * _HOUR)
    return out


def operational_time(t: float, shares: tuple[float, ...] | None = None) -> float:
    """The operational clock at ``t`` real seconds after a midnight."""
    shares = HOURLY_SHARE if shares is None else shares
    cum = _cumulative(shares)
    days, rest = divmod(t, _DAY)
    hour = min(int(rest // _HOUR), 23)
    return days * cum[24] + cum[hour] + 24.0 * shares[hour] * (rest - hour * _HOUR)


def real_time(tau: float, shares: tuple[float, ...] | None = None) -> float:
    """The inverse of `operational_time` (hours with a zero share are skipped over)."""
    shares = HOURLY_SHARE if shares is None else shares
    cum = _cumulative(shares)
    days, rest = divmod(tau, cum[24])
    hour = min(bisect.bisect_right(cum, rest) - 1, 23)
    while hour < 23 and shares[hour] == 0.0:
        hour += 1
    rate = 24.0 * shares[hour]
    offset = (rest - cum[hour]) / rate if rate > 0 else 0.0
    return days * _DAY + hour * _HOUR + min(offset, _HOUR)


def sample_gap(rng: random.Random) -> float:
    """One operational-clock gap (s) from `GAP_QUANTILES`, linear between quantiles."""
    u = rng.random()
    for (q0, g0), (q1, g1) in itertools.pairwise(GAP_QUANTILES):
        if u <= q1:
            t = (u - q0) / (q1 - q0) if q1 > q0 else 0.0
            return g0 + (g1 - g0) * t
    return GAP_QUANTILES[-1][1]


def sample_arrivals(rng: random.Random, n: int, load: float = 1.0) -> list[float]:
    """`n` submission times (s), the first at 0 = midnight of the trace clock, ascending.
    `load` > 0 compresses the operational clock (2.0 = jobs arrive twice as fast)."""
    times: list[float] = []
    tau = 0.0
    for i in range(n):
        if i:
            tau += sample_gap(rng) / load
        times.append(real_time(tau))
    return times


def _seconds(stamp: str) -> float:
    """``YYYY-MM-DD HH:MM:SS`` -> seconds since 0001-01-01 (naive, trace clock)."""
    moment = dt.datetime.fromisoformat(stamp)
    return moment.toordinal() * _DAY + moment.hour * _HOUR + moment.minute * 60 + moment.second


def _quantile(values: list[float], q: float) -> float:
    found = percentile(values, 100 * q)
    assert found is not None
    return found


def fit(path: Path) -> dict[str, object]:
    """Recount the numbers above from a Philly CSV (column ``timestamp``)."""
    with path.open(newline="") as fh:
        stamps = sorted(_seconds(row["timestamp"]) for row in csv.DictReader(fh))
    hours = [0] * 24
    for s in stamps:
        hours[int(s % _DAY // _HOUR)] += 1
    shares = tuple(round(h / len(stamps), 5) for h in hours)
    midnight = stamps[0] - stamps[0] % _DAY
    taus = [operational_time(s - midnight, shares) for s in stamps]
    gaps = sorted(b - a for a, b in itertools.pairwise(taus))
    n = len(gaps)
    quantiles = [(q, round(_quantile(gaps, q), 3)) for q in _Q_GRID]
    mean_gap = round((stamps[-1] - stamps[0]) / n, 3)
    return {"hourly_share": list(shares), "gap_quantiles": quantiles, "mean_gap_s": mean_gap}


if __name__ == "__main__":
    print(json.dumps(fit(Path(sys.argv[1])), indent=2))
