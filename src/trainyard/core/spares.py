"""Hot spares: idle nodes kept for jobs recovering from a failure.

A node marked `spare` in the snapshot is not usable by the cycle (`build_layout` gives it no
usable device), so no job is placed there and no eviction frees anything there. When jobs
recovering from a failure (`Job.recovering`: a lost node, a killed rank, a hung run) are
pending, `recovering_first` runs one cycle before the profile's own: only the spares usable,
only the recovering jobs pending, the `allocate` action alone (greedy: each job that fits a
spare takes it, in the profile's job order, where the recovering are first anyway). The
profile's cycle then runs on the snapshot with those placements applied, spares still
closed, so a recovering job that found no spare competes, first in line, for the rest of the
cluster. The decision is both: the spare placements first.

Spares trade utilisation for time to recover: a job that loses a node restarts at once on
a warm, idle node instead of waiting for one to free up (the shell chooses which nodes are
spares, e.g. `trainyard up --spares N`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from trainyard.core.apply import apply_decision
from trainyard.core.framework import Profile
from trainyard.core.snapshot import Snapshot
from trainyard.core.topology import Layout
from trainyard.core.types import Decision

Decide = Callable[[Snapshot, Profile, Layout | None], Decision]


def recovering_first(
    snapshot: Snapshot, profile: Profile, layout: Layout | None, decide: Decide
) -> Decision:
    """`decide(snapshot, profile, layout)`, with the spare pass first when it can matter."""
    waiting = tuple(j for j in snapshot.pending if j.recovering and j.gpus)
    if not waiting or not any(n.spare for n in snapshot.nodes):
        return decide(snapshot, profile, layout)
    only_spares = tuple(
        replace(n, spare=False) if n.spare else replace(n, schedulable=False)
        for n in snapshot.nodes
    )
    first = decide(
        replace(snapshot, nodes=only_spares, pending=waiting),
        profile.with_overrides(actions=("allocate",)),
        None,
    )
    if not first.placements:
        return decide(snapshot, profile, layout)
    rest = decide(apply_decision(snapshot, first), profile, layout)
    return replace(rest, placements=first.placements + rest.placements)
