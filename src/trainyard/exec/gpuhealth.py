"""GPU health checks through NVML: lost GPUs, critical XID events, uncorrectable ECC errors.

`GpuHealth` owns one NVML session and one NVML event set registered for critical XID events
on every device. `start()` opens both and says why checks are off when NVML is not there (no
driver, no `pynvml`); it never raises for that. `check()` never blocks: it drains the XID
events already queued, then asks each device for a handle, its volatile uncorrectable ECC
count and its row-remapping (or page-retirement) state, and returns what it found as
`GpuProblem`s. It reports every finding on every call; deduplicating is the caller's job.
`close()` frees the event set and shuts NVML down, and may be called any number of times.

The module also owns the table of well-known XID meanings (`XID_MEANINGS`, `xid_detail`) and
which XIDs are the application's fault rather than the hardware's (`benign_xid`); those are
never reported. The `nvml` parameter takes the `pynvml` module or a stand-in with the same
functions and error classes, so tests run without a GPU. One thread uses an object at a time.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

# NVML constants, as pynvml (nvidia-ml-py) names them; the values are part of NVML's C ABI.
EVENT_XID_CRITICAL = 0x0000000000000008  # nvmlEventTypeXidCriticalError
MEMORY_ERROR_UNCORRECTED = 1  # NVML_MEMORY_ERROR_TYPE_UNCORRECTED
VOLATILE_ECC = 0  # NVML_VOLATILE_ECC: counts since the driver last loaded
FEATURE_ENABLED = 1  # NVML_FEATURE_ENABLED

MAX_EVENTS_PER_CHECK = 1024  # a storm of events must not keep check() from returning
UNKNOWN_INDEX = -1  # an XID event whose device NVML could not name

# What the well-known XIDs mean. Source: NVIDIA's "Xid Errors" documentation and its Xid
# catalog (https://docs.nvidia.com/deploy/xid-errors/index.html and
# https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html). The wording is ours.
XID_MEANINGS: dict[int, str] = {
    13: "graphics engine exception",
    31: "GPU memory page fault",
    32: "invalid or corrupted push buffer stream",
    38: "driver firmware error",
    43: "GPU stopped processing (application fault)",
    45: "preemptive cleanup after earlier errors",
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint or warning",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping recording failed",
    68: "video decoder (NVDEC) exception",
    69: "graphics engine class error",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained uncorrectable ECC error",
    95: "uncontained uncorrectable ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}

# XIDs that a faulty application (a bad kernel, an illegal address, a killed process) causes;
# NVIDIA's catalog tells you to restart the application, not to look at the GPU.
BENIGN_XIDS = frozenset({13, 31, 43, 45})


def benign_xid(code: int) -> bool:
    """Whether XID `code` is usually the application's fault rather than a hardware fault."""
    return code in BENIGN_XIDS


def xid_detail(code: int) -> str:
    """Human text for XID `code`, e.g. "XID 79 (GPU has fallen off the bus)"."""
    meaning = XID_MEANINGS.get(code, "not in trainyard's table; see NVIDIA's Xid catalog")
    return f"XID {code} ({meaning})"


@dataclass(frozen=True)
class GpuProblem:
    index: int  # NVML device index (UNKNOWN_INDEX for an XID event NVML could not place)
    kind: str  # "lost", "xid", "ecc" or "unreachable"
    detail: str  # human text, e.g. "XID 79 (GPU has fallen off the bus)"


class _DeviceDown(Exception):
    """A device stopped answering during its checks; carries the problem to report."""

    def __init__(self, problem: GpuProblem) -> None:
        super().__init__(problem.detail)
        self.problem = problem


