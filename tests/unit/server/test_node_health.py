"""Node health on both databases: a GPU fault found by the checks (a stand-in NVML: this
machine has no GPU) drains its node with the fault as the reason and evicts the jobs there;
undrain takes the GPU back and a fault still there drains it again; the local executor's
heartbeats make a stale local node LOST and bring the server's own node back; every node
change is in the audit trail."""

from __future__ import annotations

import time

import pytest
from server_factories import World, read_job
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from fake_nvml import FakeNvml
from trainyard.exec.base import NodeInfo
from trainyard.exec.fake import FakeExecutor
from trainyard.exec.gpuhealth import GpuHealth, GpuProblem
from trainyard.server.db import Health, JobEvent, JobState, Node, make_session_factory
from trainyard.server.db.audit import AuditEvent
from trainyard.server.loop import membership
from trainyard.server.loop.platform import Platform
from trainyard.server.services import nodes as node_service

S = JobState


def _node(name: str, alive: bool = True) -> NodeInfo:
    return NodeInfo(name, "10.0.0.1", 16.0, 64.0, 4, "H100", 80.0, False, alive, ())


@pytest.fixture
def factory(engine: Engine, world: World) -> sessionmaker[Session]:
    return make_session_factory(engine)


def _events(factory: sessionmaker[Session], action: str) -> list[AuditEvent]:
    with factory() as s:
        return list(s.scalars(select(AuditEvent).where(AuditEvent.action == action)))


def _row(factory: sessionmaker[Session], name: str) -> tuple[Node, list[Health]]:
    with factory() as s:
        row = s.scalars(select(Node).where(Node.name == name)).one()
        return row, [d.health for d in row.devices]


