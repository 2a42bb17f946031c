"""Placement scorers, registered by name; each rates a candidate in [0, 1] (higher wins).

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


def topology(state: ClusterState, job: Job, cand: Candidate) -> float:
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


def fragmentation(state: ClusterState, job: Job, cand: Candidate) -> float:
    layout = state.layout
    level = cand.level
    if level >= len(layout.levels):
        n, k = cand.parts[0]
        return 1.0 - (state.free_cnt[n] - k) / max(layout.class_node_max[cand.cls], 1)
    if level < 0:
        return 0.0
    cap = layout.domain_capacity[level][cand.cls][cand.domain]
    left = state.dom_free[level][cand.cls][cand.domain] - job.gpus
    return 1.0 - left / max(cap, 1)


def _leaf_fullness(state: ClusterState, cand: Candidate) -> float:
    layout = state.layout
    n = cand.parts[0][0]
    leaf = layout.leaf_of[n]
    if leaf < 0:
        return 1.0 - state.free_cnt[n] / max(layout.class_node_max[cand.cls], 1)
    inner = len(layout.levels) - 1
    cap = layout.domain_capacity[inner][cand.cls][leaf]
    return 1.0 - state.dom_free[inner][cand.cls][leaf] / max(cap, 1)


def binpack(state: ClusterState, job: Job, cand: Candidate) -> float:
    return _leaf_fullness(state, cand)


def spread(state: ClusterState, job: Job, cand: Candidate) -> float:
    return 1.0 - _leaf_fullness(state, cand)


for _name, _fn in (
    ("topology", topology),
    ("fragmentation", fragmentation),
    ("binpack", binpack),
    ("spread", spread),
):
    SCORERS.register(_name, _fn)
