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
    if len(cand.parts) == 1:
        n, k = cand.parts[0]
        free = state.free_mask[n]
        if any((free & isl).bit_count() >= k for isl in layout.islands[n]):
            return 1.0
        return 0.8
    node_max = max(layout.class_node_max[cand.cls], 1)
    fewest = -(-job.gpus // node_max)
    span = (cand.level + 1) / (layout.depth + 1)  # 0 for the whole cluster
    return 0.6 * fewest / len(cand.parts) + 0.3 * span


def fragmentation(state: ClusterState, job: Job, cand: Candidate) -> float:
    layout = state.layout
    if cand.level >= layout.depth:
        n, k = cand.parts[0]
        return 1.0 - (state.free_cnt[n] - k) / max(layout.class_node_max[cand.cls], 1)
    if cand.level < 0:
        return 0.0
    cap = layout.domain_capacity[cand.level][cand.cls][cand.domain]
    left = state.dom_free[cand.level][cand.cls][cand.domain] - job.gpus
    return 1.0 - left / max(cap, 1)


def _leaf_fullness(state: ClusterState, cand: Candidate) -> float:
    layout = state.layout
    n = cand.parts[0][0]
    if layout.depth == 0:
        return 1.0 - state.free_cnt[n] / max(layout.class_node_max[cand.cls], 1)
    leaf = layout.domain_of[layout.depth - 1][n]
    cap = layout.domain_capacity[layout.depth - 1][cand.cls][leaf]
    return 1.0 - state.dom_free[layout.depth - 1][cand.cls][leaf] / max(cap, 1)


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
