"""CPU and memory limits for a job's processes with cgroup v2, where the machine allows it.

`detect(sys_root)` decides once whether limits can be enforced and says why not otherwise
(cgroup v1 or no cgroup filesystem, controllers missing, no write access). `JobCgroup`
creates `<cgroup root>/trainyard/<job>-a<attempt>`, writes `cpu.max` and `memory.max`, and
each rank wrapper moves itself in (writing its pid to `cgroup.procs`) before it starts the
rank's command, so every process of the rank is limited from its first instruction. The
`sys_root` parameter lets tests point the detection and the writes at a fake tree.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

CPU_PERIOD_US = 100_000
NEEDED = ("cpu", "memory")


@dataclass(frozen=True)
class CgroupSupport:
    supported: bool
    reason: str  # why not (empty when supported)
    root: Path  # the cgroup v2 mount (sys_root/fs/cgroup)

    @property
    def base(self) -> Path:
        return self.root / "trainyard"


def detect(sys_root: Path = Path("/sys")) -> CgroupSupport:
    root = sys_root / "fs" / "cgroup"
    controllers_file = root / "cgroup.controllers"
    if not controllers_file.is_file():
        return CgroupSupport(
            False, f"no cgroup v2 hierarchy at {root} (cgroup v1 or no cgroup filesystem)", root
        )
    try:
        controllers = set(controllers_file.read_text().split())
    except OSError as e:
        return CgroupSupport(False, f"cannot read {controllers_file}: {e}", root)
    missing = [c for c in NEEDED if c not in controllers]
    if missing:
        have = " ".join(sorted(controllers)) or "none"
        return CgroupSupport(
            False, f"cgroup v2 controllers {', '.join(missing)} not available (have: {have})", root
        )
    if not os.access(root, os.W_OK) or _read_only(root):
        return CgroupSupport(False, f"no write access to {root}", root)
    return CgroupSupport(True, "", root)


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return True


def cpu_max(cpus: float) -> str:
    """`cpu.max` for a limit of `cpus` cores: quota and period in microseconds."""
    return f"{max(1000, round(cpus * CPU_PERIOD_US))} {CPU_PERIOD_US}"


def memory_max(memory_gb: float) -> str:
    return str(int(memory_gb * 1024**3))


def _enable_controllers(group: Path) -> None:
    control = group / "cgroup.subtree_control"
    current = set(control.read_text().split()) if control.exists() else set()
    wanted = [c for c in NEEDED if c not in current]
    if wanted:
        control.write_text(" ".join(f"+{c}" for c in wanted))


@dataclass(frozen=True)
class JobCgroup:
    path: Path

    @staticmethod
    def create(
        support: CgroupSupport,
        name: str,
        cpus: float | None,
        memory_gb: float | None,
    ) -> JobCgroup:
        """Create the job's cgroup with its limits. Raises OSError when the kernel refuses."""
        _enable_controllers(support.root)
        support.base.mkdir(exist_ok=True)
        _enable_controllers(support.base)
        path = support.base / name
        path.mkdir(exist_ok=True)
        if cpus is not None:
            (path / "cpu.max").write_text(cpu_max(cpus))
        if memory_gb is not None:
            (path / "memory.max").write_text(memory_max(memory_gb))
        return JobCgroup(path)

    def remove(self) -> None:
        """Remove the (empty) cgroup; a cgroup that still holds processes stays."""
        with contextlib.suppress(OSError):
            self.path.rmdir()
