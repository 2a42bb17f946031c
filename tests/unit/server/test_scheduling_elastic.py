"""Elastic jobs on the platform's scheduling loop, on both databases: the size range reaches
the core from the database, a job starts at a size in its range when its asked size does not
fit, the size it runs at is stored and shown, and a running job grows into idle GPUs: it goes
RESIZING, holding its old and new devices until its run has stopped (issue 15)."""

from __future__ import annotations

import pytest
from server_factories import World, mark_running
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from trainyard.cli.jobs import render_job
from trainyard.jobspec import parse_job_spec
from trainyard.server.api.auth import Principal
from trainyard.server.db import Device, Job, JobEvent, JobState, Node, make_session_factory
from trainyard.server.db.base import Role
from trainyard.server.lifecycle import transition
from trainyard.server.loop.scheduling import load_snapshot, run_once
from trainyard.server.metrics import platform_metrics
from trainyard.server.services.jobs import describe_job

S = JobState
NOW = 2000.0


@pytest.fixture
def factory(engine: Engine, session: Session, world: World) -> sessionmaker[Session]:
    node = Node(name="n0", cpus=64.0, memory_gb=512.0, registered_at=1000.0)
    node.devices = [
        Device(index=i, gpu_type="A100", memory_gb=80.0, uuid=f"GPU-0-{i}") for i in range(4)
    ]
    session.add(node)
    session.commit()
    return make_session_factory(engine)


def _elastic(session: Session, world: World, gpus: int, low: int, high: int) -> str:
    raw = {
        "name": "el",
        "command": ["python", "train.py"],
        "gpus": gpus,
        "workers": gpus,
        "elastic": {"min_gpus": low, "max_gpus": high},
    }
    spec = parse_job_spec(raw)
    job = world.job(
        session, now=1600.0, gpus=gpus, spec=spec.to_dict(), topology=spec.core_topology,
        min_gpus=low, max_gpus=high,
    )  # fmt: skip
    session.commit()
    return job.id


def _running_beside_rigid(
    factory: sessionmaker[Session], session: Session, world: World, rigid_gpus: int, gpus: int
) -> tuple[str, str]:
    """A rigid job of `rigid_gpus` on the 4-GPU node, then an elastic one (1 to 4, asking
    `gpus`) started on what is left; both RUNNING. Their ids."""
    rigid = world.job(session, now=1500.0, gpus=rigid_gpus, topology="node")
    session.commit()
    run_once(factory, now=NOW, metrics=platform_metrics())
    mark_running(factory, rigid.id, NOW + 1)
    job_id = _elastic(session, world, gpus=gpus, low=1, high=4)
    run_once(factory, now=NOW + 2, metrics=platform_metrics())
    mark_running(factory, job_id, NOW + 3)
    return rigid.id, job_id


