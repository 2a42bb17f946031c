"""What this node offers: its GPUs (NVML discovery), CPUs, memory and hostname.

`discover()` asks NVML (`pynvml`). On a machine without the driver NVML raises
`NVMLError_LibraryNotFound` and the node offers no GPUs, unless `virtual=N` is given: then it
offers N *declared* devices flagged `virtual=True`, type "virtual". Those are not GPUs: jobs
placed on them run on the CPU. Every description of such an inventory says so, and
`to_node()` marks the core `Node` virtual.
"""

from __future__ import annotations

import contextlib
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainyard.core.types import Node

VIRTUAL_TYPE = "virtual"
VIRTUAL_MEMORY_GB = 80.0


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    memory_gb: float
    uuid: str
    virtual: bool = False


@dataclass(frozen=True)
class GpuInventory:
    hostname: str
    gpus: tuple[Gpu, ...]
    cpus: int
    memory_gb: float
    virtual: bool = False
    nvml_error: str = ""  # why NVML found no GPU (empty when it found some)
    driver_version: str = ""

    @property
    def gpu_type(self) -> str:
        return self.gpus[0].name if self.gpus else "none"

    def describe(self) -> str:
        head = f"node {self.hostname}: {self.cpus} CPUs, {self.memory_gb:.1f} GB memory"
        if not self.gpus:
            why = f" (NVML: {self.nvml_error})" if self.nvml_error else ""
            return f"{head}, no GPUs{why}"
        if self.virtual:
            return (
                f"{head}, {len(self.gpus)} VIRTUAL GPUs (declared, not real: no GPU was found"
                f"{'; NVML: ' + self.nvml_error if self.nvml_error else ''}; jobs placed on"
                f" them run on the CPU)"
            )
        lines = [f"{head}, {len(self.gpus)} GPUs (driver {self.driver_version or '?'})"]
        lines += [f"  gpu {g.index}: {g.name} {g.memory_gb:.0f} GB {g.uuid}" for g in self.gpus]
        return "\n".join(lines)

    def to_node(self, name: str | None = None) -> Node:
        """The core's view of this node (one device class: the first GPU's type and the
        smallest memory, since a core `Node` is homogeneous)."""
        memory = min((g.memory_gb for g in self.gpus), default=VIRTUAL_MEMORY_GB)
        return Node(
            name=name or self.hostname,
            gpus=len(self.gpus),
            gpu_type=self.gpu_type,
            gpu_memory_gb=memory,
            cpus=float(self.cpus),
            memory_gb=self.memory_gb,
            virtual=self.virtual,
        )


def memory_gb(meminfo: Path = Path("/proc/meminfo")) -> float:
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / (1024 * 1024)
    except (OSError, ValueError, IndexError):
        pass
    return 0.0


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def nvml_gpus(nvml: Any) -> tuple[tuple[Gpu, ...], str, str]:
    """(GPUs, driver version, error) from an NVML module (pynvml or a test double)."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as e:
        return (), "", f"{type(e).__name__}: {e}"
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        found = []
        for i in range(nvml.nvmlDeviceGetCount()):
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            found.append(
                Gpu(
                    index=int(nvml.nvmlDeviceGetIndex(h)),
                    name=_text(nvml.nvmlDeviceGetName(h)),
                    memory_gb=nvml.nvmlDeviceGetMemoryInfo(h).total / 1024**3,
                    uuid=_text(nvml.nvmlDeviceGetUUID(h)),
                )
            )
        return tuple(found), driver, "" if found else "no devices"
    except nvml.NVMLError as e:
        return (), "", f"{type(e).__name__}: {e}"
    finally:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


def discover(
    virtual: int | None = None,
    *,
    virtual_memory_gb: float = VIRTUAL_MEMORY_GB,
    nvml: Any = None,
) -> GpuInventory:
    """This node's inventory. Real GPUs win over `virtual`; virtual devices are offered only
    when NVML finds none and `virtual` is a positive count."""
    if virtual is not None and virtual < 0:
        raise ValueError(f"virtual: expected a GPU count >= 0, got {virtual}")
    if nvml is None:
        import pynvml  # type: ignore[import-untyped]

        nvml = pynvml
    gpus, driver, error = nvml_gpus(nvml)
    is_virtual = False
    if not gpus and virtual:
        gpus = tuple(
            Gpu(i, VIRTUAL_TYPE, virtual_memory_gb, f"virtual-{i}", virtual=True)
            for i in range(virtual)
        )
        is_virtual = True
    return GpuInventory(
        hostname=socket.gethostname(),
        gpus=gpus,
        cpus=os.cpu_count() or 1,
        memory_gb=memory_gb(),
        virtual=is_virtual,
        nvml_error=error,
        driver_version=driver,
    )
