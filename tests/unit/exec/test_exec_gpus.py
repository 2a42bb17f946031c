"""GPU discovery: NVML absent (this machine), virtual devices, and a fake NVML with GPUs."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pynvml  # type: ignore[import-untyped]
import pytest

from trainyard.exec.gpus import discover, memory_gb


def test_nvml_absent_offers_no_gpus() -> None:
    inv = discover()
    if inv.gpus:  # pragma: no cover - only on a machine with a driver
        pytest.skip("this machine has real GPUs")
    assert inv.nvml_error  # says why: NVMLError_LibraryNotFound here
    assert not inv.virtual
    assert "no GPUs" in inv.describe()
    node = inv.to_node()
    assert node.gpus == 0 and not node.virtual
    assert node.cpus >= 1 and node.memory_gb > 0


def test_virtual_gpus_are_labelled_virtual() -> None:
    inv = discover(virtual=4, virtual_memory_gb=40.0)
    if not inv.virtual:  # pragma: no cover
        pytest.skip("this machine has real GPUs")
    assert len(inv.gpus) == 4 and all(g.virtual and g.name == "virtual" for g in inv.gpus)
    text = inv.describe()
    assert "VIRTUAL" in text and "not real" in text
    node = inv.to_node("box")
    assert node.name == "box" and node.gpus == 4 and node.virtual
    assert node.gpu_type == "virtual" and node.gpu_memory_gb == 40.0


def test_zero_or_negative_virtual() -> None:
    assert not discover(virtual=0).virtual
    with pytest.raises(ValueError, match="virtual"):
        discover(virtual=-1)


class _FakeNvml:
    NVMLError = pynvml.NVMLError

    def __init__(self, names: list[str], fail_at: str = "") -> None:
        self.names, self.fail_at, self.shutdown = names, fail_at, False

    def _maybe_fail(self, what: str) -> None:
        if what == self.fail_at:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)

    def nvmlInit(self) -> None:
        self._maybe_fail("init")

    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"550.54"

    def nvmlDeviceGetCount(self) -> int:
        self._maybe_fail("count")
        return len(self.names)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetIndex(self, h: int) -> int:
        return h

    def nvmlDeviceGetName(self, h: int) -> str:
        return self.names[h]

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return SimpleNamespace(total=80 * 1024**3)

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-{h:04d}"


def test_fake_nvml_with_gpus_wins_over_virtual() -> None:
    fake = _FakeNvml(["NVIDIA H100 80GB HBM3"] * 2)
    inv = discover(virtual=8, nvml=fake)
    assert fake.shutdown
    assert not inv.virtual and len(inv.gpus) == 2
    assert [g.uuid for g in inv.gpus] == ["GPU-0000", "GPU-0001"]
    assert "VIRTUAL" not in inv.describe() and "550.54" in inv.describe()
    node = inv.to_node()
    assert node.gpus == 2 and node.gpu_type == "NVIDIA H100 80GB HBM3"
    assert node.gpu_memory_gb == 80.0 and not node.virtual


@pytest.mark.parametrize("fail_at", ["init", "count"])
def test_nvml_errors_mean_no_gpus(fail_at: str) -> None:
    inv = discover(nvml=_FakeNvml(["A100"], fail_at=fail_at))
    assert inv.gpus == () and "NVMLError" in inv.nvml_error


def test_meminfo_parsing(tmp_path: Any) -> None:
    f = tmp_path / "meminfo"
    f.write_text("MemTotal:       25165824 kB\nMemFree: 1 kB\n")
    assert memory_gb(f) == 24.0
    assert memory_gb(tmp_path / "missing") == 0.0
