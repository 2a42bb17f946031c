"""Tentative changes to the cluster state, with checkpoint / rollback.

Every action changes the state only through a `Statement`: `allocate` and `evict` apply at
once (so the next placement sees them) and append to an undo log; `checkpoint()` marks a point,
`rollback(cp)` undoes everything after it, in reverse. A gang is placed whole or not at all,
and a preemption plan (evictions + the preemptor's placement) is kept only if the preemptor
fits: otherwise the whole plan is rolled back. A resize (`resize`, then the job's new
`allocate`) is whole the same way; a job resized earlier in the cycle may be resized again
(the same calls): still one restart, from what it held before the cycle, its reasons joined.
Undo logs instead of copies keep this O(change).

An evicted job keeps its devices, CPU and memory until it has stopped, so `allocate` itself
works out which evictions of this statement a placement must wait for, whichever action made
it: every evicted job that holds one of its devices, and every evicted job on a node where it
needs CPU or memory beyond what the jobs that are not stopping leave free. Callers may name
more (a preemptor waits for its whole plan); none can name fewer. `core.audit` checks this
contract independently.
"""

from __future__ import annotations

from typing import Final

from trainyard.core.state import Alloc, ClusterState
from trainyard.core.types import ActionName

_EPS: Final = 1e-9


# The records are plain slotted classes, not dataclasses: mypyc runs a dataclass's
# generated `__init__` as interpreted code, and a cycle records thousands of placements.


class Placed:
    """A placement made in this cycle (decision record)."""

    __slots__ = ("action", "after_evictions", "alloc")

    def __init__(self, alloc: Alloc, action: ActionName, after_evictions: tuple[str, ...]) -> None:
        self.alloc = alloc
        self.action = action
        self.after_evictions = after_evictions


class Resized:
    """A running job restarted at another size in this cycle (decision record): `alloc` is
    what it held; its new placement is in `Statement.placed` (action ``resize``)."""

    __slots__ = ("alloc", "reason")

    def __init__(self, alloc: Alloc, reason: str) -> None:
        self.alloc = alloc
        self.reason = reason


class Evicted:
    """An eviction made in this cycle (decision record)."""

    __slots__ = ("action", "alloc", "for_job", "reason")

    def __init__(self, alloc: Alloc, action: ActionName, for_job: str, reason: str) -> None:
        self.alloc = alloc
        self.action = action
        self.for_job = for_job
        self.reason = reason


class Statement:
    """Undo-logged changes to a `ClusterState`, plus the decision records they produce."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._log: list[tuple[str, Alloc, Placed | None]] = []
        self.placed: dict[str, Placed] = {}
        self.evicted: dict[str, Evicted] = {}
        self.resized: dict[str, Resized] = {}
        self._reasons: list[Resized] = []  # the records a second `resize` replaced (undo)
        # node -> allocations of the jobs evicted so far with a part there (kept with the log)
        self._stopping: dict[int, list[Alloc]] = {}

    def checkpoint(self) -> int:
        return len(self._log)

    def allocate(
        self,
        alloc: Alloc,
        action: ActionName | None,
        after_evictions: tuple[str, ...] = (),
    ) -> None:
        """Take the devices of `alloc`. `action=None` is a hold (reservation), not a placement.
        A placement also waits for every eviction whose devices, CPU or memory it uses."""
        if action is not None and self._stopping:
            after_evictions = self._awaited(alloc, after_evictions)
        self.state.take(alloc)
        self._log.append(("take", alloc, None))
        if action is not None:
            self.placed[alloc.job.id] = Placed(alloc, action, after_evictions)

    def release(self, job_id: str) -> Alloc:
        """Give back a hold or a tentative allocation without recording an eviction."""
        alloc = self.state.give(job_id)
        self._log.append(("give", alloc, self.placed.pop(job_id, None)))
        return alloc

    def evict(self, job_id: str, action: ActionName, for_job: str, reason: str) -> Alloc:
        """Evict a running job (whole gang) and record why."""
        alloc = self.state.give(job_id)
        self._log.append(("evict", alloc, None))
        self.evicted[job_id] = Evicted(alloc, action, for_job, reason)
        for part in alloc.parts:
            self._stopping.setdefault(part[0], []).append(alloc)
        return alloc

    def resize(self, job_id: str, reason: str) -> Alloc:
        """Take a running job off its devices to restart it at another size; the caller
        places it again (`allocate` with action ``resize``) or rolls back. Like an evicted
        job, it keeps its devices until it has stopped: placements on them wait for it. A job
        resized earlier in this cycle is taken off its new placement instead: it restarts
        once all the same, from what it held before the cycle, and `reason` is added to its
        record's."""
        earlier = self.resized.get(job_id)
        if earlier is not None:
            alloc = self.release(job_id)
            self._reasons.append(earlier)
            self._log.append(("reason", alloc, None))
            self.resized[job_id] = Resized(earlier.alloc, f"{earlier.reason}; then {reason}")
            return alloc
        alloc = self.state.give(job_id)
        self._log.append(("resize", alloc, None))
        self.resized[job_id] = Resized(alloc, reason)
        for part in alloc.parts:
            self._stopping.setdefault(part[0], []).append(alloc)
        return alloc

    def _awaited(self, alloc: Alloc, named: tuple[str, ...]) -> tuple[str, ...]:
        """`named` plus the evicted jobs whose devices, CPU or memory `alloc` would use (the
        state has not taken `alloc` yet)."""
        state = self.state
        extra: list[str] = []
        for n, mask, cpus, mem in alloc.parts:
            victims = self._stopping.get(n)
            if not victims:
                continue
            held_cpu = 0.0
            held_mem = 0.0
            for v in victims:
                if v.job.id == alloc.job.id:
                    continue  # its own earlier placement (a resize): the same run restarts
                for vn, _vmask, vcpu, vmem in v.parts:
                    if vn == n:
                        held_cpu += vcpu
                        held_mem += vmem
            short = (cpus > _EPS and cpus > state.free_cpu[n] - held_cpu + _EPS) or (
                mem > _EPS and mem > state.free_mem[n] - held_mem + _EPS
            )
            for v in victims:
                jid = v.job.id
                if jid in named or jid in extra or jid == alloc.job.id:
                    continue
                if short or any(vn == n and vmask & mask for vn, vmask, _c, _m in v.parts):
                    extra.append(jid)
        return named + tuple(extra) if extra else named

    def rollback(self, checkpoint: int) -> None:
        """Undo every change made after `checkpoint`, newest first."""
        log = self._log
        state = self.state
        while len(log) > checkpoint:
            op, alloc, placed = log.pop()
            jid = alloc.job.id
            if op == "reason":
                self.resized[jid] = self._reasons.pop()
            elif op == "take":
                state.give(jid)
                self.placed.pop(jid, None)
            else:
                state.take(alloc)
                if op in ("evict", "resize"):
                    if op == "evict":
                        self.evicted.pop(jid, None)
                    else:
                        self.resized.pop(jid, None)
                    for part in alloc.parts:
                        self._stopping[part[0]].remove(alloc)
                        if not self._stopping[part[0]]:
                            del self._stopping[part[0]]
                elif placed is not None:
                    self.placed[jid] = placed
