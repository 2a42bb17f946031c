"""The platform loop with the Ray executor on a real 3-node Ray cluster and PostgreSQL: a real
2-node DDP job (gloo) placed by the core and trained across two Ray nodes; a killed rank and a
removed node both recovered from the checkpoint, with nothing lost or duplicated in the
database; cordon and drain honoured."""

from __future__ import annotations

import itertools
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from server_factories import World, read_job
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from trainyard.server.db import (
    Health,
    Job,
    JobEvent,
    JobState,
    Node,
    UsageRecord,
    make_session_factory,
)
from trainyard.server.lifecycle import RetryPolicy
from trainyard.server.loop.platform import Platform

S = JobState
DDP = Path(__file__).resolve().parents[3] / "examples" / "jobs" / "ddp" / "train.py"
pytestmark = pytest.mark.parametrize("engine", ["postgres"], indirect=True)


@pytest.fixture
def factory(engine: Engine, world: World) -> sessionmaker[Session]:
    return make_session_factory(engine)


@pytest.fixture
def platform(factory: sessionmaker[Session], ray_nodes: Any, tmp_path: Path) -> Iterator[Platform]:
    from trainyard.exec.ray import RayExecutor

    executor = RayExecutor(tmp_path / "runs", address=ray_nodes.address, virtual_gpus=True,
                           grace_s=5.0)  # fmt: skip
    plat = Platform(factory, executor, retry=RetryPolicy(base_s=0.5, cap_s=1.0),
                    nodes_every_s=0.2)  # fmt: skip
    plat.recover()
    try:
        yield plat
    finally:
        for handle in executor.handles():
            executor.stop(handle, grace_s=0.5, reason="test teardown")
        executor.close()


def _ddp_job(session: Session, world: World, steps: int, trace: Path, **spec: Any) -> str:
    command = [sys.executable, str(DDP), "--steps", str(steps), "--checkpoint-every", "10",
               "--log-every", "10", "--step-sleep", "0.05", "--trace", str(trace)]  # fmt: skip
    body = {"name": "ddp", "command": command, "gpus": 8, "workers": 1, "nodes": 2, **spec}
    job = world.job(session, now=time.time(), gpus=body["gpus"], spec=body, max_restarts=3)
    session.commit()
    return job.id


def _drive(
    platform: Platform,
    factory: sessionmaker[Session],
    job_id: str,
    done: Callable[[Job], bool],
    timeout_s: float = 120.0,
) -> Job:
    deadline = time.monotonic() + timeout_s
    while True:
        platform.step()
        job = read_job(factory, job_id)
        if done(job):
            return job
        if time.monotonic() >= deadline:
            with factory() as s:
                events = [(e.from_state, e.to_state, e.reason, e.details.get("attempt"))
                          for e in s.scalars(select(JobEvent).where(JobEvent.job_id == job_id)
                                             .order_by(JobEvent.id))]  # fmt: skip
            raise AssertionError((job.state, job.attempt, job.placement, events))
        time.sleep(0.1)


