"""Job intake: validating submissions and storing them with group commit.

A submission is validated in the request (`prepare`: the spec, the queue, the caller's right
to submit; a ``model:`` spec is planned: `plan`) and becomes two plain rows
(`lifecycle.submission_rows`). The rows go to one writer thread that stores whatever has
accumulated in ONE transaction (bulk inserts) and answers every request of the batch only
after that commit: the answer still means "stored durably", but a burst of N submissions
costs one commit instead of N. If a batch fails (a queue deleted meanwhile, say), its
submissions are retried one by one, so only the culprit fails. `QueueDirectory` caches each
tenant's queue names for a few seconds (an unknown name re-reads them before it is refused).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.orm import Session, sessionmaker

from trainyard.jobspec import JobSpec, JobSpecError, Limits, resolve
from trainyard.server import lifecycle
from trainyard.server.api.auth import Principal
from trainyard.server.api.errors import ApiError
from trainyard.server.db.audit import AuditEvent
from trainyard.server.db.base import new_id
from trainyard.server.db.cluster import Queue
from trainyard.server.db.jobs import Job, JobEvent
from trainyard.server.metrics import PLATFORM
from trainyard.server.services import audit
from trainyard.server.services.admission import Admission
from trainyard.server.services.jobs import read_spec, spec_error, submittable_by

log = logging.getLogger(__name__)
MAX_BATCH = 1000


class QueueDirectory:
    """Each tenant's submittable queues (shared ones and its own), name -> id, cached; and
    every queue's priority limit (`priority_limit`: the lowest `max_priority` of the queue and
    its ancestors, with the queue that sets it)."""

    def __init__(self, sessions: sessionmaker[Session], ttl_s: float = 5.0) -> None:
        self.sessions = sessions
        self.ttl_s = ttl_s
        self._cache: dict[int, tuple[float, dict[str, int]]] = {}
        self._limits: dict[str, tuple[int, str]] = {}
        self._defaults: dict[str, int] = {}
        self._guaranteed: dict[str, tuple[int, str]] = {}  # see `guaranteed`
        self._lock = threading.Lock()

    def cached(self, tenant_id: int) -> dict[str, int] | None:
        with self._lock:
            hit = self._cache.get(tenant_id)
        return hit[1] if hit is not None and time.monotonic() - hit[0] < self.ttl_s else None

    def load(self, tenant_id: int) -> dict[str, int]:
        """Read the tenant's queues (and every priority limit) from the database."""
        with self.sessions() as s:
            rows = s.execute(select(Queue.name, Queue.id).where(submittable_by(tenant_id)))
            names = {name: queue_id for name, queue_id in rows}
            columns = (
                Queue.id, Queue.name, Queue.parent_id, Queue.max_priority, Queue.default_priority,
                Queue.guaranteed,
            )  # fmt: skip
            tree = list(s.execute(select(*columns)))
        limits, defaults = _priority_rules(tree)
        with self._lock:
            self._cache[tenant_id] = (time.monotonic(), names)
            self._limits = limits
            self._defaults = defaults
            self._guaranteed = _guarantees(tree)
        return names

    def guaranteed(self, queue: str) -> tuple[int, str] | None:
        """The most GPUs a job of `queue` can ever hold within guarantees: the smallest
        `guaranteed` of the queue and its ancestors, with the queue that sets it (what a
        job that may not be preempted must fit in: the core's quota rule)."""
        with self._lock:
            return self._guaranteed.get(queue)

    def priority_limit(self, queue: str) -> tuple[int, str] | None:
        with self._lock:
            return self._limits.get(queue)

    def default_priority(self, queue: str) -> int | None:
        """The queue's default priority, or its nearest ancestor's (None: none set)."""
        with self._lock:
            return self._defaults.get(queue)


def _guarantees(tree: list[Any]) -> dict[str, tuple[int, str]]:
    """Per queue: the smallest `guaranteed` on its path to the root, and whose it is."""
    by_id = {row.id: row for row in tree}
    out: dict[str, tuple[int, str]] = {}
    for row in tree:
        node, seen, least = row, set(), (int(row.guaranteed), str(row.name))
        while node is not None and node.id not in seen:
            seen.add(node.id)
            least = min(least, (int(node.guaranteed), str(node.name)))
            node = by_id.get(node.parent_id)
        out[str(row.name)] = least
    return out


def _priority_rules(tree: list[Any]) -> tuple[dict[str, tuple[int, str]], dict[str, int]]:
    """Per queue: the lowest `max_priority` of it and its ancestors (with the queue setting
    it), and the nearest `default_priority`; one walk up the tree from each queue."""
    by_id = {row.id: row for row in tree}
    limits: dict[str, tuple[int, str]] = {}
    defaults: dict[str, int] = {}
    for row in tree:
        node, seen = row, set()
        while node is not None and node.id not in seen:
            seen.add(node.id)
            top = node.max_priority
            if top is not None and (row.name not in limits or top < limits[row.name][0]):
                limits[row.name] = (top, node.name)
            if node.default_priority is not None and row.name not in defaults:
                defaults[row.name] = node.default_priority
            node = by_id.get(node.parent_id)
    return limits, defaults


