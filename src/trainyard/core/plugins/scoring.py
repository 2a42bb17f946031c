"""Placement scorers, registered by name. Each rates a list of candidates at once (one call
per scorer and placement decision, like a Kubernetes Score plugin over its node list) and
returns one value in [0, 1] per candidate; higher wins. The profile sums them with weights.

- `topology`: fewest nodes and the innermost domain (1.0 = one node, and one NVLink island
  when the job fits one); the cycle already restricts candidates to the tightest level.
- `fragmentation`: best fit: leave as little free capacity as possible in the nodes / domain
  the job touches, so that the largest free blocks stay whole for big gangs.
- `binpack`: prefer the fullest enclosing innermost domain (consolidate into busy leaves).
- `spread`: the opposite of `binpack` (prefer the emptiest leaves).
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


for _name, _fn in (
    ("topology", topology),
    ("fragmentation", fragmentation),
    ("binpack", binpack),
    ("spread", spread),
):
    SCORERS.register(_name, _fn)
