"""Multi-cycle scenarios: run a scenario's `steps:` through the core, cycle after cycle.

Each step first applies its changes to the cluster (`finish`: running jobs that end, and
leave; `submit`: new pending jobs), then runs `repeat` cycles, each `advance` seconds after
the previous one and each on the applied result of the last decision (`core.apply_decision`:
evicted jobs back to pending, placed jobs running). A scenario without steps is one cycle.
This is how multi-cycle behaviour (no ping-pong, a reclaim that settles, a protection that
ends) is shown from `trainyard schedule`; the scenario test harness runs the same mechanics.
A change that names a job that is not running, or submits a duplicate id, raises
`ScenarioError` naming the step.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from trainyard.core import (
    Decision,
    Profile,
    Snapshot,
    SnapshotError,
    UnknownNameError,
    apply_decision,
    run_cycle,
    validate,
)
from trainyard.scenario.load import Scenario, Step
from trainyard.scenario.schema import ScenarioError

__all__ = ["Round", "apply_step", "run_steps"]


@dataclass(frozen=True, slots=True)
class Round:
    """One cycle of a multi-cycle run: which step and which repetition, what it saw, what
    it decided."""

    step: int
    cycle: int
    snapshot: Snapshot
    decision: Decision


def apply_step(snapshot: Snapshot, step: Step, where: str) -> Snapshot:
    """The snapshot after `step`'s finished and submitted jobs (no cycle run)."""
    running = {r.job.id for r in snapshot.running}
    for k, job_id in enumerate(step.finish):
        if job_id not in running:
            known = ", ".join(sorted(running)[:8]) or "none"
            raise ScenarioError(
                f"{where}.finish[{k}]", f"{job_id!r} is not running (running: {known})"
            )
    gone = set(step.finish)
    out = replace(
        snapshot,
        running=tuple(r for r in snapshot.running if r.job.id not in gone),
        pending=snapshot.pending + step.submit,
    )
    if step.submit:
        try:
            validate(out)
        except SnapshotError as exc:
            raise ScenarioError(f"{where}.submit", exc.message) from None
    return out


def run_steps(scenario: Scenario, profile: str | Profile | None = None) -> list[Round]:
    """Every cycle of the scenario's steps (one cycle when it has none), with `profile`,
    else the scenario's own, else `default`."""
    chosen = profile if profile is not None else scenario.profile or "default"
    steps = scenario.steps or (Step(),)
    snap = scenario.snapshot
    out: list[Round] = []
    try:
        for k, step in enumerate(steps):
            snap = apply_step(snap, step, f"steps[{k}]")
            for r in range(step.repeat):
                snap = replace(snap, now=snap.now + step.advance)
                decision = run_cycle(snap, chosen)
                out.append(Round(k, r, snap, decision))
                snap = apply_decision(snap, decision)
    except UnknownNameError as exc:
        raise ScenarioError("profile", exc.message) from None
    return out
