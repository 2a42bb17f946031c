"""The executor interface: what the platform loop asks of any engine that runs jobs.

An executor launches one attempt of a job (`LaunchSpec`: its ranks on the nodes and devices
the core chose), reports how it stands (`poll`: running, succeeded, failed, stopped, lost;
`RunStatus.infra` when the infrastructure, not the job, ended it), stops it with a grace
period (`request_stop` never blocks; `stop` waits), re-attaches after a server restart
(`adopt`, from what it recorded under the job's directory) and says which nodes it has
(`nodes`: None for an executor of this one machine, whose node the server registers itself)
and what is wrong with their GPUs (`gpu_problems`: node -> faults found now; {} for the local
executor, whose machine the platform checks itself).

Implementations: `exec/local.py` (`LocalExecutor`, processes on this machine),
`exec/ray/` (`RayExecutor`, ranks as Ray actors on the nodes of a Ray cluster) and
`exec/fake.py` (in memory, for tests of the loop only). `make(name, ...)` builds one by name
(`trainyard up --executor local|ray`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from trainyard.exec.gpuhealth import GpuProblem
from trainyard.exec.run import LaunchSpec, RunHandle, RunStatus

EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class NodeInfo:
    """A node as an executor of many machines sees it (`Executor.nodes`).

    `name` is stable across restarts of the node (a label the operator sets, else derived
    from the engine's id); `topology` is the path from the top level down (e.g. rack, leaf),
    from the node's labels; `alive` false: the engine lost the node."""

    name: str
    address: str
    cpus: float
    memory_gb: float
    gpus: int
    gpu_type: str
    gpu_memory_gb: float
    virtual: bool
    alive: bool = True
    topology: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    engine_id: str = ""  # the engine's own id of the node (Ray's node id)


@runtime_checkable
class Executor(Protocol):
    """See the module docstring; `LocalExecutor` documents each method's contract."""

    name: str
    root_dir: Path
    grace_s: float

    def launch(self, spec: LaunchSpec) -> RunHandle: ...

    def poll(self, handle: RunHandle) -> RunStatus: ...

    def request_stop(self, handle: RunHandle, reason: str = "") -> RunStatus: ...

    def stop(
        self, handle: RunHandle, grace_s: float | None = None, reason: str = ""
    ) -> RunStatus: ...

    def adopt(self, job_id: str, attempt: int | None = None) -> RunHandle | None: ...

    def known_jobs(self) -> list[str]: ...

    def handles(self) -> list[RunHandle]: ...

    def job_dir(self, job_id: str) -> Path: ...

    def nodes(self) -> list[NodeInfo] | None: ...

    def gpu_problems(self) -> dict[str, list[GpuProblem]]: ...

    def notes(self) -> list[str]: ...

    def close(self) -> None: ...
