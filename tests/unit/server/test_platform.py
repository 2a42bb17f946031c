"""The platform loop on both databases with real processes: success, failure and restart,
cancel, and recovery by a new server on the same database and run directory."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from server_factories import World, read_job, submit_code
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from trainyard.exec import procfs
from trainyard.exec.gpus import Gpu, GpuInventory
from trainyard.exec.local import LocalExecutor
from trainyard.exec.run import RunHandle
from trainyard.server.db import Job, JobEvent, JobState, Node, make_session_factory
from trainyard.server.lifecycle import RetryPolicy, transition
from trainyard.server.loop.platform import Platform

S = JobState
FAST_RETRY = RetryPolicy(base_s=0.05, cap_s=0.05)
INVENTORY = GpuInventory(
    hostname="box",
    gpus=tuple(Gpu(i, "virtual", 80.0, f"virtual-{i}", virtual=True) for i in range(2)),
    cpus=8,
    memory_gb=32.0,
    virtual=True,
)


@pytest.fixture
def factory(engine: Engine, world: World) -> sessionmaker[Session]:
    return make_session_factory(engine)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "runs"


_EXECUTORS: list[LocalExecutor] = []


@pytest.fixture(autouse=True)
def _no_stray_processes() -> Iterator[None]:
    """Whatever a test leaves running (a failed assertion) is stopped."""
    yield
    while _EXECUTORS:
        executor = _EXECUTORS.pop()
        for handle in executor.handles():
            executor.stop(handle, grace_s=0.5, reason="test teardown")


def _platform(factory: sessionmaker[Session], root: Path) -> Platform:
    executor = LocalExecutor(root, grace_s=2.0)
    _EXECUTORS.append(executor)
    platform = Platform(factory, executor, retry=FAST_RETRY)
    platform.register_node(INVENTORY)
    return platform


def _cancel(factory: sessionmaker[Session], job_id: str, reason: str = "cancelled by ada") -> None:
    """What the API's cancel does (the database only; the next step acts on it)."""
    with factory() as s:
        job = s.get(Job, job_id)
        assert job is not None
        transition(s, job, S.CANCELLED, reason=reason, now=time.time())
        s.commit()


def _states(factory: sessionmaker[Session], job_id: str) -> list[S]:
    with factory() as s:
        q = select(JobEvent.to_state).where(JobEvent.job_id == job_id).order_by(JobEvent.id)
        return [S(x) for x in s.scalars(q)]


def _drive(
    platform: Platform,
    factory: sessionmaker[Session],
    job_id: str,
    done: Callable[[Job], bool],
    timeout_s: float = 10.0,
) -> Job:
    deadline = time.monotonic() + timeout_s
    while True:
        platform.step()
        job = read_job(factory, job_id)
        if done(job):
            return job
        assert time.monotonic() < deadline, f"job still {job.state}: {_states(factory, job_id)}"
        time.sleep(0.05)


def _settle(platform: Platform, handle: RunHandle, timeout_s: float = 10.0) -> None:
    """Step until no process of `handle`'s run is left (stops are asked for, not waited)."""
    deadline = time.monotonic() + timeout_s
    while not platform.executor.poll(handle).settled:
        assert time.monotonic() < deadline, f"{handle.job_id} still has processes"
        platform.step()
        time.sleep(0.05)


def _attempt_dirs(root: Path, job_id: str) -> list[str]:
    return sorted(p.name for p in (root / "jobs" / job_id).glob("attempt-*"))


def test_register_node_once(factory: sessionmaker[Session], root: Path) -> None:
    _platform(factory, root)
    platform = _platform(factory, root)
    assert platform.virtual
    with factory() as s:
        nodes = list(s.scalars(select(Node)))
        assert [n.name for n in nodes] == ["box"]
        assert nodes[0].virtual and [d.virtual for d in nodes[0].devices] == [True, True]


def test_job_runs_to_success(
    factory: sessionmaker[Session], session: Session, world: World, root: Path
) -> None:
    platform = _platform(factory, root)
    job_id = submit_code(session, world, "print('hello')", gpus=2)
    job = _drive(platform, factory, job_id, lambda j: j.state == S.SUCCEEDED)
    assert job.exit_code == 0
    assert _states(factory, job_id) == [S.PENDING, S.STARTING, S.RUNNING, S.SUCCEEDED]
    assert _attempt_dirs(root, job_id) == ["attempt-0"]
    logs = "".join(platform.executor.logs(job_id))
    assert logs.count("hello") == 2  # two ranks, one device each