class GpuHealth:
    """Owns an NVML session and an event set for critical XID events on every device."""

    def __init__(self, nvml: Any | None = None) -> None:
        self._nvml: Any = nvml
        self._initialized = False  # nvmlInit succeeded and nvmlShutdown is still owed
        self._events: Any = None  # the event set, while we hold one
        self._count = 0
        self._reason = "not started"  # why checks are off ("" while they are on)
        # What start() could not set up although checks are on, e.g. XID events on one GPU.
        self.notes: list[str] = []

    @property
    def reason(self) -> str:
        """Why checks are off ("" while they are on)."""
        return self._reason

    def start(self) -> str:
        """Open NVML and register for critical XID events on each device.

        Returns "" when checks are on, else why they are off (e.g. "NVML: driver not
        found"). Calling it again while checks are on changes nothing and returns "".
        """
        if self._initialized:
            return self._reason
        if self._nvml is None:
            try:
                import pynvml  # type: ignore[import-untyped]
            except ImportError:
                self._reason = "NVML: the pynvml package is not installed"
                return self._reason
            self._nvml = pynvml
        nvml = self._nvml
        self.notes = []
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as e:
            self._reason = _init_reason(nvml, e)
            return self._reason
        self._initialized = True
        try:
            self._count = int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as e:
            self.close()
            self._reason = f"NVML: cannot count the GPUs ({e})"
            return self._reason
        self._reason = ""
        self._register_events()
        return ""

    def check(self) -> list[GpuProblem]:
        """What is wrong now: queued critical XID events, then each device's own state.

        Never blocks. Returns [] when checks are off (see `start()`).
        """
        if not self._initialized or self._reason:
            return []
        problems = self._drain_events()
        for index in range(self._count):
            problems.extend(self._check_device(index))
        return problems

    def close(self) -> None:
        """Free the event set and shut NVML down. Safe to call more than once."""
        nvml = self._nvml
        if self._events is not None:
            events, self._events = self._events, None
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlEventSetFree(events)
        if self._initialized:
            self._initialized = False
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlShutdown()
        self._count = 0
        self._reason = "closed"

    # -- internals ---------------------------------------------------------------------------

    def _register_events(self) -> None:
        nvml = self._nvml
        try:
            self._events = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as e:
            self.notes.append(f"no XID events: cannot create an NVML event set ({e})")
            return
        registered = 0
        for index in range(self._count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                nvml.nvmlDeviceRegisterEvents(handle, EVENT_XID_CRITICAL, self._events)
                registered += 1
            except nvml.NVMLError as e:
                # A lost GPU shows up in check(); an unsupported one just has no XID events.
                self.notes.append(f"GPU {index}: no XID events ({e})")
        if not registered:
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlEventSetFree(self._events)
            self._events = None

    def _drain_events(self) -> list[GpuProblem]:
        nvml = self._nvml
        problems: list[GpuProblem] = []
        if self._events is None:
            return problems
        for _ in range(MAX_EVENTS_PER_CHECK):
            try:
                event = nvml.nvmlEventSetWait(self._events, 0)
            except nvml.NVMLError_Timeout:
                break  # nothing more queued
            except nvml.NVMLError:
                break  # e.g. a GPU is lost: the device checks below say which one
            if not int(event.eventType) & EVENT_XID_CRITICAL:
                continue
            code = int(event.eventData)
            if benign_xid(code):
                continue
            problems.append(GpuProblem(self._event_index(event), "xid", xid_detail(code)))
        return problems

    def _event_index(self, event: Any) -> int:
        nvml = self._nvml
        try:
            return int(nvml.nvmlDeviceGetIndex(event.device))
        except nvml.NVMLError:
            return UNKNOWN_INDEX

    def _check_device(self, index: int) -> list[GpuProblem]:
        nvml = self._nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
        except nvml.NVMLError as e:
            return [GpuProblem(index, "lost", f"NVML has no handle for the GPU ({e})")]
        problems: list[GpuProblem] = []
        try:
            self._check_memory(index, handle, problems)
        except _DeviceDown as down:  # the first query it fails says enough about this GPU
            problems.append(down.problem)
        return problems

    def _check_memory(self, index: int, handle: Any, problems: list[GpuProblem]) -> None:
        nvml = self._nvml
        count = self._query(
            nvml.nvmlDeviceGetTotalEccErrors, index, handle, MEMORY_ERROR_UNCORRECTED, VOLATILE_ECC
        )
        if count:  # None: no ECC on this GPU (or ECC is off)
            n = int(count)
            text = f"{n} uncorrectable ECC error{'' if n == 1 else 's'} (volatile)"
            problems.append(GpuProblem(index, "ecc", text))
        rows = self._query(getattr(nvml, "nvmlDeviceGetRemappedRows", None), index, handle)
        if rows is not None:  # Ampere and newer remap rows
            _corrected, _uncorrected, pending, failure = rows
            if failure:
                problems.append(GpuProblem(index, "ecc", "row remapping failed"))
            elif pending:
                text = "row remapping pending (the GPU needs a reset)"
                problems.append(GpuProblem(index, "ecc", text))
            return
        # Older GPUs retire pages instead of remapping rows.
        pages = self._query(
            getattr(nvml, "nvmlDeviceGetRetiredPagesPendingStatus", None), index, handle
        )
        if pages is not None and int(pages) == FEATURE_ENABLED:
            problems.append(
                GpuProblem(index, "ecc", "retired pages pending (the GPU needs a reset)")
            )

    def _query(self, fn: Any, index: int, *args: Any) -> Any:
        """fn(*args); None when the GPU or the driver does not offer it; _DeviceDown when the
        GPU does not answer."""
        nvml = self._nvml
        if fn is None:
            return None
        try:
            return fn(*args)
        except (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound):
            return None
        except nvml.NVMLError_GpuIsLost as e:
            raise _DeviceDown(GpuProblem(index, "lost", "NVML reports the GPU lost")) from e
        except nvml.NVMLError as e:
            raise _DeviceDown(GpuProblem(index, "unreachable", f"NVML error ({e})")) from e


def _init_reason(nvml: Any, error: Exception) -> str:
    """Why nvmlInit failed, in words an operator reads in the server log."""
    if isinstance(error, nvml.NVMLError_LibraryNotFound):
        return "NVML: driver not found (no libnvidia-ml)"
    if isinstance(error, nvml.NVMLError_DriverNotLoaded):
        return "NVML: driver not loaded"
    return f"NVML: cannot start ({error})"
