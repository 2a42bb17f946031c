"""No single job stops the scheduler (issue 14): a pending job the core cannot take is parked
with a reason, and every other job is still scheduled, on both databases.

Rows are written directly (as a spec accepted before the cluster changed would be), so these
tests reach the loop with values admission would refuse today. The fuzz test writes random
job rows, then checks that an unrelated job still starts in the same round."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_factories import World, read_job
from sqlalchemy import Engine, delete
from sqlalchemy.orm import Session, sessionmaker

from trainyard.server.db import Device, Job, JobState, Node, make_session_factory
from trainyard.server.loop.scheduling import run_once, split_reason
from trainyard.server.metrics import platform_metrics

NOW = 2000.0


@pytest.fixture
def factory(engine: Engine, session: Session, world: World) -> sessionmaker[Session]:
    node = Node(name="n0", cpus=64.0, memory_gb=512.0, registered_at=1000.0)
    node.devices = [
        Device(index=i, gpu_type="A100", memory_gb=80.0, uuid=f"GPU-{i}") for i in range(4)
    ]
    session.add(node)
    session.commit()
    return make_session_factory(engine)


def test_a_job_with_an_unknown_topology_level_is_parked_and_others_start(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    bad = world.job(session, now=1000.0, gpus=1, topology="galaxy", priority=100).id
    good = world.job(session, now=1500.0, gpus=1).id
    session.commit()
    for step in range(2):  # the next round parks it again and still schedules
        applied = run_once(factory, now=NOW + step, metrics=platform_metrics())
        assert not applied.retry
    assert read_job(factory, good).state is JobState.STARTING
    parked = read_job(factory, bad)
    assert parked.state is JobState.PENDING
    code, message = split_reason(parked.pending_reason)
    assert code == "invalid"
    assert message.startswith("topology: unknown level 'galaxy'")
    assert "'node'" in message  # the levels it may use


def test_a_job_whose_size_range_no_longer_holds_is_parked(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    bad = world.job(session, now=1000.0, gpus=2, min_gpus=4, max_gpus=8).id
    good = world.job(session, now=1500.0, gpus=1).id
    session.commit()
    run_once(factory, now=NOW, metrics=platform_metrics())
    assert read_job(factory, good).state is JobState.STARTING
    assert split_reason(read_job(factory, bad).pending_reason) == (
        "invalid",
        "min_gpus: must not exceed gpus",
    )


_ROWS = st.fixed_dictionaries(
    {
        "gpus": st.integers(-2, 64),
        "cpus": st.sampled_from([0.0, 1.0, -1.0, 1e9]),
        "memory_gb": st.sampled_from([0.0, 4.0, -3.0]),
        "priority": st.integers(-(2**31), 2**31 - 1),
        "topology": st.sampled_from([None, "node", "island", "cluster", "galaxy", "level3", ""]),
        "min_runtime": st.sampled_from([0.0, 30.0, -5.0]),
        "expected_duration": st.sampled_from([None, 0.0, 60.0, -1.0]),
        "gpu_types": st.sampled_from([[], ["A100"], ["H100"], [""]]),
        "gpu_memory_gb": st.sampled_from([0.0, 80.0, 1e6, -1.0]),
        "min_gpus": st.sampled_from([None, 0, 1, 4, 99]),
        "max_gpus": st.sampled_from([None, 1, 4, 128]),
        "preemptible": st.booleans(),
    }
)


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(rows=st.lists(_ROWS, min_size=1, max_size=3))
def test_random_job_rows_never_stop_an_unrelated_job_from_starting(
    factory: sessionmaker[Session], world: World, rows: list[dict[str, object]]
) -> None:
    with factory() as s:
        s.execute(delete(Job))
        s.commit()
        w = World(
            s.merge(world.tenant), s.merge(world.user), s.merge(world.root), s.merge(world.queue)
        )
        for fields in rows:
            w.job(s, now=1000.0, **fields)
        good = w.job(s, now=1500.0, gpus=1, priority=-(2**31)).id  # last in every order
        s.commit()
    applied = run_once(factory, now=NOW, metrics=platform_metrics())
    assert not applied.retry
    job = read_job(factory, good)
    if job.state is JobState.PENDING:  # only a valid job of the fuzz may take its GPU
        with factory() as s:
            holders = [j for j in s.query(Job).all() if j.state is JobState.STARTING]
        assert holders, job.pending_reason
        assert sum(j.gpus for j in holders) + 1 > 4 or any(
            j.priority > job.priority for j in holders
        ), job.pending_reason