def test_an_elastic_job_starts_at_a_size_in_its_range_and_keeps_it(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    rigid = world.job(session, now=1500.0, gpus=3, topology="node")
    session.commit()
    first = run_once(factory, now=NOW, metrics=platform_metrics())
    assert [launch.job_id for launch in first.launch] == [rigid.id]
    mark_running(factory, rigid.id, NOW + 1)

    job_id = _elastic(session, world, gpus=4, low=1, high=4)
    with factory() as s:
        (pending,) = load_snapshot(s, NOW + 2).pending
    assert (pending.gpus, pending.min_gpus, pending.max_gpus) == (4, 1, 4)

    applied = run_once(factory, now=NOW + 2, metrics=platform_metrics())
    (launch,) = applied.launch
    assert launch.job_id == job_id
    assert sum(len(nd.devices) for nd in launch.placement) == 1  # the one free GPU
    with factory() as s:
        job = s.get(Job, job_id)
        assert job is not None and job.state is S.STARTING and job.gpus == 1
        event = s.scalars(
            select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.id.desc())
        ).first()
        assert event is not None and event.details["gpus"] == {"asked": 4, "started": 1}
    mark_running(factory, job_id, NOW + 3)

    # The rigid job ends: its GPUs are idle and the running elastic job is given to the core
    # with its range, which grows it into them.
    with factory() as s:
        row = s.get(Job, rigid.id)
        assert row is not None
        transition(s, row, S.SUCCEEDED, reason="done", now=NOW + 10)
        s.commit()
    with factory() as s:
        snap = load_snapshot(s, NOW + 4000)
    (running,) = snap.running
    assert running.job.gpus == 1 and running.job.is_elastic
    assert (running.job.min_gpus, running.job.max_gpus) == (1, 4)
    later = run_once(factory, now=NOW + 4000, metrics=platform_metrics())
    assert later.decision is not None
    (resize,) = later.decision.resizes
    assert resize.job_id == job_id and later.resize == (job_id,)
    assert not later.launch and not later.stop
    with factory() as s:
        job = s.get(Job, job_id)
        assert job is not None and job.state is S.RESIZING
        grown = sum(len(e["devices"]) for e in job.resize_to or [])
        assert grown > 1
        held = {d for e in job.placement or [] for d in e["devices"]}
        assert held >= {d for e in job.resize_to or [] for d in e["devices"]}  # the union
        event = s.scalars(
            select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.id.desc())
        ).first()
        assert event is not None and event.reason == f"resize 1 -> {grown}"
        assert event.details["gpus"] == {"from": 1, "to": grown}
    # while it resizes it holds every device it had and will have: nothing else gets them
    with factory() as s:
        snap = load_snapshot(s, NOW + 4001)
    (resizing,) = snap.running
    assert sum(len(nd.devices) for nd in resizing.placement) == resizing.job.gpus >= grown
    assert not resizing.job.preemptible