def test_failing_job_is_restarted_then_fails(
    factory: sessionmaker[Session], session: Session, world: World, root: Path
) -> None:
    platform = _platform(factory, root)
    job_id = submit_code(session, world, "import sys; sys.exit(3)", max_restarts=1)
    job = _drive(platform, factory, job_id, lambda j: j.state == S.FAILED and j.restart_count == 1)
    time.sleep(0.1)
    platform.step()  # nothing more happens to it
    job = read_job(factory, job_id)
    assert job.state == S.FAILED and job.exit_code == 3 and job.restart_count == 1
    run = [S.STARTING, S.RUNNING, S.FAILED]
    assert _states(factory, job_id) == [S.PENDING, *run, S.PENDING, *run]
    with factory() as s:
        failed = s.scalars(
            select(JobEvent).where(JobEvent.job_id == job_id, JobEvent.to_state == S.FAILED)
        ).all()
        assert [(e.details["exit_code"], e.details["rank"]) for e in failed] == [(3, 0), (3, 0)]
    assert _attempt_dirs(root, job_id) == ["attempt-0", "attempt-1"]


def test_a_command_that_cannot_start_fails_once_saying_why(
    factory: sessionmaker[Session], session: Session, world: World, root: Path
) -> None:
    # Outside review 12 (F4): a command that does not exist was retried with back-off, each
    # attempt "rank 0 exited with code 127", the reason only in the log. No restart can
    # start it: the job fails once, and its exit line says why.
    platform = _platform(factory, root)
    spec = {"name": "t", "command": ["no-such-command-xyz"], "gpus": 1, "workers": 1}
    job = world.job(session, now=time.time(), gpus=1, spec=spec, max_restarts=3)
    session.commit()
    done = _drive(platform, factory, job.id, lambda j: j.state == S.FAILED)
    for _ in range(5):  # and stays so: nothing requeues it
        platform.step()
        time.sleep(0.05)
    job_row = read_job(factory, job.id)
    assert job_row.state == S.FAILED and job_row.restart_count == 0 and job_row.attempt == 1
    assert done.exit_code == 127
    assert done.exit_message is not None and "could not start" in done.exit_message
    assert "no-such-command-xyz" in done.exit_message
    assert _states(factory, job.id) == [S.PENDING, S.STARTING, S.RUNNING, S.FAILED]


def test_cancel_stops_the_running_processes(
    factory: sessionmaker[Session], session: Session, world: World, root: Path
) -> None:
    platform = _platform(factory, root)
    job_id = submit_code(session, world, "import time; time.sleep(60)")
    _drive(platform, factory, job_id, lambda j: j.state == S.RUNNING)
    handle = platform.executor.adopt(job_id)
    assert handle is not None
    assert any(procfs.alive(r.pid, r.start_time) for r in handle.ranks)
    _cancel(factory, job_id)
    report = platform.step()
    assert job_id in report.stopped  # SIGTERM sent; the loop does not wait for it
    _settle(platform, handle)
    assert not any(procfs.alive(r.pid, r.start_time) for r in handle.ranks)
    assert read_job(factory, job_id).state == S.CANCELLED
    assert _states(factory, job_id)[-1] == S.CANCELLED


def test_recover_adopts_a_running_job(
    factory: sessionmaker[Session], session: Session, world: World, root: Path
) -> None:
    first = _platform(factory, root)
    code = "import time; time.sleep(1.5); print('done')"
    job_id = submit_code(session, world, code, max_restarts=2)
    _drive(first, factory, job_id, lambda j: j.state == S.RUNNING)
    second = _platform(factory, root)  # a restarted server: new executor, same root
    report = second.recover()
    assert report.adopted == [job_id] and not report.failed
    assert read_job(factory, job_id).state == S.RUNNING
    job = _drive(second, factory, job_id, lambda j: j.state == S.SUCCEEDED)
    assert job.exit_code == 0 and job.restart_count == 0
    assert _states(factory, job_id) == [S.PENDING, S.STARTING, S.RUNNING, S.SUCCEEDED]
    assert _attempt_dirs(root, job_id) == ["attempt-0"]
    assert "done" in "".join(second.executor.logs(job_id))