def test_a_gpu_fault_drains_its_node_and_the_job_there_moves(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    fake = FakeExecutor()
    fake.set_nodes([_node("n1"), _node("n2")])
    nvml = FakeNvml(count=4)
    health = GpuHealth(nvml)
    assert health.start() == ""
    platform = Platform(factory, fake, nodes_every_s=0, gpu_health=health)
    platform.nodes.node_name = "n1"  # the GPUs NVML sees are n1's
    spec = {"name": "a", "command": ["python", "train.py"], "gpus": 4, "workers": 4}
    job_id = world.job(session, now=time.time(), gpus=4, spec=spec).id
    session.commit()
    platform.step()
    placed = [str(p["node"]) for p in read_job(factory, job_id).placement or ()]
    assert read_job(factory, job_id).state in (S.STARTING, S.RUNNING)
    nvml.ecc[2] = 1
    platform.nodes.check_gpus(time.time(), force=True)
    row, healths = _row(factory, "n1")
    assert row.drained_at is not None and not row.schedulable
    assert row.drain_reason == "GPU 2: 1 uncorrectable ECC error (volatile)"
    assert healths == [Health.HEALTHY, Health.HEALTHY, Health.UNHEALTHY, Health.HEALTHY]
    (event,) = _events(factory, "node.gpu_fault")
    assert event.actor == "trainyard" and event.target == "n1"
    assert event.details["problems"] == [[2, "ecc", "1 uncorrectable ECC error (volatile)"]]
    # known already: no second entry
    platform.nodes.check_gpus(time.time(), force=True)
    assert len(_events(factory, "node.gpu_fault")) == 1
    if placed == ["n1"]:  # the job on the faulty node is evicted and runs on n2, at no cost
        for _ in range(3):
            platform.step()
        job = read_job(factory, job_id)
        assert [str(p["node"]) for p in job.placement or ()] == ["n2"]
        assert job.state in (S.STARTING, S.RUNNING) and job.restart_count == 0
        with factory() as s:
            events = s.scalars(select(JobEvent).where(JobEvent.job_id == job_id)).all()
            assert any(e.reason == "node n1 drained" for e in events)
    with factory() as s:  # the operator puts it back: the fault is still there
        info = node_service.set_schedulable(s, "n1", True)
        s.commit()
    assert info.drain_reason is None and info.unhealthy_gpus == ()
    platform.nodes.check_gpus(time.time(), force=True)
    row, healths = _row(factory, "n1")
    assert row.drained_at is not None and healths[2] == Health.UNHEALTHY
    nvml.ecc[2] = 0
    with factory() as s:
        node_service.set_schedulable(s, "n1", True)
        s.commit()
    platform.nodes.check_gpus(time.time(), force=True)
    row, healths = _row(factory, "n1")
    assert row.schedulable and row.drained_at is None and set(healths) == {Health.HEALTHY}


def test_a_critical_xid_drains_the_node_and_an_application_xid_does_not(
    factory: sessionmaker[Session], world: World
) -> None:
    fake = FakeExecutor()
    fake.set_nodes([_node("n1")])
    nvml = FakeNvml(count=2)
    health = GpuHealth(nvml)
    assert health.start() == ""
    platform = Platform(factory, fake, nodes_every_s=0, gpu_health=health)
    platform.step()
    platform.nodes.node_name = "n1"
    nvml.queue.append((1, 79))  # fell off the bus
    platform.nodes.check_gpus(time.time(), force=True)
    row, healths = _row(factory, "n1")
    assert row.drain_reason == "GPU 1: XID 79 (GPU has fallen off the bus)"
    assert healths == [Health.HEALTHY, Health.UNHEALTHY, Health.HEALTHY, Health.HEALTHY]
    nvml.queue.append((0, 43))  # the application's fault: not the GPU's
    platform.nodes.check_gpus(time.time(), force=True)
    assert _row(factory, "n1")[1][0] == Health.HEALTHY


def test_local_heartbeats_lose_a_stale_node_and_bring_the_servers_own_back(
    factory: sessionmaker[Session], world: World
) -> None:
    now = time.time()
    with factory() as s:
        s.add(Node(name="here", registered_at=now - 3600, last_heartbeat_at=now - 3600,
                   health=Health.LOST))  # fmt: skip
        s.add(Node(name="gone", registered_at=now - 3600, last_heartbeat_at=now - 60))
        s.add(Node(name="fresh", registered_at=now, last_heartbeat_at=now - 5))
        s.add(Node(name="on-ray", executor="ray", registered_at=now - 3600))
        s.commit()
    with factory() as s:
        changes = membership.beat_local(s, "here", now)
        s.commit()
    assert changes.back == ["here"] and changes.lost == ["gone"]
    healths = {}
    with factory() as s:
        for row in s.scalars(select(Node)):
            healths[row.name] = row.health
            if row.name == "here":
                assert row.last_heartbeat_at == pytest.approx(now)
    assert healths == {"here": Health.HEALTHY, "gone": Health.LOST, "fresh": Health.HEALTHY,
                       "on-ray": Health.HEALTHY}  # fmt: skip
    (lost,) = _events(factory, "node.lost")
    assert lost.target == "gone" and "no heartbeat from its server for 60 s" in lost.details["why"]
    assert [e.target for e in _events(factory, "node.back")] == ["here"]


def test_node_changes_from_an_executor_are_in_the_audit_trail(
    factory: sessionmaker[Session], world: World
) -> None:
    fake = FakeExecutor()
    fake.set_nodes([_node("n1"), _node("n2")])
    platform = Platform(factory, fake, nodes_every_s=0)
    platform.step()
    fake.set_nodes([_node("n1"), _node("n2", alive=False)])
    platform.step()
    fake.set_nodes([_node("n1"), _node("n2")])
    platform.step()
    assert sorted(e.target for e in _events(factory, "node.joined")) == ["n1", "n2"]
    assert [e.target for e in _events(factory, "node.lost")] == ["n2"]
    assert [e.target for e in _events(factory, "node.back")] == ["n2"]
    assert _events(factory, "node.back")[0].details == {"why": "fake reports it alive again"}


def test_faults_an_executor_finds_on_its_nodes_drain_those_nodes(
    factory: sessionmaker[Session], world: World
) -> None:
    fake = FakeExecutor()
    fake.set_nodes([_node("n1"), _node("n2")])
    platform = Platform(factory, fake, nodes_every_s=0)
    platform.step()
    fake.faults["n2"] = [GpuProblem(0, "lost", "NVML reports the GPU lost")]
    reason = platform.nodes.check_gpus(time.time(), force=True)
    assert reason == "n2: GPU 0: NVML reports the GPU lost"
    assert _row(factory, "n1")[0].drained_at is None
    row, healths = _row(factory, "n2")
    assert row.drain_reason == "GPU 0: NVML reports the GPU lost"
    assert healths[0] == Health.UNHEALTHY
    assert platform.nodes.check_gpus(time.time(), force=True) == ""  # known already


def test_a_job_that_fails_on_a_faulty_gpu_costs_no_restart(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    fake = FakeExecutor()
    fake.set_nodes([_node("n1")])
    platform = Platform(factory, fake, nodes_every_s=0)
    spec = {"name": "a", "command": ["python", "train.py"], "gpus": 4, "workers": 4}
    job_id = world.job(session, now=time.time(), gpus=4, spec=spec, max_restarts=0).id
    session.commit()
    platform.step()
    assert read_job(factory, job_id).state in (S.STARTING, S.RUNNING)
    fake.faults["n1"] = [GpuProblem(3, "xid", "XID 79 (GPU has fallen off the bus)")]
    platform.nodes.check_gpus(time.time(), force=True)
    fake.finish(job_id, {0: 1, 1: -15, 2: -15, 3: -15})  # the crash the fault caused
    platform.step()
    job = read_job(factory, job_id)
    assert job.state == S.PENDING and job.restart_count == 0 and job.recover_first
    with factory() as s:
        failed = s.scalars(
            select(JobEvent).where(JobEvent.job_id == job_id, JobEvent.to_state == S.FAILED)
        ).one()
    assert failed.reason == "GPU fault on node n1" and failed.details["infra"] is True
    assert "GPU 3: XID 79" in failed.details["message"]
