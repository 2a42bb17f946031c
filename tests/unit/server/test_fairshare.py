"""Fair-share history reaches the core's DRF (issue 14, acceptance 4), on both databases: a
queue whose jobs used the cluster heavily in the past yields to a light one, the history
decays with its half-life, and a parent's usage includes its children's."""

from __future__ import annotations

import pytest
from server_factories import World
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from trainyard.server.db import (
    Device,
    Job,
    JobState,
    Node,
    Queue,
    UsageRecord,
    make_session_factory,
)
from trainyard.server.loop.fairshare import FairShare
from trainyard.server.loop.scheduling import run_once
from trainyard.server.metrics import platform_metrics

NOW = 100_000.0
DAY = 86_400.0


@pytest.fixture
def factory(engine: Engine, session: Session, world: World) -> sessionmaker[Session]:
    node = Node(name="n0", cpus=64.0, memory_gb=512.0, registered_at=1000.0)
    node.devices = [Device(index=i, gpu_type="A100", memory_gb=80.0) for i in range(4)]
    light = Queue(name="light", tenant=world.tenant, parent=world.root, created_at=1000.0)
    session.add_all([node, light])
    world.queue.guaranteed, world.queue.limit = 0, None  # DRF decides, no guarantee
    session.commit()
    return make_session_factory(engine)


def _history(session: Session, world: World, gpus: int, start: float, end: float) -> None:
    session.add(
        UsageRecord(job_id="j-past", tenant_id=world.tenant.id, user_id=world.user.id,
                    queue_id=world.queue.id, attempt=0, started_at=start, ended_at=end,
                    gpus=gpus, cpus=0.0, memory_gb=0.0, outcome="SUCCEEDED")
    )  # fmt: skip
    session.commit()


def _race(factory: sessionmaker[Session], session: Session, world: World) -> str:
    """A 4-GPU job in each queue (the heavy one's submitted first): which one starts."""
    heavy = world.job(session, now=NOW - 100, gpus=4)
    light_queue = session.query(Queue).filter_by(name="light").one()
    light = Job(tenant=world.tenant, user=world.user, queue=light_queue, gpus=4, max_restarts=0)
    from trainyard.server.lifecycle import submit

    submit(session, light, now=NOW - 50)
    session.commit()
    run_once(factory, now=NOW, metrics=platform_metrics(), fairshare=FairShare(DAY))
    with factory() as s:
        started = [j for j in s.query(Job).all() if j.state is JobState.STARTING]
    assert len(started) == 1
    return "heavy" if started[0].id == heavy.id else "light"


def test_without_history_the_older_job_starts(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    assert _race(factory, session, world) == "heavy"


def test_a_heavy_past_user_yields_to_a_light_one(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    _history(session, world, gpus=4, start=NOW - 2 * DAY, end=NOW - 1000)  # two busy days
    assert _race(factory, session, world) == "light"


def test_old_history_has_decayed_away(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    _history(session, world, gpus=4, start=NOW - 90 * DAY, end=NOW - 60 * DAY)  # long ago
    assert _race(factory, session, world) == "heavy"


def test_shares_decay_and_include_descendants(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    _history(session, world, gpus=4, start=NOW - DAY, end=NOW)  # the whole cluster, a day
    fair = FairShare(DAY, refresh_s=0)
    shares = fair.shares(session, NOW, total_gpus=4)
    assert shares[world.queue.id] == pytest.approx(0.5)  # half of all the decayed capacity
    assert shares[world.root.id] == shares[world.queue.id]  # the parent includes its child
    later = fair.shares(session, NOW + DAY, total_gpus=4)
    assert later[world.queue.id] == pytest.approx(0.25)  # one half-life later


def test_the_round_keeps_the_shares_on_the_queue_rows(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    _history(session, world, gpus=4, start=NOW - DAY, end=NOW)
    run_once(factory, now=NOW, metrics=platform_metrics(), fairshare=FairShare(DAY))
    with factory() as s:
        usage = {q.name: q.usage for q in s.query(Queue).all()}
    assert usage["research"] == pytest.approx(0.5, abs=1e-6)
    assert usage["root"] == pytest.approx(0.5, abs=1e-6) and usage["light"] == 0.0
