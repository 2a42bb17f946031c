"""Hot spares: idle nodes kept for jobs recovering from a failure.

A node marked `spare` in the snapshot is not usable by the cycle (`build_layout` gives it no
usable device), so no job is placed there and no eviction frees anything there. When jobs
recovering from a failure (`Job.recovering`: a lost node, a killed rank, a hung run) are
pending, `recovering_first` places them before the profile's own cycle, with the `allocate`
action alone (greedy, in the profile's job order, where the recovering are first anyway):

1. on the spares only, so that a job that fits the spares takes them and leaves the rest
   of the cluster's free capacity to the queue;
2. those left, on the spares and every other node together (a 2-node job that lost one
   node restarts on the node it kept and a spare).

The profile's cycle then runs on the snapshot with those placements applied, spares closed,
so a recovering job that found no room competes, first in line, for the rest of the cluster
(by reclaim or preemption as any job). A job the passes placed is not resized by that cycle,
but it may be preempted there by the profile's own rules, as the cycle after would preempt
it (a placement of the second pass holds ordinary GPUs too). When that happens the passes
are run again without that job, which is then the profile's to place, first in line as
before; so the decision never starts a job it stops, and the next cycle does not undo it
(found by the stability property: a waiting job of higher priority, or less served under
`tiresias`, preempted such a job the cycle after it started). When that cycle evicted jobs,
or a job was left to it, and recovering jobs still wait (the evictions may have lowered
their queue's use below its quota, or freed a spare a job ran on), the
spare passes run once more on what it left, nodes holding a reservation aside; a placement
on a victim's node then waits for the victims there to stop (`after_evictions`), and a
job placed so keeps no reservation the cycle made for it. The decision is all of them: the
first spare passes first, the last ones last.

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
from trainyard.core.types import Decision, Job, Node, Placement

Decide = Callable[[Snapshot, Profile, Layout | None], Decision]


def _open(node: Node, others: bool, closed: frozenset[str]) -> Node:
    if node.name in closed:
        return replace(node, spare=False, schedulable=False)
    if node.spare:
        return replace(node, spare=False)
    return node if others else replace(node, schedulable=False)


def _waiting_for(placement: Placement, leaving: dict[str, list[str]]) -> Placement:
    """`placement`, starting only once the victims on its nodes have stopped."""
    victims = sorted({v for nd in placement.nodes for v in leaving.get(nd.node, ())})
    return placement._replace(after_evictions=tuple(victims)) if victims else placement


def _settled(snapshot: Snapshot, found: Decision) -> Snapshot:
    """`snapshot` with the jobs `found` placed held at their size: the cycle after the
    passes does not resize a job that this decision starts (it may preempt it: `_take_back`)."""
    ids = {p.job_id for p in found.placements}
    running = tuple(
        replace(r, job=replace(r.job, min_gpus=None, max_gpus=None)) if r.job.id in ids else r
        for r in snapshot.running
    )
    return replace(snapshot, running=running)


def _passes(
    snapshot: Snapshot,
    waiting: tuple[Job, ...],
    profile: Profile,
    decide: Decide,
    closed: frozenset[str] = frozenset(),
) -> tuple[Snapshot, tuple[Placement, ...]]:
    """The two spare passes for `waiting`: the snapshot after them and their placements
    (nodes in `closed` take nothing)."""
    greedy = profile.with_overrides(actions=("allocate",))
    placed: tuple[Placement, ...] = ()
    for others in (False, True):
        done = {p.job_id for p in placed}
        left = tuple(j for j in waiting if j.id not in done)
        if not left:
            break
        nodes = tuple(_open(n, others, closed) for n in snapshot.nodes)
        found = decide(replace(snapshot, nodes=nodes, pending=left), greedy, None)
        if found.placements:
            snapshot = _settled(apply_decision(snapshot, found), found)
            placed += found.placements
    return snapshot, placed


def recovering_first(
    snapshot: Snapshot, profile: Profile, layout: Layout | None, decide: Decide
) -> Decision:
    """`decide(snapshot, profile, layout)`, with the spare passes first when they can matter."""
    waiting = tuple(j for j in snapshot.pending if j.recovering and j.gpus)
    if not waiting or not any(n.spare for n in snapshot.nodes):
        return decide(snapshot, profile, layout)
    passed = waiting
    while True:  # at most len(waiting) + 1 rounds: each one leaves a job to the profile
        after, placed = _passes(snapshot, passed, profile, decide)
        rest = decide(after, profile, layout)
        evicted = {e.job_id for e in rest.evictions}
        undone = evicted & {p.job_id for p in placed}  # placed by the passes, then preempted
        if not undone:
            break
        passed = tuple(j for j in passed if j.id not in undone)
    done = {p.job_id for p in placed} | evicted
    left = tuple(j for j in waiting if j.id in rest.pending and j.id not in done)
    if left and (rest.evictions or len(passed) < len(waiting)):  # the evictions may have
        # lowered a recovering job's queue below its quota, and a job left to the profile
        # may need a spare with the GPUs the profile left free: offer the spares again;
        # what lands on a victim's node waits for the victim
        leaving: dict[str, list[str]] = {}
        for r in after.running:
            if r.job.id in evicted:
                for nd in r.placement:
                    leaving.setdefault(nd.node, []).append(r.job.id)
        reserved = frozenset(nd.node for r in rest.reservations for nd in r.nodes)
        _after, more = _passes(apply_decision(after, rest), left, profile, decide, reserved)
        if more:
            more = tuple(_waiting_for(p, leaving) for p in more)
            taken = {p.job_id for p in more}
            pending = {k: v for k, v in rest.pending.items() if k not in taken}
            held = tuple(r for r in rest.reservations if r.job_id not in taken)  # placed now
            rest = replace(
                rest, placements=rest.placements + more, pending=pending, reservations=held
            )
    return replace(rest, placements=placed + rest.placements) if placed else rest
