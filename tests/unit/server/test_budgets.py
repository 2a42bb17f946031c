"""Budgets (issue 14, acceptance 4), on both databases: a tenant that used its GPU-hours for
the rolling period starts no new work, with a reason naming the budget, while other tenants'
jobs start; when the budget is raised (or the use leaves the window) its jobs start again.
(`trainyard admin tenant budget`: tests/unit/server/admin/test_admin_budget.py.)"""

from __future__ import annotations

import pytest
from server_factories import World, read_job
from sqlalchemy import Engine, update
from sqlalchemy.orm import Session, sessionmaker

from trainyard.server.db import (
    Device,
    Job,
    JobState,
    Node,
    Queue,
    Tenant,
    UsageRecord,
    User,
    make_session_factory,
)
from trainyard.server.lifecycle import submit
from trainyard.server.loop.budgets import Budgets
from trainyard.server.loop.scheduling import run_once, split_reason
from trainyard.server.metrics import platform_metrics

NOW = 1_000_000.0
DAY = 86_400.0


@pytest.fixture
def factory(engine: Engine, session: Session, world: World) -> sessionmaker[Session]:
    node = Node(name="n0", cpus=64.0, memory_gb=512.0, registered_at=1000.0)
    node.devices = [Device(index=i, gpu_type="A100", memory_gb=80.0) for i in range(4)]
    world.tenant.budget_gpu_hours, world.tenant.budget_period_s = 1.0, DAY
    session.add(node)
    session.add(
        UsageRecord(
            job_id="j-old",
            tenant_id=world.tenant.id,
            user_id=world.user.id,
            queue_id=world.queue.id,
            attempt=0,
            started_at=NOW - 7200,
            ended_at=NOW - 3600,
            gpus=2,
            cpus=0.0,
            memory_gb=0.0,
            outcome="SUCCEEDED",
        )
    )  # fmt: skip  (2 GPU-hours in the last day)
    session.commit()
    return make_session_factory(engine)


def _other_tenant_job(session: Session) -> str:
    globex = Tenant(name="globex", created_at=1000.0)
    gus = User(tenant=globex, name="gus", created_at=1000.0)
    queue = Queue(name="sales", tenant=globex, created_at=1000.0)
    job = Job(tenant=globex, user=gus, queue=queue, gpus=1, max_restarts=0)
    session.add_all([globex, gus, queue])
    submit(session, job, now=NOW - 10)
    session.commit()
    return job.id


def test_a_spent_budget_holds_new_work_with_a_reason(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    mine = world.job(session, now=NOW - 20, gpus=1).id
    session.commit()
    other = _other_tenant_job(session)
    budgets = Budgets(refresh_s=0)
    run_once(factory, now=NOW, metrics=platform_metrics(), budgets=budgets)
    assert read_job(factory, other).state is JobState.STARTING
    held = read_job(factory, mine)
    assert held.state is JobState.PENDING
    code, message = split_reason(held.pending_reason)
    assert code == "budget"
    assert message.startswith("tenant acme used 2.00 of its 1 GPU-hours in the last 1 days")
    with factory() as s:  # the admin raises it
        s.execute(update(Tenant).where(Tenant.name == "acme").values(budget_gpu_hours=3.0))
        s.commit()
    run_once(factory, now=NOW + 1, metrics=platform_metrics(), budgets=budgets)
    assert read_job(factory, mine).state is JobState.STARTING


def test_use_that_leaves_the_window_frees_the_budget(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    mine = world.job(session, now=NOW - 20, gpus=1).id
    session.commit()
    budgets = Budgets(refresh_s=0)
    run_once(factory, now=NOW, metrics=platform_metrics(), budgets=budgets)
    assert read_job(factory, mine).state is JobState.PENDING
    run_once(factory, now=NOW + DAY, metrics=platform_metrics(), budgets=budgets)
    assert read_job(factory, mine).state is JobState.STARTING