def check_priority(spec: JobSpec, limit: tuple[int, str] | None) -> None:
    """Refuse (422 on `priority`) a job asking for more than its queue allows."""
    if limit is None or spec.priority <= limit[0]:
        return
    top, owner = limit
    where = f"queue {spec.queue!r}" + (f" (set on {owner!r})" if owner != spec.queue else "")
    raise ApiError(
        422,
        f"{spec.priority} is above the highest priority {where} allows, {top}; ask for at "
        f"most {top}, or ask an admin to raise it (trainyard admin queue set {owner} "
        "--max-priority N)",
        field="priority",
    )


@dataclass
class Prepared:
    """A validated submission: its rows, ready to store."""

    job: dict[str, Any]
    event: dict[str, Any]
    audit: dict[str, Any] | None = None  # its audit-trail entry (services/audit.py)
    # the other members of a job array (rows and events), stored in the same transaction
    members: list[tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=list)

    @property
    def job_id(self) -> str:
        return str(self.job["id"])

    @property
    def array_id(self) -> str | None:
        return self.job.get("array_id")

    @property
    def job_ids(self) -> list[str]:
        """Every job stored: the job, or an array's members in index order."""
        return [self.job_id, *(str(row["id"]) for row, _event in self.members)]

    def all_rows(self) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        return [(self.job, self.event), *self.members]


def prepare(
    who: Principal,
    body: bytes,
    content_type: str,
    *,
    limits: Limits,
    queues: dict[str, int],
    now: float,
    admission: Admission | None = None,
    directory: QueueDirectory | None = None,
) -> Prepared:
    """Validate a submission against `queues` (raises `ApiError`; 422 on field `queue` for a
    name not among them) and the site's `admission` rules."""
    who.require_write("submit jobs")
    spec = read_spec(body, content_type, limits=limits, queues=list(queues))
    if spec.model is not None:
        spec = plan(spec, limits)
    if directory is not None:
        default = directory.default_priority(spec.queue)
        if default is not None and not spec.priority_given:
            spec = dataclasses.replace(spec, priority=default, priority_given=True)
        check_priority(spec, directory.priority_limit(spec.queue))
        if not spec.preemptible and not spec.wait_for_capacity:
            _check_guaranteed(spec, directory.guaranteed(spec.queue))
    if admission is not None:
        admission.check(spec)
        size = len(spec.array.indexes) if spec.array is not None else 1
        admission.check_room(who.tenant_id, who.tenant_name, size)
    return _rows(who, spec, queues[spec.queue], now)


def _check_guaranteed(spec: JobSpec, room: tuple[int, str] | None) -> None:
    """A job that may not be preempted runs only within its queues' guarantees (it could
    never be reclaimed): refuse one that can never fit, naming `preemptible` (an outside
    review saw one accepted into a queue guaranteeing nothing, to wait for ever)."""
    if room is None or spec.gpus is None or spec.gpus <= room[0]:
        return
    gpus, queue = room
    raise ApiError(
        422, f"a job that may not be preempted must fit in its queue's guarantee, and queue "
        f"{queue} guarantees {gpus} GPUs; the job asks {spec.gpus}: make it preemptible "
        "(preemptible: true), or submit it to a queue that guarantees enough "
        "(wait_for_capacity: true keeps it waiting for a guarantee to grow)",
        field="preemptible",
    )  # fmt: skip


def plan(spec: JobSpec, limits: Limits) -> JobSpec:
    """A ``model:`` spec resolved by the planner: the GPU count (when not given), workers and
    nodes, and the plan's variables in the job's environment (`jobspec.resolve_plan`)."""
    if isinstance(spec.model, str) and spec.model.lower().endswith((".yaml", ".yml")):
        raise ApiError(
            422,
            "the server does not read model files; give a preset name or the model's fields "
            "inline (`trainyard submit` inlines a model file next to the spec)",
            field="model",
        )
    try:
        return resolve(spec, limits=limits)
    except JobSpecError as error:
        raise spec_error(error) from None


