"""`ExitWatcher` on real processes: each exit is reported with its pid, dead or bogus pids are
ignored, the watcher never reaps, and `close()` leaves no thread behind."""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from collections.abc import Iterator

import pytest

from trainyard.exec.watch import ExitWatcher

WAIT_S = 30.0


class Exits:
    """Records the pids the watcher reports, and lets a test wait for some."""

    def __init__(self) -> None:
        self.pids: list[int] = []
        self._changed = threading.Condition()

    def __call__(self, pid: int) -> None:
        with self._changed:
            self.pids.append(pid)
            self._changed.notify_all()

    def wait_for(self, pids: set[int]) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: pids <= set(self.pids), timeout=WAIT_S)


@pytest.fixture
def watched() -> Iterator[tuple[ExitWatcher, Exits]]:
    exits = Exits()
    watcher = ExitWatcher(exits)
    if not watcher.supported:
        watcher.close()
        pytest.skip("os.pidfd_open is unavailable on this platform")
    try:
        yield watcher, exits
    finally:
        watcher.close()


def _sleeper(seconds: float) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", str(seconds)])


def test_the_exit_of_a_watched_process_is_reported(
    watched: tuple[ExitWatcher, Exits],
) -> None:
    watcher, exits = watched
    proc = _sleeper(0.2)
    watcher.watch([proc.pid])
    assert exits.wait_for({proc.pid})
    assert exits.pids == [proc.pid]
    assert proc.wait(WAIT_S) == 0  # not reaped by the watcher: the exit code is still ours


def test_several_processes_each_reported_once(watched: tuple[ExitWatcher, Exits]) -> None:
    watcher, exits = watched
    procs = [_sleeper(0.1 * (i + 1)) for i in range(4)]
    watcher.watch([p.pid for p in procs[:2]])
    watcher.watch([p.pid for p in procs[1:]])  # one pid twice: watched once
    long = _sleeper(300)
    try:
        watcher.watch([long.pid])
        assert exits.wait_for({p.pid for p in procs})
        assert sorted(exits.pids) == sorted(p.pid for p in procs)
        assert long.pid not in exits.pids
        long.terminate()
        assert exits.wait_for({long.pid})
    finally:
        long.kill()
        long.wait(WAIT_S)
        for p in procs:
            p.wait(WAIT_S)
    assert sorted(exits.pids) == sorted([*(p.pid for p in procs), long.pid])


def test_dead_and_bogus_pids_are_ignored(watched: tuple[ExitWatcher, Exits]) -> None:
    watcher, exits = watched
    gone = _sleeper(0)
    gone.wait(WAIT_S)  # reaped: its pid names no process any more
    watcher.watch([gone.pid, 0, -1])
    alive = _sleeper(0.1)
    watcher.watch([alive.pid])
    assert exits.wait_for({alive.pid})
    alive.wait(WAIT_S)
    assert exits.pids == [alive.pid]


def test_an_exited_but_unreaped_process_is_reported(watched: tuple[ExitWatcher, Exits]) -> None:
    watcher, exits = watched
    zombie = _sleeper(0)
    os.waitid(os.P_PID, zombie.pid, os.WEXITED | os.WNOWAIT)  # exited, left unreaped
    watcher.watch([zombie.pid])
    assert exits.wait_for({zombie.pid})
    assert zombie.wait(WAIT_S) == 0


def test_close_stops_the_thread_and_closes_the_fds() -> None:
    before = {t.ident for t in threading.enumerate()}
    exits = Exits()
    watcher = ExitWatcher(exits)
    long = _sleeper(300)
    try:
        watcher.watch([long.pid])
        ours = [t for t in threading.enumerate() if t.ident not in before]
        assert [t.name for t in ours] == ["trainyard-exit-watch"]
        watcher.close()
        assert not any(t.is_alive() for t in ours)
        assert not watcher._fds and not watcher._pids
        watcher.close()  # twice is harmless
    finally:
        long.kill()
        long.wait(WAIT_S)
    assert exits.pids == []


def test_a_second_close_leaves_reused_fd_numbers_alone() -> None:
    watcher = ExitWatcher(Exits())
    numbers = (watcher._wake_r, watcher._wake_w)
    watcher.close()
    r, w = os.pipe()  # someone else's pipe, now living on the watcher's old fd numbers
    try:
        for number, fd in zip(numbers, (r, w), strict=True):
            if number != fd:
                os.dup2(fd, number)
        watcher.close()  # e.g. `Server.close()` after `serve()` already closed
        for number in numbers:
            os.fstat(number)  # still open
        os.set_blocking(numbers[0], False)
        with pytest.raises(BlockingIOError):
            os.read(numbers[0], 16)  # and nothing was written into it
    finally:
        for fd in {r, w, *numbers}:
            with contextlib.suppress(OSError):
                os.close(fd)