def test_recover_applies_an_outcome_reached_while_down(
    factory: sessionmaker[Session], session: Session, world: World, root: Path
) -> None:
    first = _platform(factory, root)
    job_id = submit_code(session, world, "import time; time.sleep(0.3)")
    _drive(first, factory, job_id, lambda j: j.state == S.RUNNING)
    time.sleep(1.0)  # it ends while no server watches
    second = _platform(factory, root)
    recovered_at = time.time()
    report = second.recover()
    assert report.succeeded == [job_id]
    job = read_job(factory, job_id)
    assert job.state == S.SUCCEEDED
    # it ended about 0.3 s after it started, a second before the server saw it: its time
    # (and GPU time) is counted to its exit record, not to the restart (an outside review)
    assert job.finished_at is not None and job.started_at is not None
    assert job.started_at <= job.finished_at < recovered_at - 0.5


def test_recover_fails_and_requeues_a_missing_run(
    factory: sessionmaker[Session], session: Session, world: World, root: Path
) -> None:
    job = world.job_in(session, S.RUNNING, now=time.time())
    session.commit()
    platform = _platform(factory, root)
    report = platform.recover()
    assert report.failed == [job.id] and report.requeued == [job.id]
    after = read_job(factory, job.id)
    # a run with no record is the infrastructure's failure: first in line, no restart used
    assert after.state == S.PENDING and after.restart_count == 0 and after.placement is None
    assert after.recover_first and after.next_retry_at is None
    assert _states(factory, job.id)[-2:] == [S.FAILED, S.PENDING]


def test_several_jobs_none_lost_or_duplicated(
    factory: sessionmaker[Session], session: Session, world: World, root: Path
) -> None:
    platform = _platform(factory, root)
    ids = [submit_code(session, world, f"print({i})") for i in range(4)]  # 2 GPUs: two waves
    deadline = time.monotonic() + 15.0
    while not all(read_job(factory, j).state == S.SUCCEEDED for j in ids):
        assert time.monotonic() < deadline, [read_job(factory, j).state for j in ids]
        platform.step()
        time.sleep(0.05)
    for job_id in ids:
        assert _states(factory, job_id) == [S.PENDING, S.STARTING, S.RUNNING, S.SUCCEEDED]
        assert _attempt_dirs(root, job_id) == ["attempt-0"]


def test_preemption_stops_the_victim_and_launches_the_preemptor(
    factory: sessionmaker[Session], session: Session, world: World, root: Path
) -> None:
    platform = _platform(factory, root)
    low = submit_code(session, world, "import time; time.sleep(60)", gpus=2)
    _drive(platform, factory, low, lambda j: j.state == S.RUNNING)
    spec = {"name": "hi", "command": [sys.executable, "-c", "pass"], "gpus": 2, "workers": 2}
    high = world.job(session, now=time.time(), gpus=2, spec=spec, priority=10, max_restarts=0)
    session.commit()
    _drive(platform, factory, high.id, lambda j: j.state == S.SUCCEEDED)
    victim = _states(factory, low)
    assert victim[:5] == [S.PENDING, S.STARTING, S.RUNNING, S.PREEMPTED, S.PENDING]
    assert read_job(factory, low).restart_count == 0  # preemption is not a restart
    # the victim runs again once the preemptor is done, as a new attempt
    _drive(platform, factory, low, lambda j: j.state == S.RUNNING and j.attempt == 2)
    assert _attempt_dirs(root, low) == ["attempt-0", "attempt-1"]
    handle = platform.executor.adopt(low, 0)
    assert handle is not None and platform.executor.poll(handle).state == "stopped"
    _cancel(factory, low, reason="test over")  # leave nothing running behind
    current = platform.executor.adopt(low)
    assert current is not None
    _settle(platform, current)


def test_recover_fails_and_requeues_a_run_that_vanished(
    factory: sessionmaker[Session], session: Session, world: World, root: Path
) -> None:
    first = _platform(factory, root)
    job_id = submit_code(session, world, "import time; time.sleep(60)", max_restarts=1)
    _drive(first, factory, job_id, lambda j: j.state == S.RUNNING)
    handle = first.executor.adopt(job_id)
    assert handle is not None
    os.killpg(handle.pgid, signal.SIGKILL)  # wrappers too: no exit record is written
    deadline = time.monotonic() + 5.0
    while any(procfs.alive(r.pid, r.start_time) for r in handle.ranks):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    second = _platform(factory, root)
    report = second.recover()
    assert report.failed == [job_id] and report.requeued == [job_id]
    job = read_job(factory, job_id)
    assert job.state == S.PENDING and job.restart_count == 0 and job.recover_first
    with factory() as s:
        event = s.scalars(
            select(JobEvent).where(JobEvent.job_id == job_id, JobEvent.to_state == S.FAILED)
        ).one()
        assert event.details["run_state"] == "lost"