def _trace(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _wait_steps(platform: Platform, path: Path, attempt: int, steps: int) -> None:
    deadline = time.monotonic() + 120
    while not any(r["attempt"] == attempt and r["step"] >= steps
                  for r in (_trace(path) if path.exists() else [])):  # fmt: skip
        assert time.monotonic() < deadline
        platform.step()
        time.sleep(0.1)


def _placement_nodes(job: Job) -> list[str]:
    return [str(entry["node"]) for entry in job.placement or ()]


def test_a_two_node_ddp_job_trains_across_ray_nodes(
    platform: Platform, factory: sessionmaker[Session], session: Session, world: World,
    tmp_path: Path,
) -> None:  # fmt: skip
    trace = tmp_path / "trace.jsonl"
    job_id = _ddp_job(session, world, 40, trace)
    running = _drive(platform, factory, job_id, lambda j: j.state == S.RUNNING)
    nodes = _placement_nodes(running)
    assert len(set(nodes)) == 2 and all(len(e["devices"]) == 4 for e in running.placement or ())
    handle = platform.executor.adopt(job_id)
    assert handle is not None and [r.node for r in handle.ranks] == nodes  # as the core chose
    _drive(platform, factory, job_id, lambda j: j.state == S.SUCCEEDED)
    rank0 = handle.ranks[0].log.read_text()
    assert "start world_size=2 backend=gloo" in rank0 and "done steps=40" in rank0
    with factory() as s:
        stored = {n.name: n for n in s.scalars(select(Node))}
        assert {"w1", "w2", "w3"} <= set(stored)
        assert stored["w1"].executor == "ray" and stored["w1"].topology_path == ["r1"]
        assert len(stored["w1"].devices) == 4 and stored["w1"].devices[0].virtual


def test_a_killed_rank_and_a_lost_node_recover_from_the_checkpoint(
    platform: Platform, factory: sessionmaker[Session], session: Session, world: World,
    tmp_path: Path, ray_nodes: Any,
) -> None:  # fmt: skip
    trace = tmp_path / "trace.jsonl"
    job_id = _ddp_job(session, world, 120, trace)
    _drive(platform, factory, job_id, lambda j: j.state == S.RUNNING)
    _wait_steps(platform, trace, 0, 25)
    handle = platform.executor.adopt(job_id)
    assert handle is not None
    os.kill(handle.ranks[1].pid, signal.SIGKILL)  # the job's own failure: uses a restart
    job = _drive(platform, factory, job_id, lambda j: j.state == S.RUNNING and j.attempt == 2)
    assert job.restart_count == 1 and job.failure_streak == 1
    _wait_steps(platform, trace, 1, 45)
    lost = _placement_nodes(read_job(factory, job_id))[1]
    ray_nodes.remove(lost)  # the infrastructure's failure: costs nothing
    # (a launch may still name the node before Ray reports it dead: NodeGone, requeued again)
    job = _drive(platform, factory, job_id, lambda j: j.state == S.RUNNING and j.attempt >= 3)
    assert job.restart_count == 1 and lost not in _placement_nodes(job)
    with factory() as s:
        assert s.scalars(select(Node).where(Node.name == lost)).one().health == Health.LOST
    job = _drive(platform, factory, job_id, lambda j: j.state == S.SUCCEEDED, timeout_s=180)

    rows = _trace(trace)
    runs = sorted({r["attempt"] for r in rows})
    assert len(runs) == 3 and runs[:2] == [0, 1]  # the three attempts that trained
    starts = {a: min(r["step"] for r in rows if r["attempt"] == a) for a in runs}
    ends = {a: max(r["step"] for r in rows if r["attempt"] == a) for a in runs}
    for before, after in itertools.pairwise(runs):
        resumed = starts[after] - 1
        assert resumed % 10 == 0 and 0 <= ends[before] - resumed <= 10  # at most one interval
        # no duplicate ranks: the old attempt wrote nothing once the new one trained
        first_new = min(r["t"] for r in rows if r["attempt"] == after)
        assert max(r["t"] for r in rows if r["attempt"] == before) < first_new
    assert ends[runs[2]] == 120
    with factory() as s:
        states = [e.to_state for e in s.scalars(
            select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.id))]  # fmt: skip
        failed = [e for e in s.scalars(select(JobEvent).where(
            JobEvent.job_id == job_id, JobEvent.to_state == S.FAILED
        ).order_by(JobEvent.id))]  # by id: PostgreSQL keeps no order unless told  # fmt: skip
        usage = list(s.scalars(select(UsageRecord).where(UsageRecord.job_id == job_id)))
    assert states.count(S.SUCCEEDED) == 1 and states.count(S.RUNNING) == 3
    infra = [bool(e.details.get("infra")) for e in failed]
    assert infra[0] is False and len(infra) >= 2 and all(infra[1:])
    assert sorted(u.attempt for u in usage) == runs  # one record per attempt, no overlap
    spans = sorted((u.started_at, u.ended_at) for u in usage)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))


def test_cordon_and_drain_are_honoured(
    platform: Platform, factory: sessionmaker[Session], session: Session, world: World,
    tmp_path: Path,
) -> None:  # fmt: skip
    platform.step()
    with factory() as s:
        node = s.scalars(select(Node).where(Node.name == "w1")).one()
        node.schedulable = False  # cordoned: nothing new goes there
        s.commit()
    trace = tmp_path / "trace.jsonl"
    job_id = _ddp_job(session, world, 400, trace)
    job = _drive(platform, factory, job_id, lambda j: j.state == S.RUNNING)
    assert sorted(_placement_nodes(job)) == ["w2", "w3"]
    _wait_steps(platform, trace, 0, 12)
    with factory() as s:  # uncordon w1, drain w2: the job moves off w2
        for name, cordon, drained in (("w1", True, None), ("w2", False, time.time())):
            node = s.scalars(select(Node).where(Node.name == name)).one()
            node.schedulable, node.drained_at = cordon, drained
        s.commit()
    job = _drive(platform, factory, job_id, lambda j: j.state == S.RUNNING and j.attempt == 2)
    assert sorted(_placement_nodes(job)) == ["w1", "w3"] and job.restart_count == 0
    with factory() as s:
        node = s.scalars(select(Node).where(Node.name == "w2")).one()
        node.schedulable, node.drained_at = True, None
        s.commit()
