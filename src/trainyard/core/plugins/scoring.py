"""Placement scorers, registered by name. Each rates a list of candidates at once (one call
per scorer and placement decision, like a Kubernetes Score plugin over its node list) and
returns one value in [0, 1] per candidate; higher wins. The profile sums them with weights.

- `topology`: fewest nodes and the innermost domain (1.0 = one node, and one NVLink island
  when the job fits one); the cycle already restricts candidates to the tightest level.
- `fragmentation`: best fit: leave as little free capacity as possible in the nodes / domain
  the job touches, so that the largest free blocks stay whole for big gangs.
- `binpack`: prefer the fullest enclosing innermost domain (consolidate into busy leaves).
- `spread`: the opposite of `binpack` (prefer the emptiest leaves).

`FUSED` names these four by code: for a job of one device class that fits one node, the
cycle rates its (at most three) candidate nodes with `best_single_node`, which computes the
same values, summed in the same order, as `placement.choose` over these scorers, without
building a candidate or a list per scorer (about a tenth of a cycle). A profile with any
other scorer goes through `choose`.
"""

from __future__ import annotations

from trainyard.core.framework import SCORERS
from trainyard.core.placement import Candidate
from trainyard.core.state import ClusterState
from trainyard.core.types import Job


def _topology(state: ClusterState, job: Job, cand: Candidate) -> float:
    layout = state.layout
    parts = cand.parts
    if len(parts) == 1:
        n, k = parts[0]
        isl = layout.islands[n]
        if len(isl) == 1:
            return 1.0
        free = state.free_mask[n]
        if any((free & m).bit_count() >= k for m in isl):
            return 1.0
        return 0.8
    node_max = max(layout.class_node_max[cand.cls], 1)
    fewest = -(-job.gpus // node_max)
    span = (cand.level + 1) / (len(layout.levels) + 1)  # 0 for the whole cluster
    return 0.6 * fewest / len(parts) + 0.3 * span


def topology(state: ClusterState, job: Job, cands: list[Candidate]) -> list[float]:
    return [_topology(state, job, cand) for cand in cands]


def fragmentation(state: ClusterState, job: Job, cands: list[Candidate]) -> list[float]:
    layout = state.layout
    depth = len(layout.levels)
    free_cnt = state.free_cnt
    out = []
    for cand in cands:
        level = cand.level
        if level >= depth:
            n, k = cand.parts[0]
            out.append(1.0 - (free_cnt[n] - k) / max(layout.class_node_max[cand.cls], 1))
        elif level < 0:
            out.append(0.0)
        else:
            cap = layout.domain_capacity[level][cand.cls][cand.domain]
            left = state.dom_free[level][cand.cls][cand.domain] - job.gpus
            out.append(1.0 - left / max(cap, 1))
    return out


def _leaf_fullness(state: ClusterState, cands: list[Candidate]) -> list[float]:
    layout = state.layout
    inner = len(layout.levels) - 1
    out = []
    for cand in cands:
        n = cand.parts[0][0]
        leaf = layout.leaf_of[n]
        if leaf < 0:
            out.append(1.0 - state.free_cnt[n] / max(layout.class_node_max[cand.cls], 1))
        else:
            cap = layout.domain_capacity[inner][cand.cls][leaf]
            out.append(1.0 - state.dom_free[inner][cand.cls][leaf] / max(cap, 1))
    return out


def binpack(state: ClusterState, job: Job, cands: list[Candidate]) -> list[float]:
    return _leaf_fullness(state, cands)


def spread(state: ClusterState, job: Job, cands: list[Candidate]) -> list[float]:
    return [1.0 - v for v in _leaf_fullness(state, cands)]


FUSED: dict[object, int] = {topology: 0, fragmentation: 1, binpack: 2, spread: 3}


def _node_value(state: ClusterState, code: int, c: int, n: int, g: int) -> float:
    """What scorer `code` of `FUSED` gives a candidate of `g` GPUs on node `n` alone."""
    layout = state.layout
    if code == 0:
        isl = layout.islands[n]
        if len(isl) == 1:
            return 1.0
        free = state.free_mask[n]
        return 1.0 if any((free & m).bit_count() >= g for m in isl) else 0.8
    if code == 1:
        return 1.0 - (state.free_cnt[n] - g) / max(layout.class_node_max[c], 1)
    leaf = layout.leaf_of[n]
    if leaf < 0:
        full = 1.0 - state.free_cnt[n] / max(layout.class_node_max[c], 1)
    else:
        inner = len(layout.levels) - 1
        cap = layout.domain_capacity[inner][c][leaf]
        full = 1.0 - state.dom_free[inner][c][leaf] / max(cap, 1)
    return full if code == 2 else 1.0 - full


def best_single_node(
    state: ClusterState, c: int, nodes: list[int], g: int, scorers: list[tuple[int, float]]
) -> int:
    """The position in `nodes` that `placement.choose` would pick among single-node
    candidates of `g` GPUs of class `c` with these `FUSED` scorers (code, weight)."""
    count = len(nodes)
    if count == 1 or not scorers:
        return 0
    best = 0
    top = _node_score(state, c, nodes[0], g, scorers)
    for i in range(1, count):
        score = _node_score(state, c, nodes[i], g, scorers)
        if score > top + 1e-12:
            best, top = i, score
    return best


def _node_score(
    state: ClusterState, c: int, n: int, g: int, scorers: list[tuple[int, float]]
) -> float:
    """The weighted sum `choose` makes for one candidate (its terms in the same order)."""
    total = 0.0
    for code, weight in scorers:
        total += weight * _node_value(state, code, c, n, g)
    return total


for _name, _fn in (
    ("topology", topology),
    ("fragmentation", fragmentation),
    ("binpack", binpack),
    ("spread", spread),
):
    SCORERS.register(_name, _fn)