def test_recover_stops_a_live_run_of_a_job_cancelled_while_down(
    factory: sessionmaker[Session], session: Session, world: World, root: Path
) -> None:
    first = _platform(factory, root)
    job_id = submit_code(session, world, "import time; time.sleep(60)")
    _drive(first, factory, job_id, lambda j: j.state == S.RUNNING)
    _cancel(factory, job_id)  # cancelled in the database while no server runs
    second = _platform(factory, root)
    second.recover()
    assert second.executor.device_holders() == {0: [(job_id, 0)]}  # counted until it stops
    (handle,) = second.executor.handles()
    report = second.step()
    assert job_id in report.stopped
    _settle(second, handle)
    assert second.executor.device_holders() == {}


def test_an_elastic_job_started_smaller_runs_one_rank_per_gpu_it_got(
    factory: sessionmaker[Session], session: Session, world: World, root: Path
) -> None:
    platform = _platform(factory, root)
    busy = submit_code(session, world, "import time; time.sleep(60)", gpus=1)
    _drive(platform, factory, busy, lambda j: j.state == S.RUNNING)
    code = "import os; print('world', os.environ['WORLD_SIZE'], os.environ['CUDA_VISIBLE_DEVICES'])"
    spec = {
        "name": "el",
        "command": [sys.executable, "-c", code],
        "gpus": 2,
        "workers": 2,
        "elastic": {"min_gpus": 1, "max_gpus": 2},
    }
    job = world.job(
        session, now=time.time(), gpus=2, spec=spec, max_restarts=0, min_gpus=1, max_gpus=2,
        topology="node",
    )  # fmt: skip
    session.commit()
    done = _drive(platform, factory, job.id, lambda j: j.state == S.SUCCEEDED)
    assert done.gpus == 1
    logs = "".join(platform.executor.logs(job.id))
    assert logs.count("world 1") == 1  # one rank: the one GPU it was started on
    _cancel(factory, busy)


def test_a_drained_node_evicts_its_jobs_which_run_again_after_undrain(
    factory: sessionmaker[Session], session: Session, world: World, root: Path
) -> None:
    """Issue 16: `admin node drain` cordons the node and the platform evicts the jobs running
    there (PREEMPTED, `node NODE drained`; notice `preempt`, SIGTERM), which are requeued
    without costing a restart; with no other node they wait; undrain lets them run again.
    `cordon` alone leaves running jobs alone."""
    from trainyard.server.loop import cluster_rows
    from trainyard.server.services import nodes

    platform = _platform(factory, root)
    node = platform.node_name
    assert node is not None
    job = submit_code(session, world, "import time; time.sleep(60)", gpus=1)
    _drive(platform, factory, job, lambda j: j.state == S.RUNNING)
    with factory() as s:
        nodes.set_schedulable(s, node, False)  # cordon: it keeps running
        s.commit()
    platform.step()
    assert read_job(factory, job).state == S.RUNNING

    def said() -> str:  # how the core's reasons name the node (outside review 7)
        with factory() as s:
            return next(n.down for n in cluster_rows.nodes(s)[0] if n.name == node)

    assert said() == "cordoned"
    with factory() as s:
        nodes.drain(s, node, time.time())
        s.commit()
    assert said() == ""  # drained: the core's own word
    requeued = _drive(platform, factory, job, lambda j: j.state == S.PENDING, timeout_s=30)
    assert requeued.restart_count == 0  # an eviction, not a failure
    with factory() as s:
        reasons = [e.reason for e in s.scalars(select(JobEvent).where(JobEvent.job_id == job))]
        (info,) = [n for n in nodes.list_nodes(s) if n.name == node]
    assert f"node {node} drained" in reasons and info.state == "drained"
    notice = (root / "jobs" / job / "notice").read_text().strip()
    assert notice == "preempt"
    platform.step()
    assert read_job(factory, job).state == S.PENDING  # the only node is drained
    with factory() as s:
        nodes.set_schedulable(s, node, True)  # undrain
        s.commit()
    _drive(platform, factory, job, lambda j: j.state == S.RUNNING)
    _cancel(factory, job)
    _drive(platform, factory, job, lambda j: j.state == S.CANCELLED)


