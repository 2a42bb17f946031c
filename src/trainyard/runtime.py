"""Process-level settings for shells that run scheduling cycles: the server's loop
(`server.loop.scheduling`), the simulator (`sim.engine`, which the demo runs) and the cycle timing.

`gc_paused()` suspends Python's cyclic garbage collector around a cycle. A cycle over a large
cluster allocates hundreds of thousands of short-lived objects; with the collector on, each
generation-2 pass traverses every live object of the process (the whole snapshot), which cost
about 300 ms of an 800 ms cycle at 100,000 GPUs. The core creates no reference cycles, so
reference counting frees everything it allocates and nothing piles up while collection is
off; the previous setting is restored afterwards. The core itself never touches the
collector: this is the shell's decision, like the clock.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Run the body with the cyclic garbage collector off (restored afterwards)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
