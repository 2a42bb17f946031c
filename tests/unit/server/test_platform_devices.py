"""No two runs on one device, with real processes: a preemption that frees more devices than
its preemptor needs, while the victim takes its time to stop (it traps SIGTERM).

A monitor thread samples the executor's device ledger (`LocalExecutor.device_holders`, built
from the runs that still have a live process) every few milliseconds for the whole test. The
first test runs the real scheduler (which must make the second job wait for the victim); the
second feeds the platform a decision with that wait removed, as the scheduler made before the
fix, and checks the defence in depth: the executor refuses the launch, the job waits with a
reason, the breach is counted and logged as a bug signal, and the job starts once the device
is free.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from server_factories import World, read_job, submit_code
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from trainyard import core
from trainyard.exec.gpus import Gpu, GpuInventory
from trainyard.exec.local import LocalExecutor
from trainyard.server.db import JobEvent, JobState, make_session_factory
from trainyard.server.lifecycle import RetryPolicy
from trainyard.server.loop.platform import Platform
from trainyard.server.metrics import platform_metrics

S = JobState
INVENTORY = GpuInventory(
    hostname="box",
    gpus=tuple(Gpu(i, "virtual", 80.0, f"virtual-{i}", virtual=True) for i in range(2)),
    cpus=8,
    memory_gb=32.0,
    virtual=True,
)
# The victim: on SIGTERM it says so, lingers 1.5 s (a checkpoint being written), then exits.
LINGER = """
import signal, sys, time
def bye(*_):
    print("term", flush=True)
    time.sleep(1.5)
    sys.exit(0)
signal.signal(signal.SIGTERM, bye)
print("up", flush=True)
while True:
    time.sleep(0.05)
"""
SHORT = "import time; print('run', flush=True); time.sleep(0.3)"


class Monitor:
    """Samples the device ledger in a thread; remembers every moment a device had two
    holders, and whether the victim was ever seen holding a device while stopping."""

    def __init__(self, executor: LocalExecutor) -> None:
        self.executor = executor
        self.overlaps: list[dict[int, list[tuple[str, int]]]] = []
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            holders = self.executor.device_holders()
            self.samples += 1
            if any(len(h) > 1 for h in holders.values()):
                self.overlaps.append(holders)
            time.sleep(0.005)

    def __enter__(self) -> Monitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@pytest.fixture
def factory(engine: Engine, world: World) -> sessionmaker[Session]:
    return make_session_factory(engine)


@pytest.fixture
def platform(factory: sessionmaker[Session], tmp_path: Path) -> Iterator[Platform]:
    executor = LocalExecutor(tmp_path / "runs", grace_s=5.0)
    platform = Platform(
        factory,
        executor,
        retry=RetryPolicy(base_s=0.05, cap_s=0.05),
        metrics=platform_metrics(),
    )
    platform.register_node(INVENTORY)
    yield platform
    for handle in executor.handles():
        executor.stop(handle, grace_s=0.5, reason="test teardown")


def _drive(
    platform: Platform, until: Callable[[], bool], timeout_s: float = 30.0, every: Any = None
) -> None:
    deadline = time.monotonic() + timeout_s
    while not until():
        assert time.monotonic() < deadline, "timed out"
        platform.step()
        if every is not None:
            every()
        time.sleep(0.03)


def _starting_details(factory: sessionmaker[Session], job_id: str) -> dict[str, Any]:
    with factory() as s:
        event = s.scalars(
            select(JobEvent)
            .where(JobEvent.job_id == job_id, JobEvent.to_state == S.STARTING)
            .order_by(JobEvent.id)
        ).first()
        assert event is not None
        return dict(event.details or {})


def _preempt_two_for_one(
    platform: Platform, factory: sessionmaker[Session], session: Session, world: World
) -> tuple[str, list[str], Monitor, list[str]]:
    """The low job on both devices; then two high-priority 1-GPU jobs. Returns the ids, the
    monitor's findings and the pending reasons seen while the victim stopped."""
    low = submit_code(session, world, LINGER, gpus=2, priority=0)
    log = platform.executor.job_dir(low) / "logs" / "attempt-0" / "rank-0.log"
    _drive(platform, lambda: log.exists() and "up" in log.read_text())
    highs = [submit_code(session, world, SHORT, gpus=1, priority=10) for _ in range(2)]
    reasons: list[str] = []

    def note() -> None:
        for job_id in highs:
            reason = read_job(factory, job_id).pending_reason
            if reason and reason not in reasons:
                reasons.append(reason)

    with Monitor(platform.executor) as monitor:
        _drive(
            platform,
            lambda: all(read_job(factory, j).state == S.SUCCEEDED for j in highs),
            every=note,
        )
    return low, highs, monitor, reasons


def test_preemption_freeing_more_than_needed_never_doubles_a_device(
    platform: Platform, factory: sessionmaker[Session], session: Session, world: World
) -> None:
    low, highs, monitor, reasons = _preempt_two_for_one(platform, factory, session, world)
    assert monitor.samples > 50 and not monitor.overlaps, monitor.overlaps[:3]
    for job_id in highs:  # both wait for the victim: the preemptor and the one on the rest
        assert _starting_details(factory, job_id)["after_evictions"] == [low]
    assert any(r.startswith("waiting for evicted jobs to stop") for r in reasons), reasons
    text = "".join(platform.executor.logs(low, attempt=0))
    assert "term" in text  # it was asked to stop and lingered before its devices were free
    conflicts = platform.metrics.booking_conflicts
    for stage in ("decision", "launch"):  # no bug signal on the way
        assert conflicts.value(stage=stage) == 0


def test_a_launch_onto_a_busy_device_waits_and_is_reported(
    platform: Platform,
    factory: sessionmaker[Session],
    session: Session,
    world: World,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    checked = core.run_cycle  # the audited core (see conftest)

    def forgetful(snapshot: Any, profile: Any = "default", layout: Any = None) -> Any:
        """The core as it was before the fix: the leftover device's job does not wait."""
        decision = checked(snapshot, profile, layout)
        if not decision.evictions:
            return decision
        placements = list(decision.placements)
        if len(placements) > 1:
            placements[-1] = placements[-1]._replace(after_evictions=())
        return type(decision)(
            decision.now,
            decision.profile,
            tuple(placements),
            decision.evictions,
            decision.reservations,
            decision.pending,
        )

    monkeypatch.setattr(core, "run_cycle", forgetful)
    with caplog.at_level(logging.ERROR, logger="trainyard"):
        low, highs, monitor, reasons = _preempt_two_for_one(platform, factory, session, world)
    assert monitor.samples > 50 and not monitor.overlaps, monitor.overlaps[:3]
    refused = [r for r in reasons if r.startswith("waiting for devices still held by live runs")]
    assert refused and f"(job {low})" in refused[0], reasons
    assert any("bug signal" in r.getMessage() for r in caplog.records)
    conflicts = platform.metrics.booking_conflicts
    assert conflicts.value(stage="decision") > 0 and conflicts.value(stage="launch") > 0
    assert all(read_job(factory, j).pending_reason is None for j in highs)
