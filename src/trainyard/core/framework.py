"""Extension points of the cycle: plugin protocols, registries by name, and profiles.

Plugins answer narrow questions; each protocol says how several of them combine:

- `JobOrder` (one per profile): a sort key for pending jobs inside a queue; lower runs first.
- `QueueOrder` (one per profile): `drf` serves the queue with the lowest fair-share key next
  (hierarchically); `global` ignores queues and walks one list in job order.
- `Scorer` (any number, weighted sum): rates every candidate placement in [0, 1] in one call;
  the highest total wins, ties go to the first candidate (so decisions are deterministic).
- `Action` (ordered list): a step of the cycle, run in the profile's order of disruption.
- `Evictor` (one per evicting action, registered under the action's name in `EVICTORS`):
  try to place one pending job by evicting others (True if it was placed). The incremental
  arrival path (`incremental.py`) asks it for a single arrival, so a new evicting action
  needs no change there.

A `Profile` names one choice for each, plus a few numeric knobs. Everything is found by name in
a `Registry`, whose error for a wrong name lists the known names and the closest match, so a
config file or CLI flag can pick policies safely.

This is the core's lowest layer: it imports nothing of the core but `types` (a test checks
it). So the protocols that take the cycle (`Cycle`), the cluster state (`ClusterState`) or
candidate placements (`Candidate`) are generic in those types, and the modules that own
them name the concrete form (`Scorer[ClusterState, Candidate]` in `placement.py`). The
registries hold plugins with those arguments as `Any`: registering one still checks its
arity and result; its argument types are checked in the module that defines it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Generic, Protocol, TypeVar

from trainyard.core.types import Job
from trainyard.errors import suggest

T = TypeVar("T")
CycleT = TypeVar("CycleT")  # the working context of one cycle (`cycle.Cycle`)
StateT = TypeVar("StateT")  # the mutable cluster state (`state.ClusterState`)
CandT = TypeVar("CandT")  # a candidate placement (`placement.Candidate`)


class UnknownNameError(KeyError):
    """A registry lookup failed; the message lists what exists."""

    def __init__(self, kind: str, name: str, known: list[str]) -> None:
        close = suggest(name, known)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        self.message = f"unknown {kind} {name!r}{hint} (known: {', '.join(known)})"
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message


class Registry(Generic[T]):
    """Name -> plugin, with helpful errors."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str, item: T) -> T:
        if name in self._items:
            raise ValueError(f"{self.kind} {name!r} registered twice")
        self._items[name] = item
        return item

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise UnknownNameError(self.kind, name, self.names()) from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items


class JobOrder(Protocol):
    """Sort key of a pending job within its queue; lower is served first."""

    def __call__(self, job: Job, profile: Profile) -> tuple[Any, ...]: ...


Scorer = Callable[[StateT, Job, list[CandT]], list[float]]
"""Rates each candidate placement in [0, 1]; higher is better (one call per decision)."""

Action = Callable[[CycleT], None]
"""One step of the cycle, run on its working context."""

Evictor = Callable[[CycleT, Job], bool]
"""Places one pending job by evicting others if the action's rules allow; True if placed."""

JOB_ORDERS: Registry[JobOrder] = Registry("job order")
QUEUE_ORDERS: Registry[str] = Registry("queue order")
SCORERS: Registry[Scorer[Any, Any]] = Registry("placement scorer")
ACTIONS: Registry[Action[Any]] = Registry("action")
EVICTORS: Registry[Evictor[Any]] = Registry("evicting action")
PROFILES: Registry[Profile] = Registry("profile")

QUEUE_ORDERS.register("drf", "drf")
QUEUE_ORDERS.register("global", "global")
QUEUE_ORDERS.register("las_drf", "las_drf")  # least-served next job first, then DRF (order.py)