def test_recover_relaunches_a_resize_whose_run_stopped_while_down(
    factory: sessionmaker[Session], session: Session, world: World, root: Path
) -> None:
    """Found by an outside review: the server was killed while an elastic job resized; its
    run stopped (checkpoint, exit) while no server watched. `recover` moved it RESIZING ->
    STARTING, but only `step` launches a resize, and no later step did: the job sat in
    STARTING, its GPUs booked, nothing running, until the next restart."""
    first = _platform(factory, root)
    spec = {"name": "el", "command": [sys.executable, "-c", "import time; time.sleep(60)"],
            "gpus": 2, "workers": 2, "elastic": {"min_gpus": 1, "max_gpus": 2}}  # fmt: skip
    job = world.job(
        session, now=time.time(), gpus=2, spec=spec, max_restarts=0, min_gpus=1, max_gpus=2,
        topology="node",
    )  # fmt: skip
    session.commit()
    _drive(first, factory, job.id, lambda j: j.state == S.RUNNING)
    with factory() as s:  # the core shrinks it 2 -> 1 (what `elastic.write_resizes` stores)
        row = s.get(Job, job.id)
        assert row is not None and row.placement is not None
        row.resize_to = [{"node": "box", "devices": [0]}]
        transition(s, row, S.RESIZING, reason="resize 2 -> 1", now=time.time())
        s.commit()
    handle = first._runs[job.id]
    first.executor.request_stop(handle, reason="resize")  # then the server is killed
    deadline = time.monotonic() + 10
    while not first.executor.poll(handle).settled:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    second = _platform(factory, root)
    report = second.recover()
    assert report.resized == [job.id] and report.launched == [job.id]
    relaunched = _drive(second, factory, job.id, lambda j: j.state == S.RUNNING)
    assert relaunched.gpus == 1 and _attempt_dirs(root, job.id) == ["attempt-0", "attempt-1"]
    _cancel(factory, job.id)
    _drive(second, factory, job.id, lambda j: j.state == S.CANCELLED)


def test_a_job_past_its_time_limit_is_stopped_and_fails_without_a_retry(
    factory: sessionmaker[Session], session: Session, world: World, root: Path
) -> None:
    # Outside review 12 (F3): `submit -t` was only an estimate; a hung script held its GPUs
    # for ever. Now `time_limit_s` (which `-t` sets) stops an attempt that runs longer, and
    # the job fails saying so, not retried (it would time out again).
    platform = _platform(factory, root)
    spec = {"name": "t", "command": [sys.executable, "-c", "import time; time.sleep(60)"],
            "gpus": 1, "workers": 1, "time_limit_s": 1.0}  # fmt: skip
    job = world.job(session, now=time.time(), gpus=1, spec=spec, max_restarts=3)
    session.commit()
    done = _drive(platform, factory, job.id, lambda j: j.state == S.FAILED, timeout_s=20)
    for _ in range(5):
        platform.step()
        time.sleep(0.05)
    row = read_job(factory, job.id)
    assert row.state == S.FAILED and row.restart_count == 0 and row.failed_for_good
    assert done.exit_message is not None and done.exit_message.startswith("time limit: ran ")
    assert "the job's limit is 1 s" in done.exit_message


def test_a_job_resumes_from_the_checkpoints_of_an_ended_one(
    factory: sessionmaker[Session], session: Session, world: World, root: Path
) -> None:
    # Outside review 12 (F2): cancel, change a flag, resubmit: the new job started from step
    # 0, its predecessor's checkpoints out of its reach (another id, another uid). With
    # `resume_from` its checkpoint directory starts as a copy of the predecessor's.
    platform = _platform(factory, root)
    write = (
        "import os, pathlib; d = pathlib.Path(os.environ['TRAINYARD_CHECKPOINT_DIR']); "
        "(d / 'step-000000300.pt').write_text('300'); os.symlink('/etc/hostname', d / 'ln')"
    )
    first = submit_code(session, world, write)
    _drive(platform, factory, first, lambda j: j.state == S.SUCCEEDED)
    read = (
        "import os, pathlib; d = pathlib.Path(os.environ['TRAINYARD_CHECKPOINT_DIR']); "
        "print('resumed at', (d / 'step-000000300.pt').read_text(), (d / 'ln').is_symlink())"
    )
    spec = {"name": "t", "command": [sys.executable, "-c", read], "gpus": 1, "workers": 1,
            "resume_from": first}  # fmt: skip
    job = world.job(session, now=time.time(), gpus=1, spec=spec)
    session.commit()
    _drive(platform, factory, job.id, lambda j: j.state == S.SUCCEEDED)
    assert "resumed at 300 True" in "".join(platform.executor.logs(job.id))
    # its own copy: the predecessor's files are untouched by what the new job writes
    assert (root / "jobs" / first / "checkpoints" / "step-000000300.pt").read_text() == "300"
