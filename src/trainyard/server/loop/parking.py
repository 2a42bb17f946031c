"""Parking: a pending job the core cannot take never stops a scheduling round.

The core refuses a whole snapshot for one bad job (`SnapshotError`): a topology level this
cluster lacks (a spec accepted before the nodes changed, or before admission checked it), a
size range or value that is no longer valid. The loop must schedule everybody else, so
`decide` runs the cycle on the snapshot without such jobs: first those the core's own per-job
rules reject (`core.snapshot.pending_problem`), then, should the core still refuse a pending
job (`pending[i]...` in the error), that one too, and again. Each parked job keeps its row,
PENDING, with the reason `invalid: <field>: <what to change>` (written with the other
pending reasons), so its owner sees why and can cancel or fix it. An error that is not about
one pending job (the nodes, the queues) still fails the round: that is the operator's to fix.
"""

from __future__ import annotations

import re
from dataclasses import replace

from trainyard import core
from trainyard.core import Decision, Snapshot, SnapshotError
from trainyard.core.snapshot import level_names, pending_problem

_PENDING = re.compile(r"^pending\[(\d+)\]\.?(.*)$")
MAX_RETRIES = 100  # jobs parked by retrying in one round; the rest wait for the next round


def decide(snapshot: Snapshot, profile: str | core.Profile) -> tuple[Decision, dict[str, str]]:
    """The cycle's decision on `snapshot` without the jobs it cannot take, and those jobs'
    reasons by id."""
    queues = {q.name for q in snapshot.effective_queues()}
    levels = level_names(snapshot.topology)
    parked: dict[str, str] = {}
    keep = []
    for job in snapshot.pending:
        problem = pending_problem(job, queues, levels)
        if problem is None:
            keep.append(job)
        else:
            parked[job.id] = f"invalid: {problem[0]}: {problem[1]}"
    if parked:
        snapshot = replace(snapshot, pending=tuple(keep))
    for _ in range(MAX_RETRIES):
        try:
            return core.run_cycle(snapshot, profile), parked
        except SnapshotError as error:
            match = _PENDING.match(error.field)
            if match is None or int(match.group(1)) >= len(snapshot.pending):
                raise
            i = int(match.group(1))
            job = snapshot.pending[i]
            parked[job.id] = f"invalid: {match.group(2) or 'job'}: {error.message}"
            snapshot = replace(snapshot, pending=snapshot.pending[:i] + snapshot.pending[i + 1 :])
    return core.run_cycle(snapshot, profile), parked