@dataclass(frozen=True, slots=True)
class Profile:
    """A complete scheduling policy: actions, orders, scorers and knobs."""

    name: str
    description: str = ""
    actions: tuple[str, ...] = ("allocate", "backfill", "reclaim", "preempt")
    job_order: str = "priority"
    queue_order: str = "drf"
    scorers: tuple[tuple[str, float], ...] = (
        ("topology", 4.0),
        ("fragmentation", 2.0),
        ("binpack", 1.0),
    )
    strict_order: bool = False  # stop at the first job that does not fit (classic FIFO)
    las_thresholds: tuple[float, ...] = (57_600.0,)  # GPU-seconds between LAS priority levels
    # LAS preemption evicts a job only for waiting jobs that can use its GPUs: no victim
    # holds more than the queue's waiting jobs of a lower LAS level ask for in all (outside
    # review 14: 16 GPUs stopped for one 1-GPU job). Off in every built-in profile: on
    # Pollux's rigid workloads it cost `default` its lead over Tiresias, and 9 % on the
    # whole Philly trace (docs/benchmarks.md, "Outside review 14")
    las_preempt_filled: bool = False
    usage_weight: float = 0.5  # weight of decayed usage history in the fair-share key
    max_reservations: int = 1  # head-of-line jobs that get a backfill reservation
    # A blocked head that fits one node but whose start cannot be estimated (the jobs in its
    # way have no expected duration) gets a reservation anyway once it has waited this long:
    # on the devices of the jobs that started most recently, start unknown (backfill.py).
    # None: never (such a head gets no reservation and backfill is greedy).
    reserve_unknown_after_s: float | None = None
    # The same for a head that spans several nodes, once it has waited this long (it then
    # drains the nodes it will run on: small jobs no longer take what frees on them, so
    # they cannot starve it). None: never (such a head waits for an estimate or free room).
    reserve_gang_after_s: float | None = None
    split_small_jobs: bool = True  # may a job that could fit one node span nodes when none has room
    # Delay scheduling (Zaharia et al., EuroSys'10): a job that fits one node waits up to this
    # many seconds after submission for one before it may span nodes (0: span at once).
    locality_wait_s: float = 0.0
    # Which of two queues tied on fair share is served first (queue order drf): "declared"
    # (the order the queues are listed in) or "smaller" (the queue whose next job asks for
    # fewer GPUs; declared order between equal sizes).
    queue_tie_break: str = "declared"
    # Elastic jobs (action `resize`): a job grows only for at least this relative goodput
    # gain (0.1: +10%), and not within `resize_hold_s` of its last (re)start, so that jobs
    # are not restarted for noise (every resize costs a checkpoint and a relaunch).
    resize_min_gain: float = 0.1
    resize_hold_s: float = 60.0
    # The time a restart costs a job (checkpoint, relaunch, warm-up): a running job moves only
    # for a gain that repays it over its age so far, (age + c) / (age - restarts x c) - 1 (age
    # since submission; Pollux's restart discount, Qiao et al., OSDI'21, section 4.2). 0: off.
    # 90 s and a 60 s hold were the best of those tried on the 8 Pollux workloads (docs).
    resize_restart_s: float = 90.0
    # A rebalancing move restarts every job it grows or shrinks. It is made only if, over this
    # horizon (or each job's time left, when shorter), the time the growing jobs gain exceeds
    # the time the shrunk ones lose plus every restart (weighted as the rebalance weighs
    # them; actions/rebalance.py). 0: off. 300 s (a restart a third of it) cut the restarts
    # on the 8 Pollux workloads by a third and their mean JCT by 3% (docs/benchmarks.md).
    # When the jobs report their work left and the class's allocation has not changed for
    # longer, that time is the horizon instead (actions/moves.py, `move_horizon`).
    resize_horizon_s: float = 300.0

    def validate(self) -> None:
        """Raise `UnknownNameError` / `ValueError` for names or knobs that cannot work."""
        for action in self.actions:
            ACTIONS.get(action)
        JOB_ORDERS.get(self.job_order)
        QUEUE_ORDERS.get(self.queue_order)
        for scorer, weight in self.scorers:
            SCORERS.get(scorer)
            if weight < 0:
                raise ValueError(f"profile {self.name}: scorer {scorer} weight must be >= 0")
        if self.queue_tie_break not in ("declared", "smaller"):
            raise ValueError(
                f"profile {self.name}: queue_tie_break must be declared or smaller, "
                f"got {self.queue_tie_break!r}"
            )
        if not self.locality_wait_s >= 0:
            raise ValueError(f"profile {self.name}: locality_wait_s must be >= 0")
        if self.reserve_unknown_after_s is not None and not self.reserve_unknown_after_s >= 0:
            raise ValueError(f"profile {self.name}: reserve_unknown_after_s must be >= 0")
        if self.reserve_gang_after_s is not None and not self.reserve_gang_after_s >= 0:
            raise ValueError(f"profile {self.name}: reserve_gang_after_s must be >= 0")
        if self.max_reservations < 0:
            raise ValueError(f"profile {self.name}: max_reservations must be >= 0")
        if list(self.las_thresholds) != sorted(self.las_thresholds):
            raise ValueError(f"profile {self.name}: las_thresholds must be increasing")

    def may_split(self, job: Job, now: float) -> bool:
        """May `job`, which fits one node, span several now (`split_small_jobs`, and its
        locality wait is over)?"""
        return self.split_small_jobs and now - job.submit_time >= self.locality_wait_s

    def with_overrides(self, **changes: Any) -> Profile:
        """A copy with some fields changed (validated)."""
        out = replace(self, **changes)
        out.validate()
        return out


def get_profile(name: str) -> Profile:
    """The registered profile called `name` (raises `UnknownNameError`)."""
    return PROFILES.get(name)
