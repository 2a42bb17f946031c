"""The discrete-event simulation loop: drives the unchanged `core.run_cycle` with a simulated
clock.

This module owns simulated time, job progress and the application of decisions. The policy
is entirely the core's: every scheduling round builds a `Snapshot` exactly as the server does
(nodes, queues, running jobs with their placements and attained service, pending jobs) and
applies the returned `Decision` (evictions, then placements). There is no `if simulating:`
anywhere in the core.

Time and rounds. Scheduling rounds happen at multiples of `interval_s` (60 s, as in the
Pollux artifact; 0 means "at every event"). Jobs arrive and finish at their exact times in
between; a job that arrives waits for the next round, and GPUs freed by a finished job are
handed out at the next round. A round is skipped, with the same result, when nothing that the
core reads has changed since the last one: no arrival, no completion, no job crossing a
least-attained-service threshold, nothing pending, and no elastic job that a resize could
move (`_resize_at`: the resize rules read the time itself, through holds and ages, so while
elastic jobs could grow into idle GPUs or be rebalanced among themselves, every round
happens; with rounds at every event, one at the end of each hold and then one a hold apart
while a job could move). So a quiet cluster costs
nothing and a busy one a cycle per interval at most.

Progress. A job needs `speed.work(job)` units; on its placement it makes `rate` units per
second, except during the start penalty (`first_start_s` after its first start, `restart_s`
after each restart). Models whose rate changes with progress (Pollux: statistical efficiency
per epoch) expose `rate_at(job, per_node, gpu_type, progress)` and `next_change(job,
progress)`; progress is then integrated piece by piece, exactly. Preempted jobs keep their
progress (checkpointed) and pay the restart penalty when they start again.

Time-driven changes also wake a round while jobs wait: a job's delay-scheduling wait
(`Profile.locality_wait_s`) running out, and `min_runtime_s` expiring for a running job.

Attained service (GPU-seconds held) is what the LAS orders read; it is passed to the core in
each job, refreshed whenever a running job crosses one of the profile's `las_thresholds`.

Determinism: no wall clock, no unordered iteration; the same inputs give the same result.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import replace

from trainyard.core import (
    Decision,
    Job,
    NodeDevices,
    Profile,
    Queue,
    RunningJob,
    Snapshot,
    build_layout,
    get_profile,
    run_cycle,
)
from trainyard.runtime import gc_paused
from trainyard.sim.cluster import Cluster
from trainyard.sim.config import QUOTA_SHARE, SimOptions, default_queues
from trainyard.sim.fairshare import SimFairShare
from trainyard.sim.jobstate import JobState, isolated_time
from trainyard.sim.records import JobRecord, Sample, SimResult
from trainyard.sim.speed import SpeedModel
from trainyard.sim.workload import SimJob, Workload, WorkloadError, fit_to_cluster

__all__ = ["QUOTA_SHARE", "Observer", "SimOptions", "default_queues", "simulate"]

_INF = math.inf
heapq_t = list[tuple[float, int, str, int]]  # (time, sequence, job id, run version)
# Called after every scheduling round with the round's snapshot and decision (`simulate`).
Observer = Callable[[Snapshot, Decision], None]


class _Engine:
    def __init__(
        self,
        workload: Workload,
        cluster: Cluster,
        speed: SpeedModel,
        profile: Profile,
        options: SimOptions,
        queues: tuple[Queue, ...],
        observer: Observer | None = None,
    ) -> None:
        self.workload = workload
        self.observer = observer
        self.cluster = cluster
        self.speed = speed
        self.profile = profile
        self.opt = options
        self.queues = queues
        half_life = options.fairshare_half_life_s
        self.fair = SimFairShare(queues, cluster.gpus, half_life) if half_life else None
        self.layout = build_layout(cluster.nodes, cluster.topology)
        self.node_type = {n.name: n.gpu_type for n in cluster.nodes}
        self.thresholds = tuple(profile.las_thresholds)
        self.rate_at = getattr(speed, "rate_at", None)
        self.next_change = getattr(speed, "next_change", None)
        # elastic jobs: what the speed model tells the scheduler (batch range, gradient
        # statistics) and the steps a job observes on a placement (`core.goodput` fits them)
        self.elastic_info = getattr(speed, "elastic_info", None)
        self.observe = getattr(speed, "observe", None)
        self.report = getattr(speed, "report", None)  # what a running job reports meanwhile
        known = {q.name for q in queues}
        self.states: list[JobState] = []
        seen: set[str] = set()
        for sim in workload.jobs:
            if sim.id in seen:
                raise WorkloadError(sim.id, "duplicate job id; every job needs its own")
            seen.add(sim.id)
            if sim.queue not in known:
                raise WorkloadError(sim.id, f"queue {sim.queue!r} is not one of {sorted(known)}")
            work = speed.work(sim)  # of the job as asked, before it is fitted to the cluster
            sim = fit_to_cluster(sim, cluster.gpus)
            isolated = isolated_time(speed, sim)
            estimate = isolated if options.estimates == "exact" else None
            job = Job(
                id=sim.id,
                queue=sim.queue,
                gpus=sim.gpus,
                priority=sim.priority,
                preemptible=sim.preemptible,
                submit_time=sim.submit_time,
                min_runtime=options.min_runtime_s,
                expected_duration=estimate,
                name=sim.application or "",
                gpu_types=self._gpu_types(sim),
                min_gpus=sim.min_gpus,
                max_gpus=None if sim.max_gpus is None else min(sim.max_gpus, cluster.gpus),
            )
            if job.is_elastic and self.elastic_info is not None:
                job = replace(job, elastic=self.elastic_info(sim))
            self.states.append(JobState(sim, job, work, isolated))
        self.by_id = {s.sim.id: s for s in self.states}
        self.pending: dict[str, JobState] = {}
        self.running: dict[str, JobState] = {}
        self.elastic_running: set[str] = set()  # ids (sorted when iterated for determinism)
        self.done: heapq_t = []  # (end time, seq, id, version)
        self.crossings: heapq_t = []  # (time, seq, id, version): LAS level changes
        self.wakes: list[float] = []  # min_runtime expiries (victims become eligible)
        self.seq = 0
        self.i = 0  # next arrival
        self.earliest = 0.0  # the next round may not happen before this
        self.end_time = 0.0
        self.allocated = 0
        self.total = cluster.gpus
        self.pending_gpus = 0
        self.samples: list[Sample] = []
        self.rounds = 0
        self.now = 0.0
        self.last_round = -_INF  # when the last round ran

    def _gpu_types(self, sim: SimJob) -> tuple[str, ...]:
        """On a heterogeneous cluster, the types the job can run on, fastest first (the
        core reads `Job.gpu_types` as acceptable types in order of preference); () = any."""
        types = self.cluster.gpu_types
        runs_on = getattr(self.speed, "runs_on", None)
        if len(types) < 2 or runs_on is None:
            return ()
        usable = [t for t in types if runs_on(sim, t)]
        if not usable:
            raise WorkloadError(sim.id, f"cannot run on any GPU type of the cluster {types}")
        packed = (sim.gpus,)
        return tuple(sorted(usable, key=lambda t: (-self.speed.rate(sim, packed, t), t)))

    # -- progress -----------------------------------------------------------------------------

    def _set_rate(self, s: JobState) -> None:
        if self.rate_at is not None and self.next_change is not None:
            s.rate = float(self.rate_at(s.sim, s.per_node, s.gpu_type, s.progress))
            s.change_at = float(self.next_change(s.sim, s.progress))
        else:
            s.rate = self.speed.rate(s.sim, s.per_node, s.gpu_type)
            s.change_at = _INF
        if not (s.rate > 0 and math.isfinite(s.rate)):
            raise WorkloadError(
                s.sim.id, f"speed model {self.speed.name} gives rate {s.rate} on {s.per_node}"
            )

    def _advance(self, s: JobState, t: float) -> None:
        """Integrate `s`'s progress up to time `t`."""
        clock = max(s.last_t, s.penalty_until)
        while clock < t and s.progress < s.work:
            target = min(s.change_at, s.work)
            need = (target - s.progress) / s.rate
            if clock + need <= t:
                clock += need
                s.progress = target
                if target >= s.change_at and s.progress < s.work:
                    self._set_rate(s)
            else:
                s.progress += s.rate * (t - clock)
                clock = t
        s.last_t = max(s.last_t, t)

    def _finish_time(self, s: JobState) -> float:
        """When `s` completes if it keeps running (piecewise, without changing `s`)."""
        clock = max(s.last_t, s.penalty_until)
        progress, rate, change = s.progress, s.rate, s.change_at
        while progress < s.work:
            target = min(change, s.work)
            clock += (target - progress) / rate
            progress = target
            if progress >= change and progress < s.work:
                assert self.rate_at is not None and self.next_change is not None
                rate = float(self.rate_at(s.sim, s.per_node, s.gpu_type, progress))
                change = float(self.next_change(s.sim, progress))
        return clock

    # -- attained service and LAS levels ------------------------------------------------------

    def _push_crossing(self, s: JobState, t: float) -> None:
        """Queue the time `s` (running) next crosses an LAS threshold, after time `t`."""
        held = s.attained + s.gpus * (t - s.started)
        level = bisect_right(self.thresholds, held)
        if level < len(self.thresholds):
            at = s.started + (self.thresholds[level] - s.attained) / s.gpus
            self.seq += 1
            heapq.heappush(self.crossings, (at, self.seq, s.sim.id, s.version))

    def _running_entry(self, s: JobState, t: float) -> RunningJob:
        attained = s.attained + s.gpus * (t - s.started)
        job = replace(s.job, attained_service=attained, restarts=s.restarts)
        return RunningJob(job=job, placement=s.placement, started_at=s.started)

    # -- transitions --------------------------------------------------------------------------

    def _start(self, s: JobState, nodes: tuple[NodeDevices, ...], t: float) -> None:
        first = s.first_start is None
        if first:
            s.first_start = t
        else:
            s.restarts += 1
        s.started = t
        s.last_t = t
        s.penalty_until = t + (self.speed.first_start_s if first else self.speed.restart_s)
        s.placement = nodes
        s.per_node = tuple(sorted((len(nd.devices) for nd in nodes), reverse=True))
        s.gpus = sum(s.per_node)
        s.hold(t, s.gpus)
        s.job = s.job.with_gpus(s.gpus)  # an elastic job may start at another size
        if s.job.elastic is not None and self.observe is not None:
            s.job = replace(
                s.job, elastic=self.observe(s.sim, s.per_node, s.progress, s.job.elastic)
            )
        s.gpu_type = self.node_type[nodes[0].node]
        s.version += 1
        self._set_rate(s)
        s.running = self._running_entry(s, t)
        del self.pending[s.sim.id]
        self.pending_gpus -= s.sim.gpus
        self.running[s.sim.id] = s
        if s.job.is_elastic:
            self.elastic_running.add(s.sim.id)
        self.allocated += s.gpus
        self.seq += 1
        heapq.heappush(self.done, (self._finish_time(s), self.seq, s.sim.id, s.version))
        self._push_crossing(s, t)
        if self.opt.min_runtime_s > 0:
            heapq.heappush(self.wakes, t + self.opt.min_runtime_s)

    def _stop(self, s: JobState, t: float) -> None:
        if self.fair is not None:
            self.fair.add(s.sim.queue, s.started, t, s.gpus)
        self._advance(s, t)
        s.attained += s.gpus * (t - s.started)
        s.run_time += t - s.started
        s.hold(t, 0)
        s.version += 1
        s.running = None
        # pending again at its requested size (an elastic job may start smaller)
        s.job = replace(s.job.with_gpus(s.sim.gpus), attained_service=s.attained)
        del self.running[s.sim.id]
        self.elastic_running.discard(s.sim.id)
        self.allocated -= s.gpus

    def _sample(self, t: float, fragmented_free: int = 0) -> None:
        new = Sample(t, self.allocated, len(self.pending), self.pending_gpus, fragmented_free)
        last = self.samples[-1] if self.samples else None
        if last is not None and last.t == t:
            self.samples[-1] = new
        elif last is None or (
            last.allocated,
            last.pending_jobs,
            last.pending_gpus,
            last.fragmented_free,
        ) != (new.allocated, new.pending_jobs, new.pending_gpus, new.fragmented_free):
            self.samples.append(new)

    # -- the loop -----------------------------------------------------------------------------

    def _valid_top(self, heap: heapq_t) -> float:
        while heap:
            t, _, job_id, version = heap[0]
            s = self.by_id[job_id]
            if s.running is not None and s.version == version:
                return t
            heapq.heappop(heap)
        return _INF

    def _round_at(self, t: float) -> float:
        step = self.opt.interval_s
        if step <= 0:
            return t
        return math.ceil(t / step - 1e-9) * step

    def _events_until(self, t: float) -> None:
        """Completions and arrivals up to time `t`, in time order (completions first at ties)."""
        jobs = self.states
        while True:
            done_at = self._valid_top(self.done)
            arrive_at = jobs[self.i].sim.submit_time if self.i < len(jobs) else _INF
            if min(done_at, arrive_at) > t:
                return
            if done_at <= arrive_at:
                _, _, job_id, _ = heapq.heappop(self.done)
                s = self.by_id[job_id]
                self._stop(s, done_at)
                s.progress = s.work
                s.end = done_at
                self._sample(done_at)
            else:
                s = jobs[self.i]
                self.pending[s.sim.id] = s
                self.pending_gpus += s.sim.gpus
                self.i += 1
                self._sample(arrive_at)
                if self.profile.locality_wait_s > 0:  # it may span nodes from then on
                    heapq.heappush(self.wakes, arrive_at + self.profile.locality_wait_s)

    def _apply(self, decision: Decision, t: float) -> None:
        for e in decision.evictions:
            s = self.by_id[e.job_id]
            self._stop(s, t)
            s.preemptions += 1
            self.pending[s.sim.id] = s
            self.pending_gpus += s.sim.gpus
        for z in decision.resizes:  # checkpoint, stop, start again at the new size
            s = self.by_id[z.job_id]
            self._stop(s, t)
            s.resizes += 1
            self.pending[s.sim.id] = s
            self.pending_gpus += s.sim.gpus
            self._start(s, z.nodes, t)
        for p in decision.placements:
            self._start(self.by_id[p.job_id], p.nodes, t)

    def _cycle(self, t: float) -> None:
        self.rounds += 1
        self.last_round = t
        self._refresh_elastic(t)
        running = [s.running for s in self.running.values() if s.running is not None]
        queues = self.queues
        if self.fair is not None:
            spans = ((s.sim.queue, s.started, s.gpus) for s in self.running.values())
            queues = self.fair.queues(t, queues, spans)
        snapshot = Snapshot(
            now=t,
            nodes=self.cluster.nodes,
            topology=self.cluster.topology,
            queues=queues,
            running=tuple(running),
            pending=tuple(s.job for s in self.pending.values()),
        )
        decision = run_cycle(snapshot, self.profile, self.layout)
        self._apply(decision, t)
        if self.observer is not None:
            self.observer(snapshot, decision)
        fragmented = any(r.code == "fragmented" for r in decision.pending.values())
        free = self.total - self.allocated
        self._sample(t, free if fragmented and self.pending else 0)

    def _refresh_elastic(self, t: float) -> None:
        """What running elastic jobs report between restarts, as a real job would each
        interval: their attained service and their current gradient statistics."""
        for jid in self.elastic_running:
            s = self.running[jid]
            if s.running is None or s.job.elastic is None:
                continue
            self._advance(s, t)
            if self.report is not None:
                info = self.report(s.sim, s.progress, s.job.elastic)
                if info is not s.job.elastic:
                    s.job = replace(s.job, elastic=info)
            s.running = self._running_entry(s, t)

    def _resize_at(self) -> float:
        """When a round could resize a running elastic job: the end of the earliest hold of
        a job that could move (growth while GPUs are idle, or the rebalance while another
        elastic job runs), and every round after it, since the rules read the time (ages,
        attained service, gradient statistics). With rounds at every event (`interval_s` 0),
        a round a hold after the last one while a job could move."""
        running = self.elastic_running
        full = self.allocated >= self.total
        if not running or (full and len(running) < 2):
            return _INF
        hold = self.profile.resize_hold_s
        every_event = self.opt.interval_s <= 0
        at = _INF
        for jid in running:
            s = self.running[jid]
            if full or (s.job.max_gpus is not None and s.gpus < s.job.max_gpus):
                ends = s.started + hold
                if every_event and ends <= self.last_round:  # again a hold later (no hold: never)
                    ends = self.last_round + hold if hold > 0.0 else _INF
                at = min(at, ends)
        return at

    def run(self) -> None:
        jobs = self.states
        limit = self.opt.max_time_s if self.opt.max_time_s is not None else _INF
        step = self.opt.interval_s
        while self.i < len(jobs) or self.running or self.pending:
            arrival = jobs[self.i].sim.submit_time if self.i < len(jobs) else _INF
            when = min(arrival, self._valid_top(self.done))
            if self.pending:
                when = min(when, self._valid_top(self.crossings))
                if self.wakes:
                    when = min(when, self.wakes[0])
            when = min(when, self._resize_at())
            if when == _INF:
                break  # jobs nothing can ever place (e.g. a GPU type the cluster lacks)
            t = max(self.earliest, self._round_at(when))
            if t > limit:
                self._events_until(limit)  # jobs that end (or arrive) before the cut-off
                self.now = limit
                break
            self._events_until(t)
            while (when := self._valid_top(self.crossings)) <= t:
                s = self.by_id[heapq.heappop(self.crossings)[2]]
                s.running = self._running_entry(s, t)  # its LAS level changed at `when`
                self._push_crossing(s, max(t, when))
            while self.wakes and self.wakes[0] <= t:
                heapq.heappop(self.wakes)
            self.now = t
            if self.pending or self._resize_at() <= t:  # after this round's events
                self._cycle(t)
            self.earliest = t + step if step > 0 else t
        ends = [s.end for s in jobs if s.end is not None]
        if jobs and len(ends) == len(jobs):
            self.end_time = max(ends)  # every job finished: the run ends with the last one
        else:
            self.end_time = max([self.now, *ends])


