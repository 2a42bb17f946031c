"""One scheduling cycle: snapshot in, decision out. The only entry point is `run_cycle`.

`Cycle` is the working context of one call: the layout, the mutable `ClusterState`, the
`Statement` through which every change goes, the shared pending order, reservation holds and
the raw pending status of every job. Actions (`actions/`) use `Cycle.try_place` and the
statement; at the end `explain.build_decision` turns the statement's records and the statuses
into an immutable `Decision`. Nothing here does I/O or reads a clock: `snapshot.now` is time.

What goes on `Cycle`: only what several modules share (every action, or an action and the
explanation: `head`, `holds`, `status`, `hints`, `protected_until`, `settled_epoch`, and the
caches behind `try_place`). State that one action module keeps for itself (memos, caches,
indexes) is a slotted dataclass defined in that module and reached through
`cycle.state_of(ThatState)`: created empty on first use, one per cycle, keyed by the class
(as the Kubernetes scheduler framework keys its CycleState), so `Cycle` does not know it.
Fetch it once per action call into a local, not per job or candidate, on hot paths.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Final, TypeVar, cast

from trainyard.core.explain import build_decision
from trainyard.core.framework import ACTIONS, SCORERS, Profile, Scorer, get_profile
from trainyard.core.order import PendingOrder
from trainyard.core.placement import (
    Candidate,
    candidates,
    choose,
    cpu_only_candidates,
    job_demand,
    pick_devices,
    single_nodes,
)
from trainyard.core.plugins.scoring import FUSED, best_single_node
from trainyard.core.queues import QueueIndex
from trainyard.core.snapshot import Snapshot, validate
from trainyard.core.spares import recovering_first
from trainyard.core.state import PHANTOM_QUEUE, Alloc, ClusterState
from trainyard.core.statement import Statement
from trainyard.core.topology import Layout, build_layout
from trainyard.core.types import ActionName, Decision, Job, NotGrown, PendingCode

CAPACITY_CODES: Final[frozenset[PendingCode]] = frozenset({"capacity", "fragmented", "resources"})

S = TypeVar("S")


class Status:
    """Why a job is pending right now (raw; `explain` renders it for people).

    A plain slotted class, not a dataclass: mypyc runs a dataclass's generated `__init__` as
    interpreted code, and a cycle records a status for thousands of jobs."""

    __slots__ = ("blocker", "code", "other_job", "quota")

    def __init__(
        self,
        code: PendingCode,
        blocker: int = -1,
        other_job: str = "",
        quota: tuple[str, int, int] = ("", 0, 0),
    ) -> None:
        self.code = code
        self.blocker = blocker  # queue index that blocks (quota)
        self.other_job = other_job  # reserved job that would be delayed / head of line
        # quota: (rule, allocated, bound) when the job was refused: "limit" or "guaranteed"
        self.quota = quota


@dataclass(slots=True)
class Hold:
    """A backfill reservation: `job` starts at `start` on `target` (node, device mask)."""

    job: Job
    start: float
    target: list[tuple[int, int]]
    hold_id: str


class Cycle:
    """Working context of one `run_cycle` call."""

    def __init__(self, snapshot: Snapshot, profile: Profile, layout: Layout | None = None) -> None:
        self.snapshot = snapshot
        self.profile = profile
        self.now = snapshot.now
        # Jobs submitted at or before this time may span nodes (Profile.may_split, inlined).
        self.split_before = (
            snapshot.now - profile.locality_wait_s if profile.split_small_jobs else -math.inf
        )
        self.layout = layout or build_layout(snapshot.nodes, snapshot.topology)
        nodes = snapshot.nodes
        self.queues = QueueIndex(
            snapshot.effective_queues(),
            total_gpus=sum(self.layout.class_capacity),
            total_cpus=sum(n.cpus for n in nodes),
            total_mem=sum(n.memory_gb for n in nodes),
            usage_weight=profile.usage_weight,
        )
        self.state = ClusterState(self.layout, snapshot, self.queues)
        self.stmt = Statement(self.state)
        self.status: dict[str, Status] = {}
        self.holds: list[Hold] = []
        # capacity came free after the jobs that wanted it were tried (a reservation spent
        # by a job placed elsewhere, a placement of this cycle retracted): `_settle` offers it
        self.resettle = False
        self.retracted: list[Job] = []  # placements of this cycle an eviction plan took back
        self.head: Job | None = None  # first job allocate could not fit (backfill reserves it)
        self.order = PendingOrder(self)
        self._classes: dict[tuple[tuple[str, ...], float], tuple[int, ...]] = {}
        self._any_class: tuple[int, ...] | None = None  # classes_of a job that takes any GPU
        self._fail: dict[tuple[object, ...], tuple[int, int]] = {}  # see try_place
        self.settled_epoch = self.state.epoch  # capacity epoch that allocate/backfill saw
        # Notes the actions leave for the explanation (explain.py):
        # pending job -> (time a protected victim's min_runtime ends, that victim)
        self.protected_until: dict[str, tuple[float, str]] = {}
        self.hints: dict[str, str] = {}  # pending job -> a clause its capacity reason adds
        # running elastic job -> (its GPU classes, why it was not grown into idle GPUs)
        self.not_grown: dict[str, tuple[tuple[int, ...], NotGrown]] = {}
        self.scorers: list[tuple[Scorer[ClusterState, Candidate], float]] = [
            (SCORERS.get(n), w) for n, w in profile.scorers if w
        ]
        # the scorers by `scoring.FUSED` code, when every one is built in (see `find`)
        fused = [(FUSED.get(fn, -1), w) for fn, w in self.scorers]
        self.fused: list[tuple[int, float]] | None = (
            fused if all(code >= 0 for code, _w in fused) else None
        )
        self._states: dict[type, object] = {}  # see state_of

    def state_of(self, kind: type[S]) -> S:
        """This cycle's instance of an action module's own state class `kind` (a dataclass
        whose fields all have defaults), created on first use (see the module docstring)."""
        found = self._states.get(kind)
        if found is None:
            found = kind()
            self._states[kind] = found
        return cast(S, found)

    # -- helpers used by actions ---------------------------------------------------------

    def classes_of(self, job: Job) -> tuple[int, ...]:
        if not job.gpu_types and job.gpu_memory_gb == 0.0:  # the common case: any GPU
            found = self._any_class
            if found is None:
                found = self.layout.classes_for((), 0.0)
                self._any_class = found
            return found
        key = (job.gpu_types, job.gpu_memory_gb)
        found = self._classes.get(key)
        if found is None:
            found = self.layout.classes_for(job.gpu_types, job.gpu_memory_gb)
            self._classes[key] = found
        return found

    def _one_class(self, job: Job) -> int:
        """The class of a job of one acceptable device class that fits one of its nodes and
        has room in it now, else -1."""
        classes = self.classes_of(job)
        if len(classes) != 1:
            return -1
        c = classes[0]
        g = job.gpus
        if g > self.layout.class_node_max[c] or self.state.class_free[c] < g:
            return -1
        return c

    @staticmethod
    def shape(job: Job) -> tuple[object, ...]:
        """What makes two jobs of a queue alike for an evicting action's failure memo: where
        they may run (device types and memory, topology, nodes); with it, a job no smaller
        than one that found no plan finds none either while capacity has not grown."""
        return (job.queue, job.gpu_types, job.gpu_memory_gb, job.topology, job.nodes)

    def max_level(self, job: Job) -> int:
        """The outermost level `job` may span (depth: one node; -1: the whole cluster)."""
        if job.topology is None:
            return self.layout.depth if job.nodes == 1 else -1
        level = self.layout.level_index(job.topology)
        if level is None:
            return -1
        return max(level, self.layout.depth) if job.nodes == 1 else level

    def quota_blocker(self, job: Job) -> int:
        """-1 if the job's queue may take it now, else the blocking queue's index."""
        if job.gpus == 0:
            return -1  # quotas are in GPUs: a CPU-only job takes none
        queues = self.queues
        q = queues.index[job.queue]
        blocker = queues.within_limit(q, job.gpus) if queues.has_limits else -1
        if blocker < 0 and not job.preemptible:
            blocker = queues.within_guaranteed(q, job.gpus)
        return blocker

    def quota_status(self, job: Job, blocker: int) -> Status:
        """The status of a job refused by queue `blocker`, with the numbers of that moment."""
        queues = self.queues
        lim = queues.limit[blocker]
        used = queues.gpus[blocker]
        if lim is not None and used + job.gpus > lim:
            return Status("quota", blocker=blocker, quota=("limit", used, lim))
        return Status(
            "quota", blocker=blocker, quota=("guaranteed", used, queues.guaranteed[blocker])
        )

    def fits_one_node(self, job: Job) -> bool:
        """Could `job` run on one node of one of its classes (and asks for no more)?"""
        node_max = self.layout.class_node_max
        return job.nodes <= 1 and any(job.gpus <= node_max[c] for c in self.classes_of(job))

    def find(self, job: Job, split: bool = True) -> Candidate | None:
        """Best candidate for `job` on the current state, or None (no status recorded).
        `split` False: not across nodes, even past the job's locality wait."""
        if job.gpus == 0:
            cands = cpu_only_candidates(self.state, job)
        else:
            c = self._one_class(job) if self.fused is not None and job.nodes <= 1 else -1
            if c >= 0:  # one class, fits one node: rate its nodes without building every
                # candidate (the choice `candidates` and `choose` make; best_single_node)
                nodes = single_nodes(self.state, job, c, job.topology == "island")
                if nodes:
                    assert self.fused is not None
                    g = job.gpus
                    n = nodes[best_single_node(self.state, c, nodes, g, self.fused)]
                    return Candidate(c, [(n, g)], self.layout.depth, n)
            cands = candidates(
                self.state,
                job,
                self.classes_of(job),
                self.profile,
                self.max_level(job),
                split and job.submit_time <= self.split_before,
            )
        if not cands:
            return None
        return cands[0] if len(cands) == 1 else choose(self.state, job, cands, self.scorers)

    def commit(
        self,
        job: Job,
        cand: Candidate,
        action: ActionName,
        after_evictions: tuple[str, ...] = (),
    ) -> Alloc:
        """Allocate `cand` for `job` in the statement (devices chosen here)."""
        q = self.queues.index[job.queue]
        alloc = self.materialize(job, cand, q)
        self.stmt.allocate(alloc, action, after_evictions)
        self.order.touched.add(q)
        if job.id in self.status:
            del self.status[job.id]
        return alloc

    def materialize(self, job: Job, cand: Candidate, queue: int) -> Alloc:
        """The allocation `cand` would make for `job` (devices chosen, nothing taken)."""
        g = job.gpus
        d = job.expected_duration
        end = self.now + d if d is not None else None
        if g and len(cand.parts) == 1:  # the common case, without the general loop
            n, k = cand.parts[0]
            mask = pick_devices(self.state, n, k)
            return Alloc(
                job, queue, cand.cls, [(n, mask, job.cpus, job.memory_gb)], self.now, True, end, g
            )
        cpu, mem = job_demand(job)
        parts = []
        for n, k in cand.parts:
            mask = pick_devices(self.state, n, k) if k else 0
            share = k if g else 1
            parts.append((n, mask, cpu * share, mem * share))
        return Alloc(job, queue, cand.cls if g else -1, parts, self.now, True, end, g)

    def try_place(
        self, job: Job, action: ActionName, after_evictions: tuple[str, ...] = ()
    ) -> bool:
        """Place `job` if quota and capacity allow; otherwise record why not.

        Failures are cached per job shape: while capacity has not grown (`state.epoch`), a
        job of the same shape and at least the same size cannot fit either."""
        queues = self.queues
        if job.gpus and (queues.has_limits or not job.preemptible):
            blocker = self.quota_blocker(job)
            if blocker >= 0:
                self.status[job.id] = self.quota_status(job, blocker)
                return False
        g = job.gpus
        if g:  # no class with that many free GPUs: no candidate can exist
            class_free = self.state.class_free
            room = False
            for c in self.classes_of(job):
                if class_free[c] >= g:
                    room = True
                    break
            if not room:
                self.status[job.id] = Status("capacity")
                return False
        g = job.gpus or 1
        key = (
            job.gpu_types,
            job.gpu_memory_gb,
            job.topology,
            job.cpus / g,
            job.memory_gb / g,
            job.submit_time <= self.split_before,
            job.nodes,
        )
        epoch = self.state.epoch
        cached = self._fail.get(key)
        if cached is not None and cached[0] == epoch and job.gpus >= cached[1]:
            self.status[job.id] = Status("capacity")
            return False
        cand = self.find(job)
        if cand is None:
            self._fail[key] = (epoch, job.gpus)
            self.status[job.id] = Status("capacity")
            return False
        self.commit(job, cand, action, after_evictions)
        return True

    def restore_epoch(self, epoch: int) -> None:
        """After a change that left capacity the same or smaller (a rolled-back trial, holds
        lifted and re-taken), keep the failures cached at `epoch` valid and drop the rest."""
        self.state.epoch = epoch
        self._fail = {k: v for k, v in self._fail.items() if v[0] == epoch}

    # -- reservation holds ---------------------------------------------------------------

    def hold(self, res: Hold) -> None:
        """Take what is free now of a reservation's target (devices, and the CPU and memory
        that go with them) so that no one else uses it."""
        state = self.state
        cpu, mem = job_demand(res.job)
        parts = []
        for n, mask in res.target:
            free = mask & state.free_mask[n]
            # CPU and memory for every target device, not only the free ones: the jobs on the
            # busy ones may hold less than the reserved job will need beside them
            k = mask.bit_count() if res.job.gpus else 1
            cpus = max(0.0, min(state.free_cpu[n], cpu * k))
            memory = max(0.0, min(state.free_mem[n], mem * k))
            if free or cpus or memory:
                parts.append((n, free, cpus, memory))
        if parts:
            held = sum(p[1].bit_count() for p in parts)
            cls = self.layout.class_of_node[parts[0][0]] if held else -1
            placeholder = Job(id=res.hold_id, queue="", gpus=held)
            self.stmt.allocate(Alloc(placeholder, PHANTOM_QUEUE, cls, parts, self.now), None)

    def unhold(self, res: Hold) -> None:
        if res.hold_id in self.state.allocs:
            self.stmt.release(res.hold_id)

    def try_place_held(self, job: Job, action: ActionName) -> bool:
        """`try_place` with `job`'s own reservation lifted (it is not in its way): spent when
        the job is placed (wherever it lands), held again when it is not. A job placed with
        its reservation still standing would leave devices held for a job that runs."""
        hold = None
        for h in self.holds:
            if h.job.id == job.id:
                hold = h
                break
        if hold is None:
            return self.try_place(job, action)
        self.unhold(hold)
        if self.try_place(job, action):
            self.holds.remove(hold)
            self.resettle = True  # what it held elsewhere is free
            return True
        self.hold(hold)
        return False

    def refresh_holds(self, skip: str = "") -> None:
        """Hold again every free device of each reservation's target (after evictions freed
        some of them); `skip` names a job whose own reservation stays lifted."""
        for res in self.holds:
            if res.job.id != skip:
                self.unhold(res)
                self.hold(res)

    def pending_jobs(self) -> list[Job]:
        """Jobs considered so far that are still pending, in scheduling order."""
        return [j for j in self.order.visited if j.id in self.status]

    def then_retracted(self, jobs: list[Job]) -> Iterator[Job]:
        """`jobs`, then the placements retracted while the caller went through them: an
        evicting action offers those the same chance to evict in turn, as the next cycle
        would (found by the stability property: a recovering job placed first in line, then
        retracted for a higher-priority job, preempted a lower-priority one a cycle later)."""
        start = len(self.retracted)
        yield from jobs
        i = start
        while i < len(self.retracted):
            yield self.retracted[i]
            i += 1


