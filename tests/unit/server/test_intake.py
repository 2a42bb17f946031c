"""Job intake on SQLite and PostgreSQL: `prepare`, the group-commit `Intake` (threads and
asyncio, culprits of a failing batch) and the cached `QueueDirectory`, also through the API."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from typing import cast

import pytest
from api_fixtures import ApiWorld, api
from server_factories import World
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session, sessionmaker

from trainyard.jobspec import Limits
from trainyard.server.api.auth import Principal
from trainyard.server.api.errors import ApiError
from trainyard.server.db import Job, JobEvent, JobState, Queue, Role, Tenant, make_session_factory
from trainyard.server.services.intake import Intake, Prepared, QueueDirectory, prepare

__all__ = ["api"]  # the fixture, imported for pytest

NOW = 5000.0
WAIT_S = 60.0


def _who(world: World, role: Role = Role.MEMBER) -> Principal:
    return Principal(
        user_id=world.user.id,
        user_name=world.user.name,
        tenant_id=world.tenant.id,
        tenant_name=world.tenant.name,
        role=role,
    )


def _spec(name: str, queue: str = "research", gpus: int = 1) -> bytes:
    return json.dumps(
        {"name": name, "queue": queue, "command": ["python", "train.py"], "gpus": gpus}
    ).encode()


def _prepared(
    world: World, directory: QueueDirectory, name: str, queue: str = "research"
) -> Prepared:
    queues = directory.load(world.tenant.id)
    return prepare(
        _who(world), _spec(name, queue), "application/json", limits=Limits(), queues=queues,
        now=NOW,
    )  # fmt: skip


class Gate:
    """A session factory whose first use (the writer storing a first, lone submission) waits
    until `expected` more submissions are queued, so the next batch holds all of them."""

    def __init__(self, factory: sessionmaker[Session], expected: int) -> None:
        self.factory = factory
        self.expected = expected
        self.intake: Intake | None = None
        self.entered = threading.Event()
        self.reached = threading.Event()

    def __call__(self) -> Session:
        if not self.entered.is_set():
            self.entered.set()
            assert self.intake is not None
            for _ in range(int(WAIT_S * 100)):
                if self.intake._items.qsize() >= self.expected:
                    self.reached.set()
                    break
                threading.Event().wait(0.01)
        return self.factory()


def _gated_intake(engine: Engine, expected: int) -> tuple[Intake, Gate]:
    gate = Gate(make_session_factory(engine), expected)
    intake = Intake(cast(sessionmaker[Session], gate))
    gate.intake = intake
    return intake, gate


def _store_in_one_batch(
    intake: Intake, gate: Gate, blocker: Prepared, items: list[Prepared]
) -> dict[str, BaseException | None]:
    """Store `blocker` alone, then `items` from threads while the writer is held in `gate`:
    they queue up and are written as one batch. The outcome of each item, by job id."""
    first = threading.Thread(target=intake.store, args=(blocker,))
    first.start()
    assert gate.entered.wait(WAIT_S)
    outcomes = _store_from_threads(intake.store, items)
    first.join(WAIT_S)
    assert gate.reached.is_set()
    return outcomes


def _store_from_threads(
    store: Callable[[Prepared], None], items: list[Prepared]
) -> dict[str, BaseException | None]:
    """Store every item from its own thread; the outcome of each, by job id."""
    outcomes: dict[str, BaseException | None] = {}
    lock = threading.Lock()

    def one(item: Prepared) -> None:
        try:
            store(item)
            error: BaseException | None = None
        except BaseException as exc:
            error = exc
        with lock:
            outcomes[item.job_id] = error

    threads = [threading.Thread(target=one, args=(item,)) for item in items]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
        assert not t.is_alive(), "a submission never got its answer"
    return outcomes


def _stored(engine: Engine) -> tuple[dict[str, JobState], dict[str, list[JobState]]]:
    with make_session_factory(engine)() as s:
        jobs = {j.id: JobState(j.state) for j in s.scalars(select(Job))}
        events: dict[str, list[JobState]] = {}
        for e in s.scalars(select(JobEvent).order_by(JobEvent.id)):
            events.setdefault(e.job_id, []).append(JobState(e.to_state))
    return jobs, events


def test_prepare_validates_and_builds_rows(session: Session, world: World, engine: Engine) -> None:
    directory = QueueDirectory(make_session_factory(engine))
    item = _prepared(world, directory, "one")
    assert item.job["queue_id"] == world.queue.id and item.job["tenant_id"] == world.tenant.id
    assert item.job["state"] is JobState.PENDING and item.job["version"] == 1
    assert item.event["job_id"] == item.job_id and item.event["reason"] == "submitted by ada"
    queues = directory.load(world.tenant.id)
    with pytest.raises(ApiError) as unknown:
        prepare(_who(world), _spec("x", "nope"), "application/json", limits=Limits(),
                queues=queues, now=NOW)  # fmt: skip
    assert unknown.value.status == 422 and unknown.value.field == "queue"
    with pytest.raises(ApiError) as viewer:
        prepare(_who(world, Role.VIEWER), _spec("x"), "application/json", limits=Limits(),
                queues=queues, now=NOW)  # fmt: skip
    assert viewer.value.status == 403


def test_concurrent_submissions_are_stored_once_in_few_batches(
    engine: Engine, session: Session, world: World
) -> None:
    n = 40
    directory = QueueDirectory(make_session_factory(engine))
    items = [_prepared(world, directory, f"job-{i}") for i in range(n + 1)]
    intake, gate = _gated_intake(engine, expected=n)
    try:
        outcomes = _store_in_one_batch(intake, gate, items[0], items[1:])
    finally:
        intake.close()
    assert outcomes == {item.job_id: None for item in items[1:]}
    assert intake.batches == 2 < n  # the blocker alone, then the whole burst in one
    jobs, events = _stored(engine)
    assert jobs == {item.job_id: JobState.PENDING for item in items}
    assert events == {item.job_id: [JobState.PENDING] for item in items}


def test_ungated_burst_from_threads_is_stored_exactly_once(
    engine: Engine, session: Session, world: World
) -> None:
    n = 30
    directory = QueueDirectory(make_session_factory(engine))
    items = [_prepared(world, directory, f"burst-{i}") for i in range(n)]
    intake = Intake(make_session_factory(engine), max_batch=7)
    try:
        outcomes = _store_from_threads(intake.store, items)
    finally:
        intake.close()
    assert outcomes == {item.job_id: None for item in items}
    jobs, events = _stored(engine)
    assert set(jobs) == {item.job_id for item in items}
    assert all(events[job_id] == [JobState.PENDING] for job_id in jobs)
    assert n / 7 <= intake.batches <= n  # max_batch bounds a batch


@pytest.mark.parametrize("culprit", ["deleted_queue", "missing_user"])
def test_a_failing_batch_fails_only_its_culprit(
    engine: Engine, session: Session, world: World, culprit: str
) -> None:
    doomed = Queue(name="doomed", tenant=world.tenant, parent=world.root, created_at=NOW)
    session.add(doomed)
    session.commit()
    directory = QueueDirectory(make_session_factory(engine))
    good = [_prepared(world, directory, f"good-{i}") for i in range(4)]
    if culprit == "deleted_queue":
        bad = _prepared(world, directory, "bad", queue="doomed")
        session.delete(doomed)  # deleted after the request validated the name
        session.commit()
    else:
        bad = _prepared(world, directory, "bad")
        bad.job["user_id"] = 987_654  # no such user: a foreign key the database enforces
    items = [good[1], bad, good[2], good[3]]
    intake, gate = _gated_intake(engine, expected=len(items))
    try:
        outcomes = _store_in_one_batch(intake, gate, good[0], items)
    finally:
        intake.close()
    assert intake.batches == 2  # the blocker, then one batch retried item by item
    failure = outcomes.pop(bad.job_id)
    assert isinstance(failure, ApiError) and failure.status == 409
    assert outcomes == {item.job_id: None for item in good[1:]}
    jobs, events = _stored(engine)
    assert set(jobs) == {item.job_id for item in good}
    assert set(events) == set(jobs)


def test_store_async_from_an_event_loop(engine: Engine, session: Session, world: World) -> None:
    directory = QueueDirectory(make_session_factory(engine))
    items = [_prepared(world, directory, f"async-{i}") for i in range(12)]
    bad = _prepared(world, directory, "bad")
    bad.job["queue_id"] = 424_242
    intake = Intake(make_session_factory(engine))

    async def main() -> list[BaseException | None]:
        results = await asyncio.wait_for(
            asyncio.gather(*(intake.store_async(p) for p in [*items, bad]), return_exceptions=True),
            WAIT_S,
        )
        return [r if isinstance(r, BaseException) else None for r in results]

    try:
        results = asyncio.run(main())
    finally:
        intake.close()
    assert results[:-1] == [None] * len(items)
    assert isinstance(results[-1], ApiError) and results[-1].status == 409
    assert 1 <= intake.batches <= len(items) + 1
    jobs, events = _stored(engine)
    assert set(jobs) == {p.job_id for p in items}
    assert all(events[j] == [JobState.PENDING] for j in jobs)


def test_close_ends_the_writer_thread(engine: Engine, session: Session, world: World) -> None:
    intake = Intake(make_session_factory(engine))
    intake.close()  # never started: nothing to stop
    intake.store(_prepared(world, QueueDirectory(make_session_factory(engine)), "one"))
    writer = intake._thread
    assert writer is not None and writer.is_alive()
    intake.close()
    assert not writer.is_alive()


def test_queue_directory_caches_per_tenant(engine: Engine, session: Session, world: World) -> None:
    other = Tenant(name="globex", created_at=NOW)
    session.add_all([
        other,
        Queue(name="sales", tenant=other, parent=world.root, created_at=NOW),
        Queue(name="shared", created_at=NOW),
    ])  # fmt: skip
    session.commit()
    directory = QueueDirectory(make_session_factory(engine), ttl_s=3600.0)
    assert directory.cached(world.tenant.id) is None
    names = directory.load(world.tenant.id)
    assert set(names) == {"root", "research", "shared"}
    assert names["research"] == world.queue.id
    assert set(directory.load(other.id)) == {"root", "sales", "shared"}
    session.add(Queue(name="new", tenant=world.tenant, parent=world.root, created_at=NOW))
    session.commit()
    cached = directory.cached(world.tenant.id)
    assert cached is not None and "new" not in cached  # served from the cache
    assert "new" in directory.load(world.tenant.id)
    assert "new" in (directory.cached(world.tenant.id) or {})
    expired = QueueDirectory(make_session_factory(engine), ttl_s=0.0)
    expired.load(world.tenant.id)
    assert expired.cached(world.tenant.id) is None


def test_a_queue_created_after_a_submit_is_accepted_at_once(api: ApiWorld) -> None:
    spec: dict[str, object] = {"name": "a", "queue": "research", "command": ["x"], "gpus": 1}
    first = api.client.post("/v1/jobs", json=spec, headers=api.auth("ada"))
    assert first.status_code == 201, first.text  # the queue names are now cached
    with make_session_factory(api.engine)() as s:
        acme = s.scalars(select(Tenant).where(Tenant.name == "acme")).one()
        root = s.scalars(select(Queue).where(Queue.name == "root")).one()
        s.add(Queue(name="fresh", tenant=acme, parent=root, created_at=1.0))
        s.commit()
    second = api.client.post("/v1/jobs", json={**spec, "queue": "fresh"}, headers=api.auth("ada"))
    assert second.status_code == 201, second.text
    unknown = api.client.post("/v1/jobs", json={**spec, "queue": "nope"}, headers=api.auth("ada"))
    assert unknown.status_code == 422 and unknown.json()["error"]["field"] == "queue"
    foreign = api.client.post("/v1/jobs", json={**spec, "queue": "sales"}, headers=api.auth("ada"))
    assert foreign.status_code == 422 and foreign.json()["error"]["field"] == "queue"
    with make_session_factory(api.engine)() as s:
        queue_names = s.execute(
            select(Queue.name, func.count(Job.id))
            .join(Job, Job.queue_id == Queue.id)
            .group_by(Queue.name)
        ).all()
    assert dict(queue_names) == {"research": 1, "fresh": 1}