def simulate(
    workload: Workload,
    cluster: Cluster,
    speed: SpeedModel,
    profile: str | Profile = "default",
    options: SimOptions | None = None,
    *,
    queues: Sequence[Queue] | None = None,
    seed: int = 0,
    observer: Observer | None = None,
) -> SimResult:
    """Run `workload` on `cluster` under `profile`; deterministic for the same inputs.

    `observer`, if given, sees every round's snapshot and decision after they are applied
    (`trainyard demo` prints them); it cannot change the run."""
    prof = get_profile(profile) if isinstance(profile, str) else profile
    opts = options or SimOptions()
    qs = tuple(queues) if queues is not None else default_queues(workload, cluster, speed)
    engine = _Engine(workload, cluster, speed, prof, opts, qs, observer)
    with gc_paused():
        engine.run()
    records = tuple(
        JobRecord(
            id=s.sim.id,
            queue=s.sim.queue,
            gpus=s.sim.gpus,
            submit=s.sim.submit_time,
            first_start=s.first_start,
            end=s.end,
            run_time=s.run_time + (engine.now - s.started if s.running is not None else 0.0),
            preemptions=s.preemptions,
            restarts=s.restarts,
            isolated_time=s.isolated,
            gpu_seconds=s.attained + (s.gpus * (engine.now - s.started) if s.running else 0.0),
            resizes=s.resizes,
            allocation=tuple(s.allocation),
        )
        for s in engine.states
    )
    return SimResult(
        workload=workload.source,  # the spec it was read from (kind:path)
        cluster=cluster.spec,
        policy=prof.name,
        seed=seed,
        total_gpus=cluster.gpus,
        records=records,
        samples=tuple(engine.samples),
        end_time=engine.end_time,
        rounds=engine.rounds,
        queues=tuple(q.name for q in qs),
    )
