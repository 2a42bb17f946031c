"""The platform's recovery rules with an in-memory executor (`exec/fake.py`), on both
databases: a node lost costs no restart and puts the job first in line; the job's own
failure restarts at once the first time and with back-off after; a launch on a node that
left is requeued at no cost; nodes join, leave and come back in the database."""

from __future__ import annotations

import time

import pytest
from server_factories import World, read_job
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from trainyard.exec.base import NodeInfo
from trainyard.exec.fake import FakeExecutor
from trainyard.server.db import Health, JobState, Node, make_session_factory
from trainyard.server.lifecycle import RetryPolicy
from trainyard.server.loop.platform import GONE_HOLD_S, Platform

S = JobState


def _node(name: str, alive: bool = True) -> NodeInfo:
    return NodeInfo(name, "10.0.0.1", 16.0, 64.0, 4, "H100", 80.0, False, alive, ("r1",))


@pytest.fixture
def factory(engine: Engine, world: World) -> sessionmaker[Session]:
    return make_session_factory(engine)


@pytest.fixture
def fake() -> FakeExecutor:
    ex = FakeExecutor()
    ex.set_nodes([_node("n1"), _node("n2")])
    return ex


@pytest.fixture
def platform(factory: sessionmaker[Session], fake: FakeExecutor) -> Platform:
    return Platform(factory, fake, retry=RetryPolicy(base_s=30.0, cap_s=60.0), nodes_every_s=0)


def _job(session: Session, world: World, name: str, max_restarts: int = 0) -> str:
    spec = {"name": name, "command": ["python", "train.py"], "gpus": 4, "workers": 4}
    job = world.job(session, now=time.time(), gpus=4, spec=spec, max_restarts=max_restarts)
    session.commit()
    return job.id


def _nodes_of(factory: sessionmaker[Session], job_id: str) -> list[str]:
    return [str(e["node"]) for e in read_job(factory, job_id).placement or ()]


def test_a_job_of_two_nodes_runs_one_rank_on_each_of_two_nodes(
    platform: Platform, fake: FakeExecutor, factory: sessionmaker[Session], session: Session,
    world: World,
) -> None:  # fmt: skip
    # issue 11, item 5: the core used to pack `nodes: 2, gpus: 2` onto one node (one host)
    spec = {"name": "two", "command": ["python", "t.py"], "gpus": 2, "workers": 1, "nodes": 2}
    job = world.job(session, now=time.time(), gpus=2, spec=spec, nodes=2, max_restarts=0)
    session.commit()
    platform.step()
    assert read_job(factory, job.id).state in (S.STARTING, S.RUNNING)
    assert sorted(_nodes_of(factory, job.id)) == ["n1", "n2"]
    (launch,) = fake.launched
    assert sorted((h.node, len(h.devices), h.workers) for h in launch.hosts) == [
        ("n1", 1, 1), ("n2", 1, 1),
    ]  # fmt: skip


def test_nodes_join_leave_and_come_back(
    platform: Platform, fake: FakeExecutor, factory: sessionmaker[Session]
) -> None:
    platform.step()
    with factory() as s:
        rows = {n.name: n for n in s.scalars(select(Node))}
        assert sorted(rows) == ["n1", "n2"] and rows["n1"].executor == "fake"
        assert [d.gpu_type for d in rows["n1"].devices] == ["H100"] * 4
        assert rows["n1"].topology_path == ["r1"]
    fake.set_nodes([_node("n1"), _node("n2", alive=False)])
    platform.step()
    with factory() as s:
        assert s.scalars(select(Node).where(Node.name == "n2")).one().health == Health.LOST
    fake.set_nodes([_node("n1"), _node("n2")])
    platform.step()
    with factory() as s:
        assert s.scalars(select(Node).where(Node.name == "n2")).one().health == Health.HEALTHY


def test_a_lost_node_costs_no_restart_and_the_job_goes_first(
    platform: Platform, fake: FakeExecutor, factory: sessionmaker[Session], session: Session,
    world: World,
) -> None:  # fmt: skip
    a = _job(session, world, "a")
    platform.step()
    c = _job(session, world, "c")
    platform.step()
    assert {_nodes_of(factory, a)[0], _nodes_of(factory, c)[0]} == {"n1", "n2"}
    b = _job(session, world, "b")  # waits: the cluster is full
    platform.step()
    assert read_job(factory, b).state == S.PENDING
    lost = _nodes_of(factory, c)[0]
    fake.set_nodes([_node(n, alive=n != lost) for n in ("n1", "n2")])
    fake.lose(c)
    platform.step()
    job = read_job(factory, c)
    assert job.state == S.PENDING and job.restart_count == 0 and job.recover_first
    assert job.next_retry_at is None  # max_restarts is 0: it was not its fault
    fake.finish(a, {i: 0 for i in range(4)})
    platform.step()
    platform.step()
    # c lost its place through no fault of its own: it runs before b, submitted earlier
    assert read_job(factory, c).state in (S.STARTING, S.RUNNING)
    assert read_job(factory, b).state == S.PENDING
    assert lost not in _nodes_of(factory, c)


