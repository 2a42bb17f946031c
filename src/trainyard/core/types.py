"""Plain, immutable values that flow into and out of the scheduling core.

This module owns the vocabulary of the core: the cluster (`Node`, `Topology`), the tenants
(`Queue`), the work (`Job`, `RunningJob`, an elastic job's `Elastic` with its `StepSample`s)
and the result of a cycle (`Placement`, `Eviction`, `Resize`, `Reservation`, `PendingReason`,
`Decision`). Everything here is a frozen dataclass; nobody
mutates these values. The mutable index the cycle works on lives in `state.py`.

Nomenclature:
- *device class*: GPUs of one type with one memory size (`H100` 80 GB). A gang never mixes
  device classes.
- *domain*: a node of the topology tree above the node level (leaf switch, spine, ...).
  Inside a node the GPUs form NVLink *islands* of `Node.island_size` devices.
- *gang*: all GPUs of a job; placed whole or not at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal, NamedTuple

PendingCode = Literal[
    "capacity",  # not enough free GPUs of an acceptable class right now
    "fragmented",  # enough free GPUs in total, but not inside the required domain
    "resources",  # GPUs free, but not the CPU / memory that goes with them
    "quota",  # the job's queue (or an ancestor) is at its limit / guaranteed share
    "reservation",  # held back so it does not delay a reserved head-of-line job
    "order",  # a strict-order policy (fifo) waits for the head of the line
    "unresolvable",  # can never run on this cluster as configured
]

ActionName = Literal["allocate", "backfill", "reclaim", "preempt", "las_preempt", "resize"]


@dataclass(frozen=True, slots=True)
class Topology:
    """Names of the topology levels above the node, outermost first.

    `levels=("spine", "leaf")` means every node carries a path `(spine_name, leaf_name)`.
    `bandwidth_gbps` maps a level name (and the implicit `"island"`, `"node"` and `"cluster"`)
    to the bandwidth a gang sees when it spans that level; the planner and scorers read it.
    """

    levels: tuple[str, ...] = ()
    bandwidth_gbps: tuple[tuple[str, float], ...] = ()

    def bandwidth(self, level: str) -> float | None:
        for name, value in self.bandwidth_gbps:
            if name == level:
                return value
        return None


# `Node.down` words that name an operator's hold (the node comes back when undrained)
OPERATOR_HOLDS: tuple[str, ...] = ("", "drained", "cordoned")


@dataclass(frozen=True, slots=True)
class Node:
    """A machine with `gpus` identical devices (homogeneous nodes are the norm in GPU clusters).

    `path` names this node's domain at every topology level, outermost first; it has one entry
    per `Topology.levels`. Devices `[k*island_size, (k+1)*island_size)` form NVLink island k.
    `unavailable` lists device indices that must not be used (failed or drained GPUs).
    `spare`: a hot spare, kept idle for jobs recovering from a failure (`Job.recovering`),
    which try the spares before any other node (`core/spares.py`); no other job goes there.
    `down`: why a node that is not `schedulable` takes no work, as reasons say it. An
    operator's hold is "" (read as "drained"), "drained" or "cordoned" (`OPERATOR_HOLDS`):
    its free GPUs are offered as ones an undrain gives back. Any other word is a cause no
    operator can undo that way, e.g. "lost": its GPUs are not offered.
    """

    name: str
    gpus: int
    gpu_type: str = "gpu"
    gpu_memory_gb: float = 80.0
    cpus: float = 64.0
    memory_gb: float = 512.0
    path: tuple[str, ...] = ()
    island_size: int = 0  # 0: the whole node is one island
    schedulable: bool = True
    unavailable: tuple[int, ...] = ()
    virtual: bool = False  # devices are declared, not discovered (no real GPU behind them)
    spare: bool = False
    down: str = ""


@dataclass(frozen=True, slots=True)
class Queue:
    """A tenant or team. Queues form a tree through `parent`.

    - `guaranteed`: GPUs this queue may always get back (reclaim takes lent GPUs back).
    - `limit`: GPUs this queue may never exceed (None: no limit).
    - `weight`: its share of idle capacity relative to its siblings (fair share).
    - `usage`: its decayed historical use, as a share of the cluster (0..1), kept by the shell;
      fair share orders queues by current plus historical use.
    """

    name: str
    parent: str | None = None
    guaranteed: int = 0
    limit: int | None = None
    weight: float = 1.0
    usage: float = 0.0


class StepSample(NamedTuple):
    """One observed training step of an elastic job: `step_time` seconds per step of a global
    batch of `batch` samples on `gpus` GPUs spread over `nodes` nodes (the shell or the SDK
    reports what the job measured)."""

    gpus: int
    nodes: int
    batch: int
    step_time: float


@dataclass(frozen=True, slots=True)
class Elastic:
    """What the goodput model knows of an elastic job (`core.goodput`).

    - `batch`: the global batch the job trains at when it cannot adapt (and the initial batch
      of the statistical-efficiency gain); `max_batch`: the largest it may adapt to (equal to
      `batch`: a fixed global batch); `max_local_batch`: the largest per-GPU batch (0: any).
    - `samples`: observed steps at the sizes it has run (newest last).
    - `grad_sqr`, `grad_var`: the gradient's squared norm and variance at `batch`, when the job
      reports them (Pollux's statistical efficiency; 0 and 0: efficiency 1 at every batch).
    - `remaining`: samples the job still has to train, when it knows (a job that reports its
      total steps or samples: the SDK's `Reporter(total_steps=...)`); 0: unknown. The
      rebalance then weighs the job by the time it has left (`actions/rebalance.py`).
    """

    batch: int = 0
    max_batch: int = 0
    max_local_batch: int = 0
    samples: tuple[StepSample, ...] = ()
    grad_sqr: float = 0.0
    grad_var: float = 0.0
    min_local_batch: int = 0  # the smallest per-GPU batch (0: any)
    remaining: float = 0.0


@dataclass(frozen=True, slots=True)
class Job:
    """A gang of `gpus` devices (0: a CPU-only job on one node).

    - `gpu_types`: acceptable device types in order of preference (empty: any type).
    - `gpu_memory_gb`: minimum memory per device.
    - `cpus`, `memory_gb`: for the whole job; split across nodes in proportion to GPUs.
    - `topology`: a level the gang must stay inside (`"island"`, `"node"`, or a topology level
      name); None means "as tight as possible, but spanning is allowed".
    - `nodes`: 0 (the default) lets the core shape the gang (as few nodes as it fits on);
      N >= 1 asks for exactly N distinct nodes with `gpus / N` GPUs on each, as a job whose
      ranks are laid out per node needs (`nodes: 2` in a spec is two machines, never one).
      Elastic jobs take 0: their shape follows their size.
    - `min_runtime`: seconds a started job runs before it may be preempted.
    - `expected_duration`: seconds, when known (for reservations, backfill, shortest-first).
    - `attained_service`: GPU-seconds received so far (least-attained-service ordering).
    - `min_gpus`/`max_gpus`: elastic bounds: the resize action may start the job at, or move
      it to, any size in [min_gpus, max_gpus] (None: `gpus`); `gpus` is the size it asks for
      when pending and the size it holds when running. A job without them is rigid.
    - `elastic`: what the goodput model knows of it (observed steps, batch range, gradient
      statistics); None for a rigid job, or an elastic one that reported nothing yet.
    - `restarts`: times it was started again after its first start (preemptions, resizes,
      failures): the resize action weighs another restart against them.
    - `recovering`: requeued after a failure (its node or a rank was lost): every job order
      puts it before the other jobs of its queue.
    """

    id: str
    queue: str = "default"
    gpus: int = 1
    priority: int = 0
    submit_time: float = 0.0
    gpu_types: tuple[str, ...] = ()
    gpu_memory_gb: float = 0.0
    cpus: float = 0.0
    memory_gb: float = 0.0
    preemptible: bool = True
    min_runtime: float = 0.0
    expected_duration: float | None = None
    attained_service: float = 0.0
    topology: str | None = None
    min_gpus: int | None = None
    max_gpus: int | None = None
    name: str = ""
    elastic: Elastic | None = None
    restarts: int = 0
    recovering: bool = False
    nodes: int = 0

    def ran_for(self) -> float:
        """Seconds this job has run in all: its attained service over its size (exact for a
        rigid job; an elastic one's at its present size)."""
        return self.attained_service / self.gpus if self.gpus else 0.0

    def waited(self, now: float) -> float:
        """Seconds this pending job has waited in all since its submission (the time elapsed
        less the time it ran)."""
        return max(0.0, now - self.submit_time - self.ran_for())

    def with_gpus(self, gpus: int) -> Job:
        """This job at another size (an elastic job started small, grown or shrunk): its CPU
        and memory scale with its GPUs, as they are per-GPU needs of the same program."""
        if gpus == self.gpus:
            return self
        f = gpus / self.gpus if self.gpus else 1.0
        return replace(self, gpus=gpus, cpus=self.cpus * f, memory_gb=self.memory_gb * f)

    @property
    def is_elastic(self) -> bool:
        """Whether the resize action may change this job's size."""
        lo = self.min_gpus if self.min_gpus is not None else self.gpus
        hi = self.max_gpus if self.max_gpus is not None else self.gpus
        return self.gpus > 0 and lo < hi

    @property
    def size_range(self) -> tuple[int, int]:
        """(fewest, most) GPUs: its size range, or its size when it has none (at least 1)."""
        lo = self.min_gpus if self.min_gpus is not None else self.gpus
        hi = self.max_gpus if self.max_gpus is not None else self.gpus
        return max(1, lo), max(1, hi)


class NodeDevices(NamedTuple):
    """The devices of one node that a job holds."""

    node: str
    devices: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job that holds devices, with the time it (re)started."""

    job: Job
    placement: tuple[NodeDevices, ...]
    started_at: float = 0.0


# The values below are NamedTuples rather than frozen dataclasses: a cycle over 100,000 GPUs
# creates tens of thousands of them, and tuples are immutable and several times cheaper.


class Placement(NamedTuple):
    """Start `job_id` on these devices. When `after_evictions` is not empty the devices are
    being freed by those evictions: start the job only once they have stopped."""

    job_id: str
    queue: str
    nodes: tuple[NodeDevices, ...]
    action: ActionName
    gpu_type: str = ""
    after_evictions: tuple[str, ...] = ()

    @property
    def gpus(self) -> int:
        return sum(len(nd.devices) for nd in self.nodes)


class Eviction(NamedTuple):
    """Stop a running job (whole gang) so that `for_job` can start; it goes back to pending."""

    job_id: str
    queue: str
    gpus: int
    action: ActionName
    for_job: str
    reason: str


class NotGrown(NamedTuple):
    """Why a running elastic job below its `max_gpus` was not grown into the GPUs left idle
    this cycle (the resize action's note; every resize carries a reason, and so does the
    absence of one a user waits for). `until`: when the rule that holds it back lifts, if a
    time does (its hold ends, its restarts are repaid), else None."""

    reason: str
    until: float | None = None


class Reservation(NamedTuple):
    """Devices held for a blocked head-of-line job from `start_time` on (best estimate;
    None when unknown: held blind, on the devices of the jobs likeliest to end first)."""

    job_id: str
    start_time: float | None
    nodes: tuple[NodeDevices, ...]


class Resize(NamedTuple):
    """Restart running `job_id` from `from_gpus` GPUs on `nodes` (its new placement, whole).
    The job checkpoints, stops and starts again at the new size; `after_evictions` are jobs
    (evicted or resized) whose devices the new placement uses and that must stop first."""

    job_id: str
    queue: str
    from_gpus: int
    nodes: tuple[NodeDevices, ...]
    reason: str
    after_evictions: tuple[str, ...] = ()

    @property
    def gpus(self) -> int:
        return sum(len(nd.devices) for nd in self.nodes)


class PendingReason(NamedTuple):
    """Why a job is still pending after the cycle, for a person to read."""

    code: PendingCode
    message: str
    estimated_start: float | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    """Everything one cycle decided. Applying it is the shell's job."""

    now: float
    profile: str
    placements: tuple[Placement, ...] = ()
    evictions: tuple[Eviction, ...] = ()
    reservations: tuple[Reservation, ...] = ()
    pending: dict[str, PendingReason] = field(default_factory=dict)
    resizes: tuple[Resize, ...] = ()
    not_grown: dict[str, NotGrown] = field(default_factory=dict)  # running job id -> why

    @property
    def is_empty(self) -> bool:
        """True when the cycle changes nothing in the cluster."""
        return not self.placements and not self.evictions and not self.resizes
