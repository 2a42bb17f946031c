"""Accounting arithmetic shared by the server and the simulator (pure: no I/O, no clock).

- `overlap(start, end, since, until)`: the seconds of a run interval inside a window, which
  is how per-second usage is billed (`services/usage.py`).
- `billed_cpus(reserved, spec, gpus)`: the CPUs a run interval is billed for: those the job
  reserved, else one per rank (a rank is at least one process busy on a CPU; Slurm likewise
  allocates at least one CPU per task), so CPU-only work submitted without `cpus` is not
  invisible in the usage figures. Memory is billed as reserved only (no reservation, no
  GB-seconds: what a process uses is not known per second).
- `decayed(intervals, now, half_life_s)`: GPU-seconds with exponential decay, each second of
  use weighing 2^-(age / half_life): the fair-share history (Slurm's PriorityDecayHalfLife).
  An interval [a, b] on g GPUs contributes g * h / ln 2 * (2^-((now-b)/h) - 2^-((now-a)/h)).
- `with_ancestors(values, parent)`: per queue, its own value plus its descendants' (a
  parent's usage includes its children's).
- `usage_share(decayed_gpu_s, total_gpus, half_life_s)`: that history as a share of what
  the whole cluster, busy forever, would have accumulated (total * h / ln 2): the 0..1
  `core.Queue.usage` that DRF adds to a queue's dominant share (`Profile.usage_weight`).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping
from typing import TypeVar

K = TypeVar("K", bound=Hashable)

DEFAULT_HALF_LIFE_S = 7 * 86_400.0  # Slurm's default PriorityDecayHalfLife


def overlap(start: float, end: float, since: float, until: float) -> float:
    return max(0.0, min(end, until) - max(start, since))


def billed_cpus(reserved: float | None, spec: Mapping[str, object] | None, gpus: int) -> float:
    """CPUs a run is billed for: `reserved` when > 0, else its ranks: the stored spec's
    workers x nodes, or for a job running at `gpus` GPUs where its spec asks for others (an
    elastic job resized) its GPUs over the spec's GPUs per rank."""
    if reserved:
        return float(reserved)
    doc = spec or {}
    ranks = max(1, _count(doc.get("workers"))) * max(1, _count(doc.get("nodes")))
    asked = _count(doc.get("gpus"))
    if asked and gpus and asked % ranks == 0:
        return float(max(1, gpus // (asked // ranks)))
    return float(ranks)


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def decayed(
    intervals: Iterable[tuple[float, float, float]], now: float, half_life_s: float
) -> float:
    """Decayed GPU-seconds of (start, end, gpus) intervals at `now` (parts after `now` are
    not counted)."""
    if half_life_s <= 0:
        raise ValueError(f"half_life_s: must be > 0, got {half_life_s}")
    rate = math.log(2.0) / half_life_s
    total = 0.0
    for start, end, gpus in intervals:
        end = min(end, now)
        if end <= start or gpus <= 0:
            continue
        total += gpus * (math.exp(-rate * (now - end)) - math.exp(-rate * (now - start))) / rate
    return total


def usage_share(decayed_gpu_s: float, total_gpus: int, half_life_s: float) -> float:
    """`decayed_gpu_s` as a share (0..1) of the cluster's whole decayed capacity."""
    if total_gpus <= 0:
        return 0.0
    return min(1.0, max(0.0, decayed_gpu_s * math.log(2.0) / (total_gpus * half_life_s)))


def with_ancestors(values: Mapping[K, float], parent: Mapping[K, K | None]) -> dict[K, float]:
    """Each key of `parent` with its own value plus every descendant's (keys missing from
    `parent` count for nobody; a cycle is walked once)."""
    total: dict[K, float] = dict.fromkeys(parent, 0.0)
    for key, value in values.items():
        node: K | None = key
        seen: set[K] = set()
        while node is not None and node not in seen and node in total:
            seen.add(node)
            total[node] += value
            node = parent[node]
    return total
