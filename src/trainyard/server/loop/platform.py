"""The control plane's loop on one machine: the database, the scheduler and the executor.

`Platform.step()` is one turn of the loop:

1. Observe: every STARTING / RUNNING / PREEMPTED job (and every FAILED job that still has
   restarts) is matched with its run (`LocalExecutor.poll`). A run found for a STARTING job
   moves it to RUNNING; a run that ended, once no process of it is left, moves a RUNNING
   job to SUCCEEDED (all ranks exited 0) or FAILED (the exit code and the first failed rank
   in the event; a lost run fails too): until then it holds its devices. A run that reports
   no progress for `progress_timeout_s` is stopped and fails as hung. A FAILED job with
   restarts left goes back to PENDING with back-off, unless its command could not start.
   A PREEMPTED job goes back to PENDING once its run has stopped.
   Runs of jobs that no longer need them (CANCELLED, SUCCEEDED, ...) are stopped; while
   one still has processes, the round counts its devices as taken.
2. Schedule: `scheduling.run_once` (again, a few times, when it asks for a retry).
3. Act: the runs of evicted jobs are asked to stop (SIGTERM now, SIGKILL from a later step
   once the grace period is over; the loop never waits for it); placed jobs
   (`Applied.launch`) and deferred jobs whose victims have stopped (`ready_to_launch`) are
   launched and moved to RUNNING. A PREEMPTED job stays PREEMPTED, holding its devices,
   until no process of its run is left.

Defence in depth: the executor refuses to start a rank on a device that a live run still
holds (`DeviceBusy`). The scheduler never asks for that while it keeps its contract
(`core.audit`, also run on every decision by `scheduling.run_once`), so a refusal is logged
as a bug signal (`trainyard_booking_conflicts_total{stage="launch"}`) and the job stays
STARTING, its `pending_reason` naming the device and its holder, and is launched by the
first step after the device is free.

Every state change goes through `lifecycle.transition`, one job per transaction: a job
changed concurrently (an API cancel) fails that job's transaction only (`StaleDataError`),
and the next step looks at it again. `recover()` is for a server start: it re-attaches to the
runs the database says exist (`LocalExecutor.adopt`) and applies what happened meanwhile.

Runs are numbered by `Job.attempt - 1` (the times the job entered STARTING, from 0), not by
`restart_count`: a preempted job restarts without using a restart, and each launch needs a new
run directory. `recover()` also re-attaches to the live runs of jobs that no longer need them
(cancelled while no server watched), so that they are stopped and the device ledger knows
what they hold.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session
from sqlalchemy.orm.exc import StaleDataError

from trainyard.core import Profile
from trainyard.exec import jobdirs
from trainyard.exec.base import Executor
from trainyard.exec.gpuhealth import GpuHealth
from trainyard.exec.gpus import GpuInventory
from trainyard.exec.run import DeviceBusy, NodeGone, RunHandle, RunStatus
from trainyard.server.db import Job, JobState
from trainyard.server.lifecycle import (
    DEFAULT_RETRY,
    IllegalTransition,
    RetryPolicy,
    restarts_left,
    transition,
)
from trainyard.server.loop import drain, elastic, launching, membership, recovery, scheduling
from trainyard.server.loop.budgets import Budgets
from trainyard.server.loop.fairshare import FairShare
from trainyard.server.loop.nodewatch import NodeWatch
from trainyard.server.loop.pending import PendingCache
from trainyard.server.loop.spares import Spares
from trainyard.server.loop.step_report import StepReport, _Out
from trainyard.server.metrics import PLATFORM, PlatformMetrics
from trainyard.server.services import usage

__all__ = ["Platform", "StepReport"]

log = logging.getLogger(__name__)

S = JobState
_ACTIVE = (S.STARTING, S.RUNNING, S.PREEMPTED, S.RESIZING)
_KEEP_RUN = frozenset({S.STARTING, S.RUNNING, S.PREEMPTED, S.RESIZING, S.FAILED})
HUNG_EVERY_S = 5.0  # how often running jobs are looked at for a stalled progress report
# A node a launch found gone (`NodeGone`) takes no new work for this long: Ray may report a
# dead node alive for a second or two (its health checks, docs/ray.md), and each round would
# place the job there again, each try an attempt number of its own (outside review 6, L3).
GONE_HOLD_S = 5.0


class Platform:
    """Drives jobs through their lifecycle on this machine (see the module docstring)."""

    def __init__(
        self,
        session_factory: Callable[[], Session],
        executor: Executor,
        *,
        profile: str | Profile = "default",
        clock: Callable[[], float] = time.time,
        retry: RetryPolicy = DEFAULT_RETRY,
        node_name: str | None = None,
        max_rounds: int = 3,
        metrics: PlatformMetrics = PLATFORM,
        fairshare: FairShare | None = None,
        progress_timeout_s: float = 0.0,
        nodes_every_s: float = 0.5,
        spares: int = 0,
        gpu_health: GpuHealth | None = None,
    ) -> None:
        self.session_factory = session_factory
        self.executor = executor
        self.profile = profile
        self.clock = clock
        self.retry = retry
        self.nodes = NodeWatch(session_factory, executor, clock, nodes_every_s, gpu_health)
        self.nodes.node_name = node_name
        self.max_rounds = max_rounds
        self.metrics = metrics
        self._runs: dict[str, RunHandle] = {}
        self._blocked: dict[str, str] = {}  # STARTING jobs whose devices were busy -> why
        self.pending_cache = PendingCache()
        self.fairshare = fairshare if fairshare is not None else FairShare()
        self.budgets = Budgets()
        self.spares = Spares(spares)  # hot spares for recovering jobs (loop/spares.py)
        self.progress_timeout_s = progress_timeout_s  # 0: hung ranks are not looked for
        self._hung_at, self._hung_check = float("-inf"), False
        self._hung: dict[str, str] = {}  # RUNNING jobs stopped as hung -> why
        self._gone: dict[str, float] = {}  # nodes a launch found gone -> avoided until

    # ---- node --------------------------------------------------------------------------

    def register_node(self, inventory: GpuInventory, name: str | None = None) -> str:
        """Store this machine and its devices unless a node of that name exists; the name."""
        return self.nodes.register(inventory, name)

    def sync_nodes(self, now: float, force: bool = False) -> membership.Changes:
        """The executor's nodes, or this machine's heartbeat, into the database."""
        return self.nodes.sync(now, force)

    @property
    def node_name(self) -> str | None:
        return self.nodes.node_name

    @property
    def virtual(self) -> bool:
        return self.nodes.virtual

    # ---- the loop ----------------------------------------------------------------------

    def step(self, now: float | None = None) -> StepReport:
        """One turn: observe runs, schedule, stop and launch (see the module docstring)."""
        now = self.clock() if now is None else now
        report = StepReport(now)
        self.sync_nodes(now)
        self.nodes.check_gpus(now)  # a faulty GPU drains its node (loop/nodewatch.py)
        self._hung_check = self.progress_timeout_s > 0 and now - self._hung_at >= HUNG_EVERY_S
        if self._hung_check:
            self._hung_at = now
        self._sweep(report, now)
        for job_id in self._watched():
            self._guarded(job_id, report, lambda s, row, out: self._observe(s, row, now, out))
        with self.session_factory() as s:
            stranded = recovery.on_lost_nodes(s)  # jobs on nodes the executor lost
        for job_id, node in stranded.items():
            self._guarded(job_id, report, self._lost_work(node, now))
        with self.session_factory() as s:
            evicted = drain.to_evict(s)  # jobs on nodes being drained (loop/drain.py)
        for job_id, node in evicted.items():  # evicted, then their runs stopped at once
            then = drain.work(node, now, lambda s, row, out: self._observe(s, row, now, out))
            self._guarded(job_id, report, then)
        cache = self.pending_cache
        metrics = self.metrics
        factory = self.session_factory

        self._gone = {node: until for node, until in self._gone.items() if until > now}
        avoid = frozenset(self._gone)

        def round_() -> scheduling.Applied:
            return scheduling.run_once(
                factory, self.profile, now=now, cache=cache, metrics=metrics,
                fairshare=self.fairshare, budgets=self.budgets, spares=self.spares,
                stopping=frozenset(self._runs), live=self._live, avoid=avoid,
            )  # fmt: skip

        applied = round_()
        for _ in range(self.max_rounds - 1):
            if not applied.retry:
                break
            applied = round_()
        report.applied = applied
        self.spares.store(factory)  # shown by `trainyard nodes` (loop/spares.py)
        if applied.retry:
            report.errors.append(f"scheduling: {applied.error}")
        for job_id in (*applied.stop, *applied.resize):  # stop them now
            self._guarded(job_id, report, lambda s, row, out: self._observe(s, row, now, out))
        with self.session_factory() as s:
            ready = [item.job_id for item in scheduling.ready_to_launch(s)]
        seen: set[str] = set()
        launches = (item.job_id for item in applied.launch)
        for job_id in (*launches, *ready, *report.resized, *list(self._blocked)):
            if job_id in seen:
                continue
            seen.add(job_id)
            self._guarded(job_id, report, lambda s, row, out: self._launch(s, row, now, out))
        return report

    def recover(self, now: float | None = None) -> StepReport:
        """At server start: re-attach to the runs of STARTING / RUNNING / PREEMPTED jobs and
        apply what happened while no server watched (live: kept; ended: its outcome;
        missing: failed, then requeued while restarts remain). A STARTING job scheduled but
        never launched (a crash in between), or a RESIZING one whose run has stopped, is
        launched now."""
        now = self.clock() if now is None else now
        report = StepReport(now)
        self.sync_nodes(now, force=True)
        with self.session_factory() as s:
            rows = list(s.scalars(select(Job).where(Job.state.in_(_ACTIVE)).order_by(Job.id)))
            jobs = [(r.id, S(r.state), self._attempt(r), launching.deferred(s, r)) for r in rows]
        self._adopt_strays({job_id for job_id, *_rest in jobs})
        for job_id, state, attempt, deferred in jobs:
            handle = self.executor.adopt(job_id)
            if handle is not None and handle.attempt == attempt:
                self._runs[job_id] = handle
                report.adopted.append(job_id)
            elif state == S.STARTING and not deferred:
                self._guarded(job_id, report, lambda s, row, out: self._launch(s, row, now, out))
                continue
            self._guarded(job_id, report, lambda s, row, out: self._observe(s, row, now, out))
        # a resize whose run stopped while no server watched: relaunch it at its new size now
        # (`step` launches what it resizes; nothing later would launch these)
        for job_id in report.resized:
            self._guarded(job_id, report, lambda s, row, out: self._launch(s, row, now, out))
        return report

    def _adopt_strays(self, active: set[str]) -> None:
        """Re-attach to the live runs of jobs that no longer need them (the next sweep stops
        them; meanwhile the executor's ledger counts their devices as taken)."""
        for job_id in self.executor.known_jobs():
            if job_id in active or job_id in self._runs:
                continue
            handle = self.executor.adopt(job_id)
            if handle is not None and not self.executor.poll(handle).settled:
                self._runs[job_id] = handle

    # ---- helpers -----------------------------------------------------------------------

    @property
    def _local(self) -> str | None:
        """This machine's node name for the local executor (None: the executor's nodes)."""
        return self.node_name if self.executor.name == "local" else None

    @staticmethod
    def _attempt(row: Job) -> int:
        return max(0, row.attempt - 1)

    def _watched(self) -> list[str]:
        left = or_(Job.restart_count < Job.max_restarts, Job.recover_first.is_(True))
        retrying = and_(Job.state == S.FAILED, left, Job.failed_for_good.is_(False))
        with self.session_factory() as s:
            query = select(Job.id).where(or_(Job.state.in_(_ACTIVE), retrying)).order_by(Job.id)
            return list(s.scalars(query))

    def _handle(self, job_id: str, attempt: int) -> RunHandle | None:
        handle = self._runs.get(job_id)
        if handle is None or handle.attempt != attempt:
            handle = self.executor.adopt(job_id, attempt)
            if handle is not None:
                self._runs[job_id] = handle
        return handle

    def _guarded(
        self, job_id: str, report: StepReport, work: Callable[[Session, Job, _Out], None]
    ) -> None:
        """`work` on one job in its own transaction; a concurrent change skips the job."""
        out: _Out = []
        with self.session_factory() as s:
            row = s.get(Job, job_id)
            if row is None:
                return
            try:
                work(s, row, out)
                s.commit()
            except (StaleDataError, IllegalTransition) as error:
                s.rollback()
                report.errors.append(f"{job_id}: {error}")
                return
        report._merge(out)

    def _live(self, job_id: str) -> bool:
        """Whether the run of `job_id` still has processes: asked by the scheduling round of
        a job with a run whose state holds no devices (cancelled after the sweep too)."""
        handle = self._runs.get(job_id)
        return handle is not None and not self.executor.poll(handle).settled

    def _sweep(self, report: StepReport, now: float) -> None:
        """Stop the runs of jobs that no longer need them; forget settled runs of such jobs
        (billed until they stopped). Those still stopping hold their devices in the
        scheduling round (`_live`)."""
        if not self._runs:
            return
        with self.session_factory() as s:
            states = {
                job_id: S(state)
                for job_id, state in s.execute(
                    select(Job.id, Job.state).where(Job.id.in_(list(self._runs)))
                )
            }
        for job_id, handle in list(self._runs.items()):
            state = states.get(job_id)
            if state in _KEEP_RUN:
                continue
            status = self.executor.poll(handle)
            if not status.settled:
                out: _Out = []
                status = self._stop(handle, f"job is {state or 'gone'}", job_id, out)
                report._merge(out)
            if status.settled:
                del self._runs[job_id]
                with self.session_factory() as s:
                    self._billed_to_stop(s, handle, status, now)
                    s.commit()

    def _observe(self, s: Session, row: Job, now: float, out: _Out) -> None:
        state = S(row.state)
        handle = self._handle(row.id, self._attempt(row))
        if state == S.STARTING:
            if handle is None:
                return  # not launched yet (waiting for evicted jobs to stop)
            self._to_running(s, row, handle, now, out, "started")
            state = S.RUNNING
        if state == S.RUNNING:
            if handle is None:
                self._fail(s, row, None, now, out)
                return
            ended = self._settled(s, row, handle, now, out)
            if ended is not None:
                self._ended(s, row, ended, now, out)
        elif state == S.PREEMPTED:
            if handle is not None:
                status = self.executor.poll(handle)
                if not status.settled:
                    status = self._stop(handle, "preempted", row.id, out)
                if not status.settled:
                    return  # still stopping: it holds its devices until then
                self._billed_to_stop(s, handle, status, now)
            transition(s, row, S.PENDING, reason="preempted: run stopped", now=now,
                       retry=self.retry)  # fmt: skip
            out.append(("requeued", row.id))
        elif state == S.RESIZING:  # stop the run (notice "resize"), then relaunch at the new size
            if handle is not None:
                status = self.executor.poll(handle)
                if status.settled and jobdirs.stop_record(handle.run_dir) is None:
                    self._ended(s, row, status, now, out)  # it ended before the resize
                    return
                if not status.settled:
                    status = self._stop(handle, "resize", row.id, out)
                if not status.settled:
                    return  # still stopping: it holds its old and new devices until then
                self._billed_to_stop(s, handle, status, now)
            if elastic.relaunch(s, row, now):
                out.append(("resized", row.id))
        elif state == S.FAILED:
            self._requeue(s, row, handle, now, out)

    def _billed_to_stop(self, s: Session, handle: RunHandle, status: RunStatus, now: float) -> None:
        """A run stopped on request (cancel, preemption, resize) is billed to its stop
        (`usage.extend_to_stop`); one that ended by itself was billed to its end."""
        if jobdirs.stop_record(handle.run_dir) is None:
            return
        end = min(now, status.ended_at if status.ended_at is not None else now)
        usage.extend_to_stop(s, handle.job_id, handle.attempt, end, self.executor.grace_s + 30)

    def _stop(self, handle: RunHandle, reason: str, job_id: str, out: _Out) -> RunStatus:
        """Ask the run to stop (again: idempotent); reported as stopped the first time only."""
        if jobdirs.stop_record(handle.run_dir) is None:
            out.append(("stopped", job_id))
        return self.executor.request_stop(handle, reason=reason)

    def _lost_work(self, node: str, now: float) -> Callable[[Session, Job, _Out], None]:
        return lambda s, row, out: self._node_lost(s, row, node, now, out)

    def _node_lost(self, s: Session, row: Job, node: str, now: float, out: _Out) -> None:
        """A RUNNING job on a LOST node: its run is stopped everywhere, and it fails as the
        infrastructure's failure (requeued first, at no cost, once the run has stopped)."""
        if row.state != S.RUNNING:
            return
        handle = self._handle(row.id, self._attempt(row))
        if handle is not None:
            self.executor.request_stop(handle, reason="node lost")
        why = f"node {node} lost"
        self._fail(s, row, RunStatus("failed", {}, None, False, why, infra=True), now, out)

    def _settled(
        self, s: Session, row: Job, handle: RunHandle, now: float, out: _Out
    ) -> RunStatus | None:
        """A RUNNING job's run once it ended and no process of it is left, else None (the job
        holds its devices until then). A run past its time limit, or with no progress for
        `progress_timeout_s`, is stopped and ends failed however it exits (`recovery`)."""
        status = self.executor.poll(handle)
        hung = self._hung.get(row.id, "")
        if not hung and status.state != "running":  # (a stop recorded makes it not running)
            hung = recovery.hung_stop(handle.run_dir)  # sent by an earlier server
        if not hung and status.state == "running":
            hung = recovery.over_time(row, now)
            if self._hung_check and not hung:
                hung = recovery.stalled(s, row, now, self.progress_timeout_s)
            if not hung:
                return None
            self._hung[row.id] = hung
            status = self.executor.request_stop(handle, reason=hung)
            out.append(("stopped", row.id))
        if not status.settled:
            return None
        self._hung.pop(row.id, None)
        return recovery.stopped_for(status, hung) if hung else status

    def _ended(self, s: Session, row: Job, status: RunStatus, now: float, out: _Out) -> None:
        """A run that ended by itself: SUCCEEDED when every rank exited 0, else FAILED; at
        the time its last rank ended, when that is known (it may have ended while no server
        watched: its GPU time is counted to then)."""
        if status.ended_at is not None and row.state_changed_at <= status.ended_at < now:
            now = status.ended_at
        if status.state == "succeeded":
            transition(s, row, S.SUCCEEDED, reason="all ranks exited with code 0",
                       now=now, details={"exit_code": 0, "message": status.reason})  # fmt: skip
            out.append(("succeeded", row.id))
            return
        self._fail(s, row, status, now, out)

    def _to_running(
        self, s: Session, row: Job, handle: RunHandle, now: float, out: _Out, kind: str
    ) -> None:
        details = {"attempt": handle.attempt, "pids": handle.pids, "notes": list(handle.notes)}
        transition(s, row, S.RUNNING, reason="launched", now=now, details=details)
        out.append((kind, row.id))

    def _fail(self, s: Session, row: Job, status: RunStatus | None, now: float, out: _Out) -> None:
        """RUNNING (or STARTING) -> FAILED, then requeued once the run has stopped: at no
        cost when the infrastructure failed it (`RunStatus.infra`, a run lost)."""
        reason, details = recovery.failure(row, status, self._attempt(row))
        reason = recovery.gpu_fault(s, row, reason, details)
        if row.state == S.RUNNING:
            details["healthy"] = recovery.progressed(s, row, self._attempt(row))
        transition(s, row, S.FAILED, reason=reason[:64], now=now, details=details)
        out.append(("failed", row.id))
        row.failed_for_good = status is not None and status.final  # nor would a restart
        self._requeue(s, row, self._runs.get(row.id), now, out)

    def _requeue(
        self, s: Session, row: Job, handle: RunHandle | None, now: float, out: _Out
    ) -> None:
        """FAILED -> PENDING once no process of the run is left: at the front of its queue,
        without back-off or cost after an infrastructure failure (`recover_first` is set
        on such a FAILED job), else using a restart, with back-off for repeated failures."""
        infra = bool(row.recover_first)
        if row.failed_for_good or (not infra and restarts_left(row) == 0):
            return
        if handle is not None and not self.executor.poll(handle).settled:
            return
        reason = "requeued: infrastructure failure" if infra else "restart after failure"
        transition(s, row, S.PENDING, reason=reason, now=now, retry=self.retry,
                   details={"infra": infra})  # fmt: skip
        out.append(("requeued", row.id))

    def _launch(self, s: Session, row: Job, now: float, out: _Out) -> None:
        if row.state != S.STARTING:
            self._blocked.pop(row.id, None)
            return
        attempt = self._attempt(row)
        handle = self._handle(row.id, attempt)  # launched before a crash: do not launch twice
        if handle is None:
            token = launching.job_token(s, row, attempt, now)
            launching.fence_tokens(s, row, attempt, now)
            s.commit()  # the executor's call may block (Ray): no database lock held meanwhile
            try:
                spec = launching.launch_spec(row, attempt, token, self._local, self.virtual)
                handle = self.executor.launch(spec)
            except DeviceBusy as busy:
                launching.drop_token(s, row, attempt)
                launching.refused(s, row, busy, self._blocked, self.metrics)
                out.append(("blocked", row.id))
                return
            except NodeGone as gone:  # a node left since the decision: requeued at no cost
                if gone.node:  # no new work there for GONE_HOLD_S (Ray may still list it)
                    self._gone[gone.node] = now + GONE_HOLD_S
                transition(s, row, S.FAILED, reason="launch failed: node gone", now=now,
                           details={"message": str(gone), "infra": True})  # fmt: skip
                out.append(("failed", row.id))
                self._requeue(s, row, None, now, out)
                return
            except (ValueError, OSError) as error:  # JobSpecError is a ValueError
                message = f"launch failed: {error}"
                transition(s, row, S.FAILED, reason="launch failed", now=now,
                           details={"message": message})  # fmt: skip
                out.append(("failed", row.id))
                return
            self._runs[row.id] = handle
        self._blocked.pop(row.id, None)
        self._to_running(s, row, handle, now, out, "launched")
