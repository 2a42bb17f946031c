"""A stand-in for the NVML functions `exec/gpuhealth.py` calls (this machine has no GPU),
raising the real pynvml error classes; used by the GPU health tests of the executor and of
the platform loop."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pynvml  # type: ignore[import-untyped]


class FakeNvml:
    """The NVML functions GpuHealth calls, over `count` healthy GPUs unless told otherwise.

    Each failure knob maps a device index to the pynvml error class its query raises.
    """

    NVMLError = pynvml.NVMLError
    NVMLError_Timeout = pynvml.NVMLError_Timeout
    NVMLError_NotSupported = pynvml.NVMLError_NotSupported
    NVMLError_FunctionNotFound = pynvml.NVMLError_FunctionNotFound
    NVMLError_GpuIsLost = pynvml.NVMLError_GpuIsLost
    NVMLError_LibraryNotFound = pynvml.NVMLError_LibraryNotFound
    NVMLError_DriverNotLoaded = pynvml.NVMLError_DriverNotLoaded

    def __init__(self, count: int = 2, init_error: type[Exception] | None = None) -> None:
        self.count = count
        self.init_error = init_error
        self.handle_errors: dict[int, type[Exception]] = {}
        self.register_errors: dict[int, type[Exception]] = {}
        self.ecc: dict[int, int | type[Exception]] = {}  # default 0
        self.rows: dict[int, tuple[int, int, int, int] | type[Exception]] = {}  # default clean
        self.retired: dict[int, int | type[Exception]] = {}  # default 0 (not pending)
        self.queue: list[tuple[int, int]] = []  # (device index, XID) events not yet read
        self.registered: list[tuple[int, int]] = []  # (device index, event mask)
        self.waits: list[int] = []  # the timeout of each nvmlEventSetWait call
        self.inits = self.shutdowns = self.frees = 0
        self.event_set = object()

    def nvmlInit(self) -> None:
        self.inits += 1
        if self.init_error is not None:
            raise self.init_error()

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, index: int) -> tuple[str, int]:
        if index in self.handle_errors:
            raise self.handle_errors[index]()
        return ("gpu", index)

    def nvmlDeviceGetIndex(self, handle: tuple[str, int]) -> int:
        return handle[1]

    def nvmlEventSetCreate(self) -> object:
        return self.event_set

    def nvmlDeviceRegisterEvents(self, handle: tuple[str, int], mask: int, es: object) -> None:
        assert es is self.event_set
        if handle[1] in self.register_errors:
            raise self.register_errors[handle[1]]()
        self.registered.append((handle[1], mask))

    def nvmlEventSetWait(self, es: object, timeout_ms: int) -> Any:
        assert es is self.event_set
        self.waits.append(timeout_ms)
        if not self.queue:
            raise pynvml.NVMLError_Timeout()
        index, xid = self.queue.pop(0)
        return SimpleNamespace(
            device=("gpu", index),
            eventType=pynvml.nvmlEventTypeXidCriticalError,
            eventData=xid,
            gpuInstanceId=0,
            computeInstanceId=0,
        )

    def nvmlEventSetFree(self, es: object) -> None:
        assert es is self.event_set
        self.frees += 1

    def nvmlDeviceGetTotalEccErrors(self, handle: tuple[str, int], kind: int, counter: int) -> int:
        assert kind == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        assert counter == pynvml.NVML_VOLATILE_ECC
        return int(_answer(self.ecc.get(handle[1], 0)))

    def nvmlDeviceGetRemappedRows(self, handle: tuple[str, int]) -> Any:
        return _answer(self.rows.get(handle[1], (0, 0, 0, 0)))

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: tuple[str, int]) -> int:
        return int(_answer(self.retired.get(handle[1], 0)))


def _answer(value: Any) -> Any:
    if isinstance(value, type) and issubclass(value, Exception):
        raise value()
    return value
