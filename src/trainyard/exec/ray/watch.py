"""`Watcher`: a thread that wakes the server's loop when a Ray run changes.

It waits (0.2 s at a time) on every rank's pending `wait` ref and calls `wake()` as soon as
one resolves (a rank exited, or its actor died), then rests 0.2 s while the loop collects it.
Every 0.5 s it also compares the set of live Ray nodes with the last one seen and wakes the
loop when a node joined or left. Ray errors (a shutdown under way) only slow it down; it ends
with `stop()`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

NODES_EVERY_S = 0.5


class Watcher:
    def __init__(self, ray: Any, refs: Callable[[], list[Any]], wake: Callable[[], None]) -> None:
        self._ray = ray
        self._refs = refs
        self._wake = wake
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ray-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)

    def _run(self) -> None:
        ray = self._ray
        alive: frozenset[str] | None = None
        last_nodes = 0.0
        while not self._stop.is_set():
            try:
                refs = self._refs()
                if refs:
                    ready, _ = ray.wait(refs, num_returns=1, timeout=0.2)
                    if ready:
                        self._wake()
                        self._stop.wait(0.2)  # the loop collects it meanwhile
                else:
                    self._stop.wait(0.2)
                if time.monotonic() - last_nodes >= NODES_EVERY_S:
                    last_nodes = time.monotonic()
                    now = frozenset(n["NodeID"] for n in ray.nodes() if n.get("Alive"))
                    if alive is not None and now != alive:
                        self._wake()
                    alive = now
            except Exception:  # Ray shutting down: the loop stops with the server
                self._stop.wait(0.5)
