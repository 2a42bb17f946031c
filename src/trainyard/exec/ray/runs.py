"""What the Ray executor knows of one attempt (`RayRun`) and how it judges it (`judge`).

`RayRun` holds the attempt's actors, the refs in flight (each rank's `wait`, its next
`read`) and the outcomes that arrived: exit codes, and ranks *lost* (their actor died; why).
`judge` turns that, with the run's stop record, into a `Verdict` (state, reason, first
failed rank, infra):

- stopped on request before every rank ended: "stopped";
- every rank exited 0: "succeeded";
- a rank failed: "failed". When some rank was lost (not killed by the executor itself), the
  earliest lost rank is the cause and the failure is the infrastructure's (`infra`), whichever
  exit arrived first: its peers fail at once on a dead collective;
- a rank whose command could not start (its supervisor's start error, kept in the run's
  exit record as the local wrapper keeps it): "failed", `final` (the spec's fault: the job
  is not retried);
- a launch cut short: "failed", `infra`;
- otherwise "running".

A failed run is reported "running" ("stopping: ...") until every rank is accounted for:
whose fault it was needs them all (`RayExecutor.poll` escalates meanwhile).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from trainyard.exec.run import Host, RunHandle, RunState, describe_code


def busy_devices(
    runs: Iterable[tuple[tuple[str, int], RayRun]], hosts: Iterable[Host]
) -> dict[int, tuple[str, int]]:
    """Devices of a launch on `hosts` (on their nodes) that a live run holds, by device
    index, with the holder (job id, attempt)."""
    wanted = {(h.node, d) for h in hosts for d in h.devices}
    busy: dict[int, tuple[str, int]] = {}
    for key, run in runs:
        if not run.settled:
            for r in run.handle.ranks:
                busy.update({d: key for d in r.devices if (r.node, d) in wanted})
    return busy


def exit_of(result: object) -> tuple[int, float | None]:
    """A rank's exit code and when it exited, from what its actor's `wait` returned: a dict
    ("code", "at": the node's clock, kept within the server's present), or the bare code
    of an actor started by a server of before (no time: when the server learns of it)."""
    if isinstance(result, dict):
        at = result.get("at")
        when = min(float(at), time.time()) if isinstance(at, int | float) and at > 0 else None
        return int(result["code"]), when
    return int(result), None  # type: ignore[call-overload]


@dataclass
class RayRun:
    handle: RunHandle
    actors: dict[int, Any] = field(default_factory=dict)
    waits: dict[int, Any] = field(default_factory=dict)  # rank -> ref of `wait`
    reads: dict[int, Any] = field(default_factory=dict)  # rank -> ref of `read`
    acked: dict[int, int] = field(default_factory=dict)  # rank -> stream offset in its log
    codes: dict[int, int | None] = field(default_factory=dict)  # ended ranks
    lost: dict[int, str] = field(default_factory=dict)  # ranks whose actor died -> why
    ended_at: dict[int, float] = field(default_factory=dict)
    drained: set[int] = field(default_factory=set)  # ended ranks whose output is all relayed
    killed: set[int] = field(default_factory=set)  # lost because we killed the actor
    released: bool = False
    swept: bool = False  # the job's uid swept on the ranks' nodes (`RankSupervisor.sweep`)

    @property
    def settled(self) -> bool:
        """Every rank has an exit code or is lost: nothing of the run is left."""
        return all(r.rank in self.codes or r.rank in self.lost for r in self.handle.ranks)

    def last_end(self) -> float | None:
        """When the last rank ended, once the run is settled (the platform bills to then)."""
        return max(self.ended_at.values()) if self.settled and self.ended_at else None

    def exit_codes(self) -> dict[int, int | None]:
        codes: dict[int, int | None] = {r.rank: None for r in self.handle.ranks}
        codes.update(self.codes)
        return codes


@dataclass(frozen=True)
class Verdict:
    state: RunState
    reason: str
    first: int | None  # the first failed rank (the cause)
    infra: bool
    failing: bool  # it failed and ranks are left: stop them (reported "running" meanwhile)
    final: bool = False  # its command could not start: the spec's fault, not retried


def judge(run: RayRun, stop: tuple[float, str] | None) -> Verdict:
    """How a run stands (see the module docstring)."""
    h = run.handle
    codes = run.exit_codes()
    failures = sorted(
        (run.ended_at.get(rank, 0.0), rank)
        for rank in codes
        if rank in run.lost or (rank in run.codes and run.codes[rank] != 0)
    )
    first = failures[0][1] if failures else None
    last_end = run.last_end()
    state: RunState = "running"
    reason, infra = "", False
    if stop is not None and (last_end is None or stop[0] <= last_end):
        state, reason = "stopped", f"stopped on request ({stop[1]})"
    elif run.settled and not failures:
        state, reason = "succeeded", f"all {len(codes)} ranks exited with code 0"
    elif first is not None:
        state = "failed"
        died = sorted((run.ended_at[r], r) for r in run.lost if r not in run.killed)
        if died:
            first = died[0][1]
            infra, reason = True, f"rank {first} lost: {run.lost[first]}"
        else:
            unstartable = h.start_error(first)
            how = f"could not start {unstartable}" if unstartable else ""
            reason = f"rank {first} {how or describe_code(run.codes[first])}"
    if not h.complete:
        state, infra = "failed", True
        reason = f"launch interrupted: {len(h.ranks)} of {h.workers} ranks were started"
    if state == "failed" and not run.settled:
        return Verdict("running", f"stopping: {reason}", first, False, True)
    final = state == "failed" and not infra and first is not None and bool(h.start_error(first))
    return Verdict(state, reason, first, infra, False, final)


def attempt_of(name: str, prefix: str) -> int | None:
    """The attempt in an actor name `<job>.<attempt>.<rank>` (`prefix` is `<job>.`)."""
    parts = name[len(prefix) :].split(".")
    return int(parts[0]) if len(parts) == 2 and parts[0].isdigit() else None


def lost_reason(h: RunHandle, rank: int, error: Exception) -> str:
    node = next((r.node for r in h.ranks if r.rank == rank), "?")
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return f"its supervisor on node {node} died ({type(error).__name__}: {text[:160]})"
