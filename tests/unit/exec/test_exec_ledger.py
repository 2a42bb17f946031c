"""The executor's device ledger and stops that do not block, with real subprocesses: a launch
onto a device a live run holds is refused before anything of it exists; a stop request sends
SIGTERM at once and SIGKILL from a later poll once the grace period is over (also for an
adopted run, from the time recorded on disk)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from exec_helpers import wait_for

from trainyard.exec.local import LaunchSpec, LocalExecutor
from trainyard.exec.run import DeviceBusy

PY = sys.executable
IGNORE_TERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
    " print('ready', flush=True); time.sleep(60)"
)
SLEEP = "import time; print('ready', flush=True); time.sleep(60)"


def ready(ex: LocalExecutor, job: str) -> Callable[[], bool]:
    return lambda: any("ready" in line for line in ex.logs(job, rank=0))


def spec(job: str, code: str, devices: tuple[int, ...], attempt: int = 0) -> LaunchSpec:
    return LaunchSpec(job, [PY, "-c", code], attempt=attempt, workers=1, devices=devices)


def test_ledger_lists_live_runs_and_refuses_a_busy_device(
    executor: LocalExecutor, tmp_path: Path
) -> None:
    a = executor.launch(spec("a", SLEEP, (0, 1)))
    wait_for(ready(executor, "a"))
    assert executor.device_holders() == {0: [("a", 0)], 1: [("a", 0)]}
    with pytest.raises(DeviceBusy) as refused:
        executor.launch(spec("b", SLEEP, (1, 2)))
    assert refused.value.holders == {1: ("a", 0)}
    assert "1 (job a attempt 0)" in str(refused.value)
    assert not (tmp_path / "root" / "jobs" / "b").exists()  # nothing of it was made
    c = executor.launch(spec("c", SLEEP, (2,)))  # a free device is fine
    wait_for(ready(executor, "c"))
    assert executor.device_holders()[2] == [("c", 0)]
    executor.stop(a, grace_s=1.0)
    b = executor.launch(spec("b", SLEEP, (1,)))  # free once no process of `a` is left
    assert executor.device_holders() == {1: [("b", 0)], 2: [("c", 0)]}
    for h in (b, c):
        executor.stop(h, grace_s=0.5)
    assert executor.device_holders() == {}


def test_an_older_attempt_still_alive_holds_its_devices(executor: LocalExecutor) -> None:
    executor.launch(spec("a", IGNORE_TERM, (0,), attempt=0))
    wait_for(ready(executor, "a"))
    with pytest.raises(DeviceBusy):
        executor.launch(spec("a", SLEEP, (0,), attempt=1))


def test_adopted_runs_are_in_the_ledger(executor: LocalExecutor, tmp_path: Path) -> None:
    executor.launch(spec("a", SLEEP, (0,)))
    wait_for(ready(executor, "a"))
    restarted = LocalExecutor(tmp_path / "root", grace_s=1.0)  # a new server, same root
    assert restarted.device_holders() == {}
    handle = restarted.adopt("a")
    assert handle is not None
    assert restarted.device_holders() == {0: [("a", 0)]}
    with pytest.raises(DeviceBusy):
        restarted.launch(spec("b", SLEEP, (0,)))


def test_request_stop_does_not_wait_and_escalates_after_the_grace_period(
    executor: LocalExecutor, tmp_path: Path
) -> None:
    h = executor.launch(spec("a", IGNORE_TERM, (0,)))
    wait_for(ready(executor, "a"))
    began = time.monotonic()
    status = executor.request_stop(h, reason="preempted")
    assert time.monotonic() - began < 0.5  # SIGTERM sent, not waited for
    assert not status.settled and status.state == "stopped"
    assert executor.device_holders() == {0: [("a", 0)]}  # it still holds its device
    assert not executor.poll(h).settled  # it ignores SIGTERM; the grace period is 1 s
    wait_for(lambda: executor.poll(h).settled, timeout_s=10.0)  # polls send SIGKILL then
    assert time.monotonic() - began >= 1.0
    assert executor.poll(h).state == "stopped" and executor.device_holders() == {}


def test_an_adopted_stop_request_escalates_from_the_recorded_time(
    executor: LocalExecutor, tmp_path: Path
) -> None:
    h = executor.launch(spec("a", IGNORE_TERM, (0,)))
    wait_for(ready(executor, "a"))
    executor.request_stop(h, reason="preempted")
    restarted = LocalExecutor(tmp_path / "root", grace_s=1.0)
    adopted = restarted.adopt("a")
    assert adopted is not None
    wait_for(lambda: restarted.poll(adopted).settled, timeout_s=10.0)
    assert restarted.poll(adopted).state == "stopped"
