"""`ExitWatcher`: calls back as soon as any watched process exits (Linux pidfds, no polling).

The server's scheduler loop runs on events; a rank's exit is one. Each watched pid gets a
pidfd (`os.pidfd_open`, which works for any process we may signal, children or not, so
re-adopted runs are watched too); one thread waits on all of them with `select.poll` and calls
`on_exit(pid)` when one becomes readable (the process ended). Watching never reaps: the
executor still collects exit codes. Where pidfds are unavailable, `supported` is False and
the loop's timer alone notices exits.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
from collections.abc import Callable, Iterable


class ExitWatcher:
    def __init__(self, on_exit: Callable[[int], None]) -> None:
        self.on_exit = on_exit
        self.supported = hasattr(os, "pidfd_open")
        self._fds: dict[int, int] = {}  # fd -> pid
        self._pids: set[int] = set()
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="trainyard-exit-watch", daemon=True)
        self._thread.start()

    def watch(self, pids: Iterable[int]) -> None:
        """Watch these processes (already watched or gone ones are ignored)."""
        if not self.supported:
            return
        added = False
        with self._lock:
            for pid in pids:
                if pid in self._pids or pid <= 0:
                    continue
                try:
                    fd = os.pidfd_open(pid)
                except OSError:  # gone already, or not ours to see
                    continue
                self._fds[fd] = pid
                self._pids.add(pid)
                added = True
        if added:
            os.write(self._wake_w, b"w")

    def close(self) -> None:
        if self._stopped:  # closed already: its fd numbers may belong to someone else now
            return
        self._stopped = True
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")
        self._thread.join(timeout=2)
        with self._lock:
            for fd in self._fds:
                os.close(fd)
            self._fds.clear()
            self._pids.clear()
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    def _run(self) -> None:
        while not self._stopped:
            poller = select.poll()
            poller.register(self._wake_r, select.POLLIN)
            with self._lock:
                for fd in self._fds:
                    poller.register(fd, select.POLLIN)
            try:
                ready = poller.poll()
            except OSError:
                return
            for fd, _mask in ready:
                if fd == self._wake_r:
                    with contextlib.suppress(OSError):
                        os.read(self._wake_r, 4096)
                    continue
                with self._lock:
                    pid = self._fds.pop(fd, None)
                    if pid is not None:
                        self._pids.discard(pid)
                        os.close(fd)
                if pid is not None:
                    self.on_exit(pid)