def test_its_own_failure_restarts_at_once_then_with_back_off(
    platform: Platform, fake: FakeExecutor, factory: sessionmaker[Session], session: Session,
    world: World,
) -> None:  # fmt: skip
    job_id = _job(session, world, "f", max_restarts=3)
    platform.step()
    fake.finish(job_id, {0: 1, 1: -15, 2: -15, 3: -15})
    platform.step()
    job = read_job(factory, job_id)
    assert job.state in (S.STARTING, S.RUNNING) and job.restart_count == 1  # at once
    fake.finish(job_id, {0: 1, 1: -15, 2: -15, 3: -15})
    platform.step()
    job = read_job(factory, job_id)
    assert job.state == S.PENDING and job.failure_streak == 2
    assert job.next_retry_at is not None and job.next_retry_at - time.time() > 25


def test_a_launch_on_a_node_that_left_is_requeued_at_no_cost(
    platform: Platform, fake: FakeExecutor, factory: sessionmaker[Session], session: Session,
    world: World,
) -> None:  # fmt: skip
    fake.gone = {"n1", "n2"}
    job_id = _job(session, world, "g")
    platform.step()
    job = read_job(factory, job_id)
    assert job.state == S.PENDING and job.restart_count == 0 and job.recover_first
    assert not fake.launched
    fake.gone = set()
    platform.step()
    assert read_job(factory, job_id).state in (S.STARTING, S.RUNNING)
    assert len(fake.launched) == 1


def test_a_node_a_launch_found_gone_gets_no_work_while_its_loss_is_not_yet_reported(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    """Outside review 6 (L3): Ray may still list a dead node as alive for a second or two;
    each round placed the requeued job there again, each try an attempt number. The node
    now takes no new work for `GONE_HOLD_S` after a launch found it gone, and the reason
    says why; then it is used again (it may have been a passing fault)."""
    fake = FakeExecutor()
    fake.set_nodes([_node("n1")])
    platform = Platform(factory, fake, nodes_every_s=0)
    t0 = time.time()
    fake.gone = {"n1"}  # dead, though the executor's node list still says alive
    job_id = _job(session, world, "g")
    platform.step(now=t0)
    assert read_job(factory, job_id).state == S.PENDING
    platform.step(now=t0 + 1)
    platform.step(now=t0 + 2)
    job = read_job(factory, job_id)
    assert job.state == S.PENDING and job.attempt == 1  # not placed there again
    assert "n1 (4 GPUs) is unreachable" in (job.pending_reason or "")
    fake.gone = set()
    platform.step(now=t0 + GONE_HOLD_S + 1)
    assert read_job(factory, job_id).state in (S.STARTING, S.RUNNING)
    assert read_job(factory, job_id).attempt == 2


def _stored_spares(factory: sessionmaker[Session]) -> list[str]:
    from trainyard.server.services.nodes import list_nodes

    with factory() as s:
        return [n.name for n in list_nodes(s) if n.state == "spare"]


def test_a_hot_spare_takes_the_job_a_lost_node_held_and_nothing_else(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    fake = FakeExecutor()
    fake.set_nodes([_node("n1"), _node("n2"), _node("n3")])
    platform = Platform(factory, fake, nodes_every_s=0, spares=1)
    a = _job(session, world, "a")
    platform.step()
    c = _job(session, world, "c")
    platform.step()
    b = _job(session, world, "b")  # n3 is idle, but the spare: b waits
    platform.step()
    assert sorted(_nodes_of(factory, a) + _nodes_of(factory, c)) == ["n1", "n2"]
    assert platform.spares.names == ("n3",)
    assert _stored_spares(factory) == ["n3"]  # for `trainyard nodes` and `admin node list`
    job = read_job(factory, b)
    assert job.state == S.PENDING and "hot spares (n3)" in (job.pending_reason or "")
    lost = _nodes_of(factory, c)[0]
    fake.set_nodes([_node(n, alive=n != lost) for n in ("n1", "n2", "n3")])
    fake.lose(c)
    platform.step()
    platform.step()
    # c restarts at once on the spare, ahead of b, which still waits
    assert read_job(factory, c).state in (S.STARTING, S.RUNNING)
    assert _nodes_of(factory, c) == ["n3"]
    assert read_job(factory, b).state == S.PENDING
    assert platform.spares.names == ()  # no node is idle now
    assert _stored_spares(factory) == []


def test_trainyard_nodes_marks_a_spare() -> None:
    from trainyard.cli.cluster import _schedulable

    node = {"schedulable": True, "health": "healthy"}
    assert _schedulable(node) == "yes"
    assert _schedulable({**node, "spare": True}) == "spare (kept for recovering jobs)"
    assert _schedulable({**node, "spare": True, "schedulable": False}) == "no"
    assert _schedulable({**node, "spare": True, "health": "lost"}) == "no (lost)"
