"""Fencing old attempts through the shared runs directory: no two attempts of a job train
at once, even when a node is cut off rather than dead.

Killing the actors of an earlier attempt (`RayExecutor._fence`) reaches only actors the
cluster still lists. A node that is frozen or partitioned is declared dead by Ray while its
processes live on: its actors are gone from the cluster's view, and their ranks keep
training, writing checkpoints beside the next attempt's (found by outside review 6, with a
raylet stopped by SIGSTOP). So the executor also writes the job's current attempt number to
`<job dir>/fence` before it starts an attempt, and each `RankSupervisor` reads that file every
`PERIOD_S` and kills its rank (the whole process group, SIGKILL) as soon as a later attempt
is named there. A rank that can write to the shared directory can read the fence there.

The new attempt waits `WAIT_S` (a few periods) after writing the fence, but only when an
earlier attempt may still have live ranks nobody can reach: a rank lost with its node, or a
run this executor never saw end. An attempt whose earlier ranks all reported their exit (a
killed rank, a stop, a resize) starts at once, so recovery from a rank's failure is not
slowed.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from trainyard.exec import procfs
from trainyard.exec.ray.runs import RayRun, attempt_of

__all__ = [
    "PERIOD_S",
    "WAIT_S",
    "current",
    "fence_file",
    "kill_named",
    "unsure",
    "watch",
    "write",
]

PERIOD_S: Final = 0.5  # how often a supervisor reads the fence
WAIT_S: Final = 4 * PERIOD_S  # a new attempt's wait when old ranks may be unreachable
FILE: Final = "fence"


def fence_file(job_dir: Path) -> Path:
    return job_dir / FILE


def write(job_dir: Path, attempt: int) -> None:
    """Name `attempt` the job's current one (atomically; before it starts)."""
    procfs.write_json_atomic(fence_file(job_dir), {"attempt": attempt})


def current(path: Path) -> int | None:
    """The attempt the fence names, or None when it cannot be read now."""
    try:
        data = procfs.read_json(path)
    except OSError:  # the shared filesystem failing now: read again later
        return None
    number = data.get("attempt") if isinstance(data, dict) else None
    return number if isinstance(number, int) else None


def watch(
    path: str, attempt: int, done: Callable[[float], bool], kill: Callable[[int], None]
) -> None:
    """Run in a supervisor's thread until its rank ends (`done(timeout)` waits that long
    and says whether it ended): kill the rank once the fence names a later attempt. A
    fence that cannot be read (the shared filesystem slow, the file not there yet) is read
    again at the next period; only a later attempt named kills."""
    fence = Path(path)
    while not done(PERIOD_S):
        now = current(fence)
        if now is not None and now > attempt:
            kill(now)
            return


def unsure(earlier: list[int], seen: Mapping[int, RayRun]) -> bool:
    """Whether a rank of one of the `earlier` attempts (by number; `seen`: those this
    executor has a record of) may still run where nobody can reach it: a rank lost with its
    actor (not killed by the executor on a live node), or an attempt with no record."""
    for number in earlier:
        run = seen.get(number)
        if run is None:
            return True
        if any(r.rank not in run.codes and r.rank not in run.killed for r in run.handle.ranks):
            return True
    return False


def kill_named(ray: Any, namespace: str, job_id: str, attempt: int) -> None:
    """Kill the actors of `job_id`'s attempts before `attempt` that the cluster still lists
    by name (also those of runs this executor never adopted), and wait up to 10 s for them
    to go."""
    prefix = f"{job_id}."
    old = []
    for name in ray.util.list_named_actors():
        if not isinstance(name, str) or not name.startswith(prefix):
            continue
        number = attempt_of(name, prefix)
        if number is not None and number < attempt:
            old.append(name)
    for name in old:
        with contextlib.suppress(ValueError, ray.exceptions.RayError):
            ray.kill(ray.get_actor(name, namespace=namespace), no_restart=True)
    deadline = time.monotonic() + 10.0
    while old and time.monotonic() < deadline:
        alive = set(ray.util.list_named_actors())
        old = [n for n in old if n in alive]
        if old:
            time.sleep(0.05)