def _rows(who: Principal, spec: JobSpec, queue_id: int, now: float) -> Prepared:
    assert spec.gpus is not None
    array = spec.array
    array_id = new_id("a") if array is not None else None
    job = {
        "id": new_id("j"),
        "tenant_id": who.tenant_id,
        "user_id": who.user_id,
        "queue_id": queue_id,
        "name": spec.name,
        "spec": spec.to_dict(),
        "gpus": spec.gpus,
        "gpu_types": [spec.gpu_type] if spec.gpu_type else [],
        "gpu_memory_gb": spec.gpu_memory_gb or 0.0,
        "cpus": spec.cpus or 0.0,
        "memory_gb": spec.memory_gb or 0.0,
        "priority": spec.priority,
        "preemptible": spec.preemptible,
        "min_runtime": spec.min_runtime_s,
        "expected_duration": spec.expected_duration_s,
        "topology": spec.core_topology,
        "nodes": spec.core_nodes,
        "min_gpus": spec.elastic.min_gpus if spec.elastic is not None else None,
        "max_gpus": spec.elastic.max_gpus if spec.elastic is not None else None,
        "max_restarts": spec.max_restarts,
        "next_retry_at": None,
        "started_at": None,
        "finished_at": None,
        "placement": None,
        "pending_reason": None,
        "estimated_start": None,
        "exit_code": None,
        "exit_message": None,
        "after": [d.to_dict() for d in spec.after] or None,
        "array_id": array_id,
        "array_index": array.indexes[0] if array is not None else None,
        "array_limit": array.limit if array is not None else None,
    }
    reason = f"submitted by {who.user_name}"[:64]
    row, event = lifecycle.submission_rows(job, now=now, reason=reason)
    details: dict[str, Any] = {"queue": spec.queue, "gpus": spec.gpus, "priority": spec.priority}
    if array is not None:
        details.update(array=array.text, jobs=len(array.indexes))
    entry = audit.row(
        actor=who.user_name, user_id=who.user_id, tenant_id=who.tenant_id, action="job.submit",
        target=array_id or str(job["id"]), now=now, details=details,
    )  # fmt: skip
    prepared = Prepared(row, event, entry)
    for k, index in enumerate(array.indexes[1:] if array is not None else (), start=1):
        member = {**job, "id": new_id("j"), "array_index": index}
        # a microsecond apart: members keep their index order in the queue (submit time, id)
        at = now + k * 1e-6
        prepared.members.append(lifecycle.submission_rows(member, now=at, reason=reason))
    return prepared


@dataclass
class _Item:
    prepared: Prepared
    done: Callable[[BaseException | None], None]
    error: BaseException | None = field(default=None)


class Intake:
    """The group-commit writer (see the module docstring). `store` blocks a thread;
    `store_async` awaits from the event loop."""

    def __init__(self, sessions: sessionmaker[Session], max_batch: int = MAX_BATCH) -> None:
        self.sessions = sessions
        self.max_batch = max_batch
        self.batches = 0
        self._items: queue.Queue[_Item | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def _ensure_started(self) -> None:
        if self._thread is None:
            with self._start_lock:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="trainyard-intake", daemon=True
                    )
                    self._thread.start()

    async def store_async(self, prepared: Prepared) -> None:
        self._ensure_started()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()

        def done(error: BaseException | None) -> None:
            loop.call_soon_threadsafe(_settle, future, error)

        self._items.put(_Item(prepared, done))
        await future

    def store(self, prepared: Prepared) -> None:
        self._ensure_started()
        finished = threading.Event()
        outcome: list[BaseException | None] = []

        def done(error: BaseException | None) -> None:
            outcome.append(error)
            finished.set()

        self._items.put(_Item(prepared, done))
        finished.wait()
        if outcome[0] is not None:
            raise outcome[0]

    def close(self) -> None:
        if self._thread is not None:
            self._items.put(None)
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            first = self._items.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < self.max_batch:
                try:
                    item = self._items.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._items.put(None)  # stop after this batch
                    break
                batch.append(item)
            self._write(batch)

    def _write(self, batch: list[_Item]) -> None:
        try:
            self._insert(batch)
        except Exception:  # the database refused the batch (or failed): never the thread's end
            if len(batch) == 1:
                batch[0].error = _storage_error(batch[0])
            else:  # find the culprit(s): one transaction per submission
                for item in batch:
                    try:
                        self._insert([item])
                    except Exception:
                        item.error = _storage_error(item)
        self.batches += 1
        for item in batch:
            if item.error is None:
                PLATFORM.submissions.inc(outcome="accepted")
            with contextlib.suppress(Exception):
                item.done(item.error)

    def _insert(self, batch: list[_Item]) -> None:
        with self.sessions() as s:
            rows = [pair for item in batch for pair in item.prepared.all_rows()]
            s.execute(insert(Job), [job for job, _event in rows])
            s.execute(insert(JobEvent), [event for _job, event in rows])
            entries = [item.prepared.audit for item in batch if item.prepared.audit]
            if entries:
                s.execute(insert(AuditEvent), entries)
            s.commit()


def _storage_error(item: _Item) -> ApiError:
    log.exception("storing job %s failed", item.prepared.job_id)
    return ApiError(
        409,
        "the job could not be stored (its queue or user changed meanwhile, or the database "
        "refused it); submit it again",
        field=None,
    )


def _settle(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


__all__ = ["Intake", "Prepared", "QueueDirectory", "prepare"]
