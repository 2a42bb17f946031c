"""cgroup v2 detection against fake /sys trees, limits written into a fake hierarchy, and the
path this machine takes."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from trainyard.exec import cgroups
from trainyard.exec.local import LaunchSpec, LocalExecutor


def _fake_sys(tmp_path: Path, controllers: str | None) -> Path:
    root = tmp_path / "sys"
    cg = root / "fs" / "cgroup"
    cg.mkdir(parents=True)
    if controllers is not None:
        (cg / "cgroup.controllers").write_text(controllers + "\n")
        (cg / "cgroup.subtree_control").write_text("")
    return root


def test_detect_v1_or_none(tmp_path: Path) -> None:
    s = cgroups.detect(_fake_sys(tmp_path, None))
    assert not s.supported and "no cgroup v2" in s.reason


def test_detect_missing_controllers(tmp_path: Path) -> None:
    s = cgroups.detect(_fake_sys(tmp_path, "io pids cpu"))
    assert not s.supported and "memory" in s.reason and "have: cpu io pids" in s.reason


def test_detect_supported(tmp_path: Path) -> None:
    s = cgroups.detect(_fake_sys(tmp_path, "cpuset cpu io memory pids"))
    assert s.supported and s.reason == ""
    assert s.base == tmp_path / "sys" / "fs" / "cgroup" / "trainyard"


def test_limit_values() -> None:
    assert cgroups.cpu_max(1.5) == "150000 100000"
    assert cgroups.cpu_max(0.001) == "1000 100000"
    assert cgroups.memory_max(2) == str(2 * 1024**3)


def test_launch_writes_limits_and_ranks_join_the_cgroup(tmp_path: Path) -> None:
    ex = LocalExecutor(tmp_path / "root", sys_root=_fake_sys(tmp_path, "cpu memory"))
    assert ex.limits_supported
    spec = LaunchSpec("lim", [sys.executable, "-c", "pass"], cpus=2, memory_gb=1)
    h = ex.launch(spec)
    assert h.cgroup is not None and "enforced" in h.notes[0]
    deadline = time.monotonic() + 10
    while not ex.poll(h).settled and time.monotonic() < deadline:
        time.sleep(0.02)
    assert ex.poll(h).state == "succeeded"
    assert (h.cgroup / "cpu.max").read_text() == "200000 100000"
    assert (h.cgroup / "memory.max").read_text() == str(1024**3)
    # the wrapper moved itself in before starting the command (here a plain file)
    assert int((h.cgroup / "cgroup.procs").read_text()) == h.pids[0]
    control = tmp_path / "sys" / "fs" / "cgroup" / "cgroup.subtree_control"
    assert control.read_text() == "+cpu +memory"


def test_this_machine(tmp_path: Path) -> None:
    ex = LocalExecutor(tmp_path)
    assert ex.limits_supported == cgroups.detect().supported
    h = ex.launch(LaunchSpec("m", [sys.executable, "-c", "pass"], memory_gb=1))
    if ex.limits_supported:  # pragma: no cover - depends on the machine
        assert h.notes and "enforced" in h.notes[0]  # by a cgroup, or not and why
    else:
        assert h.cgroup is None
        assert h.notes and "not enforced" in h.notes[0] and ex.cgroup_support.reason in h.notes[0]
    ex.stop(h, grace_s=2)
    assert ex.poll(h).settled