def run_cycle(
    snapshot: Snapshot, profile: Profile | str = "default", layout: Layout | None = None
) -> Decision:
    """Run the profile's actions on `snapshot` and return what to change.

    Pure: no I/O, no clock; the same snapshot and profile always give the same decision.
    `layout` may be passed to reuse the static index of an unchanged cluster (same nodes and
    topology). Raises `SnapshotError` / `UnknownNameError` for input that cannot be scheduled.
    """
    prof = get_profile(profile) if isinstance(profile, str) else profile
    prof.validate()
    validate(snapshot, placements=False)  # placements are checked while indexing them
    return recovering_first(snapshot, prof, layout, _decide)


def _decide(snapshot: Snapshot, profile: Profile, layout: Layout | None) -> Decision:
    """One cycle of `profile` on a validated snapshot (`run_cycle`, after `spares.py`)."""
    cycle = Cycle(snapshot, profile, layout)
    run_actions(cycle)
    decision = build_decision(cycle)
    if not cycle.not_grown:
        return decision
    free = cycle.state.free_of  # notes on jobs that could still use GPUs left idle
    notes = {jid: note for jid, (cls, note) in cycle.not_grown.items() if free(cls) > 0}
    return replace(decision, not_grown=notes)


def run_actions(cycle: Cycle) -> None:
    """Run the profile's actions on a fresh `Cycle`, then settle and mark unreached jobs."""
    for name in cycle.profile.actions:
        ACTIONS.get(name)(cycle)
    if cycle.stmt.evicted or cycle.stmt.resized or cycle.resettle:
        _settle(cycle)
    head = cycle.head.id if cycle.head else ""
    for job in cycle.order.rest():  # jobs a strict order never reached
        cycle.status.setdefault(job.id, Status("order", other_job=head))


def _settle(cycle: Cycle) -> None:
    """After evictions, shrinks, or a reservation spent by a job placed elsewhere, let waiting
    jobs (not the victims) use what is left free, so that the next cycle on the applied
    decision has nothing left to do (stability)."""
    state = cycle.state
    own = {h.job.id for h in cycle.holds}
    for job in cycle.pending_jobs():  # quota-blocked ones too: evictions lowered usage
        if job.gpus and not any(state.class_free) and job.id not in own:
            continue  # no GPU free anywhere: no GPU job can start (its status is set)
        cycle.try_place_held(job, "backfill")
