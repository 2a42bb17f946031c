"""The scheduling loop's database side on both databases: snapshot loading, placements,
pending reasons, preemption, back-off, the optimistic lock and the gauges."""

from __future__ import annotations

import pytest
from server_factories import World, mark_running
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from trainyard import core
from trainyard.server.db import Device, Health, Job, JobEvent, JobState, Node, make_session_factory
from trainyard.server.lifecycle import transition
from trainyard.server.loop.scheduling import (
    load_snapshot,
    ready_to_launch,
    run_once,
    split_reason,
    write_decision,
)
from trainyard.server.metrics import platform_metrics

S = JobState
NOW = 2000.0


def _cluster(session: Session, nodes: int = 2, gpus: int = 4) -> None:
    for n in range(nodes):
        node = Node(name=f"n{n}", cpus=64.0, memory_gb=512.0, registered_at=1000.0)
        node.devices = [
            Device(index=i, gpu_type="A100", memory_gb=80.0, uuid=f"GPU-{n}-{i}")
            for i in range(gpus)
        ]
        session.add(node)
    session.commit()


@pytest.fixture
def factory(engine: Engine, session: Session, world: World) -> sessionmaker[Session]:
    _cluster(session)
    return make_session_factory(engine)


def _fresh(factory: sessionmaker[Session], job_id: str) -> Job:
    with factory() as s:
        job = s.get(Job, job_id)
        assert job is not None
        s.expunge(job)
        return job


def _events(factory: sessionmaker[Session], job_id: str) -> list[tuple[S | None, S, str]]:
    with factory() as s:
        rows = s.scalars(select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.id))
        return [(e.from_state, e.to_state, e.reason) for e in rows]


def _submit(session: Session, world: World, **fields: object) -> str:
    job = world.job(session, now=1500.0, **fields)
    session.commit()
    return job.id