def test_a_rigid_job_is_given_to_the_core_rigid(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    world.job(session, now=1500.0, gpus=2)
    session.commit()
    with factory() as s:
        (job,) = load_snapshot(s, NOW).pending
    assert job.min_gpus is None and job.max_gpus is None and not job.is_elastic


def _report(
    factory: sessionmaker[Session], job_id: str, gpus: int, step_time: float, now: float,
    remaining: int | None = None,
) -> None:  # fmt: skip
    """The job reports `step_time` seconds per step of 64 samples at `gpus` GPUs (and the
    samples it has left, when given). A report names the GPUs the job holds, so for a size
    below its own the job is first put on that many of its devices, as when it ran there,
    and given back its placement after."""
    from trainyard.server.api.auth import Principal
    from trainyard.server.api.schemas import ReportIn
    from trainyard.server.db.base import Role
    from trainyard.server.services import reports

    with factory() as s:
        job = s.get(Job, job_id)
        assert job is not None
        who = Principal(user_id=job.user_id or 0, user_name="u", tenant_id=job.tenant_id,
                        tenant_name="t", role=Role.MEMBER, job_id=job_id)  # fmt: skip
        body = ReportIn(attempt=0, gpus=gpus, nodes=1, world_size=gpus, batch=64,
                        step_time=step_time, steps=50, step=50, samples=3200,
                        remaining_samples=remaining)  # fmt: skip
        full = job.placement
        if full is not None:
            devices = [(part["node"], d) for part in full for d in part["devices"]][:gpus]
            job.placement = [
                {"node": node, "devices": [d for n, d in devices if n == node]}
                for node in dict.fromkeys(n for n, _d in devices)
            ]
        reports.record(s, who, job_id, body, now=now)
        job.placement = full
        s.commit()


@pytest.mark.parametrize(("at_two", "grows"), [(0.5, True), (2.0, False)])
def test_reported_speedup_decides_whether_a_running_job_grows(
    factory: sessionmaker[Session], session: Session, world: World, at_two: float, grows: bool
) -> None:
    """The goodput model fits what the job reported (issue 15): a job measured at 1 s per
    step on 1 GPU and 0.5 s on 2 (linear) grows into idle GPUs; one measured at 2 s on 2
    (synchronisation costs more than the second GPU gives) does not grow (it may shrink
    back to the size it ran fastest at)."""
    rigid, job_id = _running_beside_rigid(factory, session, world, rigid_gpus=2, gpus=2)
    _report(factory, job_id, 1, 1.0, NOW + 500)
    _report(factory, job_id, 2, at_two, NOW + 600)
    with factory() as s:
        row = s.get(Job, rigid)
        assert row is not None
        transition(s, row, S.SUCCEEDED, reason="done", now=NOW + 700)
        s.commit()
    with factory() as s:
        (running,) = load_snapshot(s, NOW + 4000).running
    assert running.job.elastic is not None
    assert {(x.gpus, x.step_time) for x in running.job.elastic.samples} == {(1, 1.0), (2, at_two)}
    later = run_once(factory, now=NOW + 4000, metrics=platform_metrics())
    assert later.decision is not None
    sizes = [sum(len(nd.devices) for nd in r.nodes) for r in later.decision.resizes]
    if grows:  # into idle GPUs (one step at a time: it is measured at each size it reaches)
        assert len(sizes) == 1 and sizes[0] > 2, later.decision.resizes
    else:
        assert all(k < 2 for k in sizes), later.decision.resizes


def test_the_work_a_job_says_it_has_left_reaches_the_core(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    """Issue 13: `remaining_samples` of the latest report is the core's `Elastic.remaining`
    (the rebalance weighs the job by the time it has left); a report without it keeps the
    last value, as a job reports it only when it knows."""
    job_id = _elastic(session, world, gpus=2, low=1, high=4)
    run_once(factory, now=NOW, metrics=platform_metrics())
    mark_running(factory, job_id, NOW + 1)
    _report(factory, job_id, 2, 0.5, NOW + 10, remaining=640_000)
    with factory() as s:
        (running,) = load_snapshot(s, NOW + 20).running
    assert running.job.elastic is not None and running.job.elastic.remaining == 640_000.0
    _report(factory, job_id, 2, 0.5, NOW + 30)
    with factory() as s:
        (running,) = load_snapshot(s, NOW + 40).running
    assert running.job.elastic is not None and running.job.elastic.remaining == 640_000.0


def test_a_report_must_come_from_the_running_attempt_and_its_gpus(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    """Found by an outside review: a job's code could report, with its own token, step times
    at 4,096 GPUs on a 4-GPU cluster, or as attempt 7, and they reached the goodput model
    and the hang detector. A report of another attempt, of GPUs the job does not hold or of
    more nodes than it spans is refused (409 naming the field) and stores nothing."""
    from trainyard.server.api.auth import Principal
    from trainyard.server.api.errors import ApiError
    from trainyard.server.api.schemas import ReportIn
    from trainyard.server.db.base import Role
    from trainyard.server.db.reports import JobObservation, JobProgress
    from trainyard.server.services import reports

    job_id = _elastic(session, world, gpus=2, low=1, high=4)
    run_once(factory, now=NOW, metrics=platform_metrics())
    mark_running(factory, job_id, NOW + 1)
    good = {"attempt": 0, "gpus": 2, "nodes": 1, "world_size": 2, "batch": 64,
            "step_time": 0.5, "steps": 10, "step": 10, "samples": 640}  # fmt: skip
    for change, field in (({"attempt": 7}, "attempt"), ({"gpus": 4096}, "gpus"),
                          ({"gpus": 1}, "gpus"), ({"nodes": 2}, "nodes")):  # fmt: skip
        with factory() as s:
            job = s.get(Job, job_id)
            assert job is not None and job.state == S.RUNNING
            who = Principal(user_id=job.user_id or 0, user_name="u", tenant_id=job.tenant_id,
                            tenant_name="t", role=Role.MEMBER, job_id=job_id)  # fmt: skip
            with pytest.raises(ApiError) as refused:
                reports.record(s, who, job_id, ReportIn(**(good | change)), now=NOW + 5)
            assert refused.value.status == 409 and refused.value.field == field, change
            s.rollback()
            assert s.get(JobProgress, job_id) is None
            assert not s.scalars(select(JobObservation)).all()
    _report(factory, job_id, 2, 0.5, NOW + 10)  # the running attempt at its own size
    with factory() as s:
        (running,) = load_snapshot(s, NOW + 20).running
    assert running.job.elastic is not None
    assert [(x.gpus, x.step_time) for x in running.job.elastic.samples] == [(2, 0.5)]


def test_a_job_shrinking_for_a_waiting_job_does_not_stop_the_scheduler(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    """Found by an outside review: while an elastic job shrank 4 -> 2 for a rigid job, the
    rigid job was STARTING on two of the devices the shrinking job still held (the union of
    its old and new ones), and every round failed ("device n0:2 is already held by another
    running job") until the shrinking job had stopped. The resizing job now holds its new
    devices and the old ones nobody was given."""
    elastic_id = _elastic(session, world, gpus=4, low=1, high=4)
    rigid = world.job(session, now=1700.0, gpus=2, topology="node")
    session.commit()
    nodes = lambda *devices: [{"node": "n0", "devices": list(devices)}]  # noqa: E731
    with factory() as s:
        shrinking, waiting = s.get(Job, elastic_id), s.get(Job, rigid.id)
        assert shrinking is not None and waiting is not None
        shrinking.state, shrinking.placement, shrinking.gpus = S.RESIZING, nodes(0, 1, 2, 3), 4
        shrinking.resize_to = nodes(0, 1)
        waiting.state, waiting.placement = S.STARTING, nodes(2, 3)
        s.commit()
    with factory() as s:
        snap = load_snapshot(s, NOW)
    held = {r.job.id: [d for nd in r.placement for d in nd.devices] for r in snap.running}
    assert held == {rigid.id: [2, 3], elastic_id: [0, 1]}
    assert {r.job.id: r.job.gpus for r in snap.running} == {rigid.id: 2, elastic_id: 2}
    run_once(factory, now=NOW, metrics=platform_metrics())  # a round runs: it raised before
    # growing, the resizing job holds its old devices and its new ones, as before
    with factory() as s:
        waiting = s.get(Job, rigid.id)
        grower = s.get(Job, elastic_id)
        assert waiting is not None and grower is not None
        waiting.state, waiting.placement = S.SUCCEEDED, None
        grower.placement, grower.resize_to = nodes(0, 1, 2, 3), nodes(0, 1, 2, 3)
        s.commit()
    with factory() as s:
        (resizing,) = load_snapshot(s, NOW + 1).running
    assert [d for nd in resizing.placement for d in nd.devices] == [0, 1, 2, 3]


def test_a_job_starting_a_new_run_is_given_to_the_core_as_starting_now(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    """Outside review 16, F7: a RESIZING (or a requeued STARTING) job keeps its previous run's
    `started_at` until it runs again; the core took that for its last (re)start, so a move
    just made looked like part of an hour's quiet (`moves.move_horizon`) and its expected
    end counted from the old run. The core now sees the time it entered its state."""
    _rigid, elastic_id = _running_beside_rigid(factory, session, world, rigid_gpus=2, gpus=2)
    with factory() as s:
        row = s.get(Job, elastic_id)
        assert row is not None and row.started_at == NOW + 3
        transition(s, row, S.RESIZING, reason="resize 2 -> 1", now=NOW + 500)
        row.resize_to = [{"node": "n0", "devices": [2]}]
        s.commit()
    with factory() as s:
        started = {r.job.id: r.started_at for r in load_snapshot(s, NOW + 510).running}
    assert started[elastic_id] == NOW + 500
    assert started[_rigid] == NOW + 1  # a running job: its run's start


def test_a_tenant_over_its_budget_may_not_grow_its_elastic_jobs(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    """Found by an outside review: a budget held the tenant's new jobs, but its running
    elastic job grew from 1 to 4 GPUs into idle ones (a growth is new consumption)."""
    from trainyard.server.loop.budgets import Budgets

    blocker, _elastic_id = _running_beside_rigid(factory, session, world, rigid_gpus=3, gpus=4)
    with factory() as s:
        row = s.get(Job, blocker)
        assert row is not None
        transition(s, row, S.SUCCEEDED, reason="done", now=NOW + 10)
        world.tenant.budget_gpu_hours = 0.001  # spent: 3 GPUs for a few seconds
        s.merge(world.tenant)
        s.commit()
    budgets = Budgets()
    with factory() as s:
        (running,) = load_snapshot(s, NOW + 4000, budgets=budgets).running
    assert (running.job.gpus, running.job.min_gpus, running.job.max_gpus) == (1, 1, 1)
    later = run_once(factory, now=NOW + 4000, metrics=platform_metrics(), budgets=budgets)
    assert later.decision is not None and not later.decision.resizes  # 3 GPUs stay idle
    with factory() as s:
        world.tenant.budget_gpu_hours = None
        s.merge(world.tenant)
        s.commit()
    with factory() as s:  # within budget again: it may grow
        (running,) = load_snapshot(s, NOW + 4000, budgets=Budgets()).running
    assert running.job.max_gpus == 4


def test_an_elastic_job_spans_nodes_when_its_size_does_not_fit_on_one(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    """Its shape follows its size (outside review 10: held to one node, the shipped example
    started at 2 of its 4 GPUs on 2-GPU nodes and could never grow)."""
    node = Node(name="n1", cpus=64.0, memory_gb=512.0, registered_at=1000.0)
    node.devices = [
        Device(index=i, gpu_type="A100", memory_gb=80.0, uuid=f"GPU-1-{i}") for i in range(4)
    ]
    session.add(node)
    session.commit()
    job_id = _elastic(session, world, gpus=8, low=1, high=8)
    applied = run_once(factory, now=NOW, metrics=platform_metrics())
    assert [launch.job_id for launch in applied.launch] == [job_id]
    with factory() as s:
        job = s.get(Job, job_id)
        assert job is not None and job.topology is None
        assert sorted(p["node"] for p in job.placement or ()) == ["n0", "n1"]
        assert sum(len(p["devices"]) for p in job.placement or ()) == 8


def test_a_running_elastic_job_not_grown_says_why_until_it_grows(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    # Started at 1 GPU beside a rigid job that then ends: within its resize hold (60 s) the
    # round leaves it at 1 GPU and stores why, with when the hold ends; `describe` shows it.
    rigid, job_id = _running_beside_rigid(factory, session, world, rigid_gpus=3, gpus=4)
    with factory() as s:
        row = s.get(Job, rigid)
        assert row is not None
        transition(s, row, S.SUCCEEDED, reason="done", now=NOW + 10)
        s.commit()
        elastic = s.get(Job, job_id)
        assert elastic is not None
        version = elastic.version
    quiet = run_once(factory, now=NOW + 20, metrics=platform_metrics())
    assert quiet.decision is not None and not quiet.decision.resizes
    with factory() as s:
        job = s.get(Job, job_id)
        # the note is no change a user's request must retry for: the version stays
        assert job is not None and job.state is S.RUNNING and job.version == version
        assert job.resize_note is not None and "resize hold" in job.resize_note
        assert job.resize_note_until == NOW + 3 + 60  # started at NOW + 3
        who = Principal(user_id=job.user_id or 0, user_name="ada", tenant_id=job.tenant_id,
                        tenant_name="acme", role=Role.MEMBER)  # fmt: skip
        detail = describe_job(s, who, job_id)
    assert detail.not_grown == job.resize_note and detail.not_grown_until == NOW + 63
    text = render_job(detail.model_dump(mode="json"), None, colour=False)
    assert "not grown: started at this size less than 60 s ago" in text and "; until " in text
    # Past the hold it grows: the note goes, and a job no longer RUNNING shows none.
    later = run_once(factory, now=NOW + 4000, metrics=platform_metrics())
    assert later.resize == (job_id,)
    with factory() as s:
        job = s.get(Job, job_id)
        assert job is not None and job.state is S.RESIZING
        assert describe_job(s, who, job_id).not_grown is None
    # Its run's last report as it stops for the resize is taken, at the size it ran at, not
    # refused for the union of devices a RESIZING job holds (outside review 12, F7).
    from trainyard.server.api.errors import ApiError
    from trainyard.server.api.schemas import ReportIn
    from trainyard.server.services import reports

    last = {"attempt": 0, "nodes": 1, "world_size": 1, "batch": 64, "step_time": 0.2,
            "steps": 7, "step": 57, "samples": 3648}  # fmt: skip
    with factory() as s:
        runner = Principal(user_id=who.user_id, user_name="ada", tenant_id=who.tenant_id,
                           tenant_name="acme", role=Role.MEMBER, job_id=job_id)  # fmt: skip
        reports.record(s, runner, job_id, ReportIn(gpus=1, **last), now=NOW + 4001)
        with pytest.raises(ApiError) as wrong:
            reports.record(s, runner, job_id, ReportIn(gpus=4, **last), now=NOW + 4001)
        assert wrong.value.field == "gpus"
        s.commit()
