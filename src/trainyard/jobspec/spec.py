"""`JobSpec` and `Limits`: the checked, immutable form of a job spec (data only).

Owned by `trainyard.jobspec` (the format is documented in its package docstring). Parsing
(`parse.py`) turns YAML text or a mapping into a `JobSpec` or raises `JobSpecError` naming the
field, and reads back what `to_dict` / `to_json` stored (`spec_from_dict`, `spec_from_json`);
`resolve.py` lets the planner choose the GPU count for a ``model:`` spec; `to_core_job` gives
the scheduling core's view. This module imports neither of them.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from trainyard.core.types import Job
from trainyard.jobspec.depends import ArraySpec, Dependency
from trainyard.jobspec.elastic import ElasticSpec
from trainyard.jobspec.errors import JobSpecError
from trainyard.planner.model import Model

__all__ = [
    "DEFAULT_NODES_OF",
    "FIELDS",
    "PLAN_ENV_PREFIX",
    "RESERVED_ENV",
    "RESERVED_ENV_PREFIXES",
    "RESOURCE_FIELDS",
    "JobSpec",
    "Limits",
]

FIELDS: Final = (
    "name",
    "queue",
    "command",
    "workers",
    "nodes",
    "gpus",
    "gpu_type",
    "gpu_memory_gb",
    "cpus",
    "memory_gb",
    "priority",
    "preemptible",
    "wait_for_capacity",
    "max_restarts",
    "min_runtime_s",
    "expected_duration_s",
    "time_limit_s",
    "topology",
    "env",
    "working_dir",
    "checkpoint_every",
    "model",
    "planner",
    "elastic",
    "after",
    "array",
    "visible_devices",
    "resume_from",
)
RESOURCE_FIELDS: Final = ("gpus", "gpu_type", "gpu_memory_gb", "cpus", "memory_gb")
RESERVED_ENV: Final = frozenset(
    {
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "GROUP_WORLD_SIZE",
        "ROLE_RANK",
        "ROLE_NAME",
        "ROLE_WORLD_SIZE",
        "NODE_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
    }
)
RESERVED_ENV_PREFIXES: Final = ("TRAINYARD_", "TORCHELASTIC_")
PLAN_ENV_PREFIX: Final = "TRAINYARD_PLAN_"
DEFAULT_NODES_OF: Final = 8
_MODEL_FIELDS: Final = frozenset(f.name for f in dataclasses.fields(Model))


@dataclass(frozen=True)
class Limits:
    """The largest request one job may make; None switches a check off.

    `max_workers` is per node (the ``workers`` field), `max_cpus` / `max_memory_gb` are for the
    whole job, `max_command_length` counts the characters of the command joined by spaces,
    `max_spec_bytes` the size of the YAML text. `Limits()` holds generous defaults that only
    catch mistakes; a server passes its cluster's real limits.
    """

    max_gpus_per_job: int | None = 1024
    max_gpus_per_node: int | None = None
    max_nodes: int | None = 256
    max_workers: int | None = 256
    max_cpus: float | None = 8192.0
    max_memory_gb: float | None = 131072.0
    max_command_length: int | None = 65536
    max_env_entries: int | None = 256
    max_restarts: int | None = 100
    max_spec_bytes: int | None = 1_000_000
    max_array_size: int | None = 10_000

    @classmethod
    def none(cls) -> Limits:
        """No limits at all (for specs read back from storage, accepted earlier)."""
        return cls(**{f.name: None for f in dataclasses.fields(cls)})


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    return value


@dataclass(frozen=True)
class JobSpec:
    """A validated job spec. Build it with `parse_job_spec` (the constructor does not check).

    `gpus` is the job's total GPU count (an elastic job's asked size; `elastic` holds its
    range, with `min_gpus` filled in); it is None only for a planner spec (``model:`` without
    ``gpus:``) that has not been `resolve`d yet. `env`, `model` and `planner` are read-only
    mappings. Equal specs compare equal; a spec is not hashable (it holds mappings).
    """

    name: str
    command: tuple[str, ...]
    queue: str = "default"
    workers: int = 1
    nodes: int = 1
    gpus: int | None = 0
    gpu_type: str | None = None
    gpu_memory_gb: float | None = None
    cpus: float | None = None
    memory_gb: float | None = None
    priority: int = 0
    preemptible: bool = True
    wait_for_capacity: bool = False  # accepted even if no node set of the cluster fits it now
    max_restarts: int = 3
    min_runtime_s: float = 0.0
    expected_duration_s: float | None = None
    time_limit_s: float | None = None  # an attempt that runs longer is stopped (TIMEOUT)
    topology: str | None = None
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    working_dir: str | None = None
    checkpoint_every: int | None = None
    model: str | Mapping[str, Any] | None = None
    planner: Mapping[str, Any] | None = None
    elastic: ElasticSpec | None = None
    after: tuple[Dependency, ...] = ()
    array: ArraySpec | None = None
    visible_devices: str = "node"  # "node": as torchrun; "rank": each rank its own only
    resume_from: str | None = None  # an ended job of yours whose checkpoints it starts from
    # Whether the spec said `priority:` itself (else its queue's default may apply); not a
    # field of the stored spec: a stored spec's priority is what it was given at submit.
    priority_given: bool = field(default=True, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "command", tuple(self.command))
        object.__setattr__(self, "env", _freeze(self.env))
        if isinstance(self.model, Mapping):
            object.__setattr__(self, "model", _freeze(self.model))
        if self.planner is not None:
            object.__setattr__(self, "planner", _freeze(self.planner))

    @property
    def ranks(self) -> int:
        """Processes in the job: `workers` per node times `nodes` (torchrun's WORLD_SIZE)."""
        return self.workers * self.nodes

    @property
    def core_topology(self) -> str | None:
        """The topology level the scheduler must keep the job inside: `topology` if given,
        else one node for a single-node rigid GPU job (`nodes: 1` means one node: its ranks
        share that node's devices; a job that may span nodes says `nodes:`). An elastic job's
        shape follows its size: as few nodes as it fits on, one while it fits on one
        (`topology: node` keeps it on one; outside review 10 found every elastic job held to
        one node, never reaching a `max_gpus` above a node's GPUs)."""
        if self.topology is not None:
            return self.topology
        return "node" if self.nodes == 1 and self.gpus and self.elastic is None else None

    @property
    def core_nodes(self) -> int:
        """The nodes the scheduler must place the job on exactly (`core.Job.nodes`): `nodes`
        for a rigid GPU job of several nodes (N machines, `gpus / N` GPUs each, never fewer
        machines), else 0 (one node is `core_topology`; an elastic job's shape follows its
        size)."""
        if self.nodes > 1 and self.gpus and self.elastic is None:
            return self.nodes
        return 0

    @property
    def gpus_per_worker(self) -> int:
        """GPUs each rank gets (0 for a CPU-only job); needs a resolved spec."""
        return self._resolved_gpus() // self.ranks

    @property
    def needs_planner(self) -> bool:
        """True for a ``model:`` spec whose GPU count the planner has yet to choose."""
        return self.gpus is None

    def _resolved_gpus(self) -> int:
        if self.gpus is None:
            raise JobSpecError(
                "gpus",
                "not chosen yet: the planner picks it for a model: spec; "
                "call jobspec.resolve(spec)",
            )
        return self.gpus

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data with every field (null where unset); `spec_from_dict` (in
        `parse.py`) reads it back."""
        out: dict[str, Any] = {}
        for name in FIELDS:
            out[name] = _thaw(getattr(self, name))
        if self.elastic is not None:
            out["elastic"] = self.elastic.to_dict()
        out["after"] = [d.to_dict() for d in self.after] or None
        out["array"] = self.array.text if self.array is not None else None
        return out

    def to_json(self) -> str:
        """`to_dict` as compact JSON with sorted keys (for storing in the database)."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    def to_core_job(self, job_id: str, submit_time: float, attained_service: float = 0.0) -> Job:
        """The scheduling core's view of this job (needs a resolved spec: `gpus` set); an
        elastic job carries its size range and batch range."""
        elastic = self.elastic
        return Job(
            id=job_id,
            name=self.name,
            queue=self.queue,
            gpus=self._resolved_gpus(),
            priority=self.priority,
            submit_time=submit_time,
            gpu_types=(self.gpu_type,) if self.gpu_type else (),
            gpu_memory_gb=self.gpu_memory_gb or 0.0,
            cpus=self.cpus or 0.0,
            memory_gb=self.memory_gb or 0.0,
            preemptible=self.preemptible,
            min_runtime=self.min_runtime_s,
            expected_duration=self.expected_duration_s,
            attained_service=attained_service,
            # one node means one node: the ranks of a single-node job share its devices
            topology=self.core_topology,
            min_gpus=elastic.min_gpus if elastic is not None else None,
            max_gpus=elastic.max_gpus if elastic is not None else None,
            elastic=elastic.core_elastic() if elastic is not None else None,
            nodes=self.core_nodes,
        )


# -- parsing ----------------------------------------------------------------------------------