def test_snapshot_reflects_the_database(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    with factory() as s:
        node = s.scalars(select(Node).where(Node.name == "n1")).one()
        node.devices[2].health = Health.UNHEALTHY
        node.virtual = True
        s.commit()
    a = _submit(session, world, gpus=2, priority=3, gpu_types=["A100"], expected_duration=60.0)
    late = _submit(session, world, gpus=1)
    with factory() as s:
        row = s.get(Job, late)
        assert row is not None
        row.next_retry_at = NOW + 10
        s.commit()
    with factory() as s:
        snap = load_snapshot(s, NOW)
    assert [(n.name, n.gpus, n.gpu_type, n.unavailable, n.virtual) for n in snap.nodes] == [
        ("n0", 4, "A100", (), False),
        ("n1", 4, "A100", (2,), True),
    ]
    queues = {q.name: q for q in snap.queues}
    assert queues["research"] == core.Queue("research", "root", 8, 16, 2.0, 0.0)
    assert [j.id for j in snap.pending] == [a]
    job = snap.pending[0]
    assert (job.gpus, job.priority, job.gpu_types, job.expected_duration, job.queue) == (
        2, 3, ("A100",), 60.0, "research",
    )  # fmt: skip
    assert job.submit_time == 1500.0
    core.validate(snap)


def test_a_gang_is_placed_on_one_node(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    job_id = _submit(session, world, gpus=4)
    applied = run_once(factory, now=NOW, metrics=platform_metrics())
    assert not applied.retry and not applied.stop
    assert [launch.job_id for launch in applied.launch] == [job_id]
    (nd,) = applied.launch[0].placement
    assert sorted(nd.devices) == [0, 1, 2, 3]
    job = _fresh(factory, job_id)
    assert job.state is S.STARTING
    assert job.placement == [{"node": nd.node, "devices": list(nd.devices)}]
    assert job.pending_reason is None
    assert _events(factory, job_id)[-1] == (S.PENDING, S.STARTING, "scheduled")
    # The next round sees the devices taken and changes nothing.
    again = run_once(factory, now=NOW + 1, metrics=platform_metrics())
    assert not again.launch and not again.stop and not again.retry
    with factory() as s:
        snap = load_snapshot(s, NOW + 1)
    assert [r.job.id for r in snap.running] == [job_id]
    assert snap.running[0].job.preemptible is False  # STARTING: cannot be evicted yet


def test_a_job_too_big_stays_pending_with_the_reason(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    big = _submit(session, world, gpus=16)
    applied = run_once(factory, now=NOW, metrics=platform_metrics())
    assert not applied.launch and applied.pending == 1
    assert applied.decision is not None
    reason = applied.decision.pending[big]
    job = _fresh(factory, big)
    assert job.state is S.PENDING
    assert split_reason(job.pending_reason) == (reason.code, reason.message)
    assert reason.message
    assert job.estimated_start == reason.estimated_start
    assert _events(factory, big) == [(None, S.PENDING, "submitted")]


def test_priority_preemption_evicts_and_tells_the_executor(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    low = [_submit(session, world, gpus=4, priority=0) for _ in range(2)]
    first = run_once(factory, "priority", now=NOW, metrics=platform_metrics())
    assert sorted(x.job_id for x in first.launch) == sorted(low)
    for job_id in low:
        mark_running(factory, job_id, NOW + 1)
    high = _submit(session, world, gpus=4, priority=10)
    applied = run_once(factory, "priority", now=NOW + 100, metrics=platform_metrics())
    assert not applied.retry
    assert len(applied.stop) == 1 and applied.stop[0] in low
    victim = applied.stop[0]
    assert not applied.launch
    assert [(d.job_id, d.after_evictions) for d in applied.deferred] == [(high, (victim,))]
    v = _fresh(factory, victim)
    assert v.state is S.PREEMPTED
    assert v.attained_service == pytest.approx(4 * 99.0)
    assert _events(factory, victim)[-1][:2] == (S.RUNNING, S.PREEMPTED)
    h = _fresh(factory, high)
    assert h.state is S.STARTING and h.placement == v.placement
    assert h.pending_reason is not None and victim in h.pending_reason
    # While the victim stops, nothing more happens and the job is not launchable yet.
    again = run_once(factory, "priority", now=NOW + 101, metrics=platform_metrics())
    assert not again.stop and not again.launch and not again.retry
    with factory() as s:
        assert ready_to_launch(s) == []
        victim_row = s.get(Job, victim)
        assert victim_row is not None
        transition(s, victim_row, S.PENDING, reason="stopped", now=NOW + 110)
        s.commit()
    with factory() as s:
        ready = ready_to_launch(s)
    assert [(x.job_id, x.after_evictions) for x in ready] == [(high, (victim,))]
    # The victim waits, with a reason, for the cluster held by higher or equal work.
    last = run_once(factory, "priority", now=NOW + 111, metrics=platform_metrics())
    assert not last.launch and not last.stop
    assert _fresh(factory, victim).pending_reason


def test_back_off_delays_scheduling(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    job_id = _submit(session, world, gpus=1)
    with factory() as s:
        row = s.get(Job, job_id)
        assert row is not None
        row.next_retry_at = NOW + 50
        s.commit()
    early = run_once(factory, now=NOW, metrics=platform_metrics())
    assert not early.launch
    assert _fresh(factory, job_id).state is S.PENDING
    on_time = run_once(factory, now=NOW + 50, metrics=platform_metrics())
    assert [x.job_id for x in on_time.launch] == [job_id]
    assert _fresh(factory, job_id).state is S.STARTING


def test_a_concurrent_change_makes_apply_retry_and_write_nothing(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    placed = _submit(session, world, gpus=4)
    big = _submit(session, world, gpus=16)
    with factory() as s:
        snap = load_snapshot(s, NOW)
        decision = core.run_cycle(snap, "default")
        assert [p.job_id for p in decision.placements] == [placed]
        with factory() as other:  # an API cancel lands between load and apply
            row = other.get(Job, placed)
            assert row is not None
            transition(other, row, S.CANCELLED, reason="cancelled", now=NOW)
            other.commit()
        applied = write_decision(s, decision, NOW)
    assert applied.retry and applied.error
    assert not applied.launch and not applied.stop
    job = _fresh(factory, placed)
    assert job.state is S.CANCELLED and job.placement is None
    assert _fresh(factory, big).pending_reason is None
    assert [e[1] for e in _events(factory, placed)] == [S.PENDING, S.CANCELLED]
    # A fresh round succeeds.
    assert not run_once(factory, now=NOW + 1, metrics=platform_metrics()).retry
    assert _fresh(factory, big).pending_reason


def test_gauges_and_latency_are_updated(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    placed = _submit(session, world, gpus=4)
    _submit(session, world, gpus=16)
    metrics = platform_metrics()
    run_once(factory, now=NOW, metrics=metrics)
    assert metrics.cycle_seconds.count() == 1
    assert metrics.queue_pending.value(queue="research") == 1
    assert metrics.queue_pending.value(queue="root") == 0
    assert metrics.jobs.value(state="STARTING") == 1
    assert metrics.jobs.value(state="PENDING") == 1
    assert metrics.gpus.value(state="allocated", type="A100") == 4
    assert metrics.gpus.value(state="free", type="A100") == 4
    mark_running(factory, placed, NOW + 1)
    run_once(factory, now=NOW + 2, metrics=metrics)
    assert metrics.cycle_seconds.count() == 2
    assert metrics.queue_running.value(queue="research") == 1
    assert metrics.jobs.value(state="RUNNING") == 1
    assert b"trainyard_gpus" in metrics.render()[0]


def test_unhealthy_node_keeps_its_jobs_but_gets_no_new_work(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    first = _submit(session, world, gpus=4)
    placed = run_once(factory, now=NOW, metrics=platform_metrics())
    node_name = placed.launch[0].placement[0].node
    mark_running(factory, first, NOW + 1)
    with factory() as s:
        node = s.scalars(select(Node).where(Node.name == node_name)).one()
        node.health = Health.UNHEALTHY
        s.commit()
    second = _submit(session, world, gpus=1)
    third = _submit(session, world, gpus=5)
    applied = run_once(factory, now=NOW + 10, metrics=platform_metrics())
    assert [x.job_id for x in applied.launch] == [second]
    assert applied.launch[0].placement[0].node != node_name
    assert _fresh(factory, third).state is S.PENDING
    with factory() as s:
        snap = load_snapshot(s, NOW + 20)
    by_name = {n.name: n for n in snap.nodes}
    assert by_name[node_name].schedulable is False
    running = {r.job.id: r for r in snap.running}
    assert running[first].job.preemptible is True
    assert running[first].job.attained_service == pytest.approx(4 * 19.0)


def test_split_reason_reads_back_what_is_stored() -> None:
    assert split_reason("capacity: needs 16 GPUs") == ("capacity", "needs 16 GPUs")
    assert split_reason("restart 1 of 3 after lost: waiting") == (
        "",
        "restart 1 of 3 after lost: waiting",
    )
    assert split_reason(None) == ("", "")


def test_a_cycle_of_queue_parents_in_the_database_does_not_stop_the_rounds(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    """A tree stored before queue changes took a lock (an outside review stored one with two
    crossed `queue set --parent`): the core refuses such a snapshot, so every round failed
    and nothing anywhere started. Those queues are now scheduled as roots."""
    from trainyard.server.db import Queue
    from trainyard.server.loop.cluster_rows import in_cycles

    qa = Queue(name="qa", created_at=1000.0)
    qb = Queue(name="qb", parent=qa, created_at=1000.0)
    session.add_all([qa, qb])
    session.flush()
    qa.parent_id = qb.id  # qa -> qb -> qa
    session.commit()
    elsewhere = _submit(session, world, gpus=2)
    cycled = world.job(session, now=1500.0, gpus=2)
    cycled.queue_id = qa.id
    session.commit()
    applied = run_once(factory, now=NOW, metrics=platform_metrics())
    assert not applied.retry
    assert {launch.job_id for launch in applied.launch} == {elsewhere, cycled.id}
    with factory() as s:
        queues = {q.name: q.parent for q in load_snapshot(s, NOW + 1).queues}
    assert queues["qa"] is None and queues["qb"] is None and queues["research"] == "root"
    assert in_cycles({1: 2, 2: 3, 3: 2, 4: None, 5: 4}) == {2, 3}  # 1 only leads into it


def test_nodes_of_two_executors_with_paths_of_different_depths_are_scheduled(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    """A home first run on Ray (nodes with a two-level topology path) and then on this machine
    alone (a node with none): the core refused every snapshot (outside review 10), so nothing
    started again. The shorter path gets domains of the node's own."""
    from trainyard.server.loop.cluster_rows import padded

    with factory() as s:
        n0 = s.scalars(select(Node).where(Node.name == "n0")).one()
        n0.topology_path = ["rack-a", "host-0"]
        s.commit()
    job_id = _submit(session, world, gpus=4)
    applied = run_once(factory, now=NOW, metrics=platform_metrics())
    assert not applied.retry and [launch.job_id for launch in applied.launch] == [job_id]
    with factory() as s:
        snap = load_snapshot(s, NOW + 1)
    assert [n.path for n in snap.nodes] == [("rack-a", "host-0"), ("~n1", "~n1")]
    core.validate(snap)
    assert padded(("rack-a",), 3, "x") == ("rack-a", "~x", "~x")
    assert padded(("a", "b"), 2, "x") == ("a", "b")
