"""GPU health checks: a stand-in NVML raising the real pynvml errors, and the real pynvml here
(no driver on this machine)."""

from __future__ import annotations

import pynvml  # type: ignore[import-untyped]
import pytest

from fake_nvml import FakeNvml
from trainyard.exec import gpuhealth
from trainyard.exec.gpuhealth import GpuHealth, GpuProblem, benign_xid, xid_detail


def started(fake: FakeNvml) -> GpuHealth:
    health = GpuHealth(fake)
    assert health.start() == ""
    return health


def test_driver_missing_turns_checks_off() -> None:
    fake = FakeNvml(init_error=pynvml.NVMLError_LibraryNotFound)
    health = GpuHealth(fake)
    reason = health.start()
    assert reason == "NVML: driver not found (no libnvidia-ml)" == health.reason
    assert health.check() == []
    health.close()
    assert fake.shutdowns == 0 and fake.frees == 0  # nothing was opened


def test_driver_not_loaded_and_other_init_errors_give_reasons() -> None:
    assert GpuHealth(FakeNvml(init_error=pynvml.NVMLError_DriverNotLoaded)).start() == (
        "NVML: driver not loaded"
    )
    reason = GpuHealth(FakeNvml(init_error=pynvml.NVMLError_NoPermission)).start()
    assert reason.startswith("NVML: cannot start (") and "Permission" in reason


def test_healthy_gpus_report_nothing_and_register_xid_events() -> None:
    fake = FakeNvml(count=3)
    health = started(fake)
    assert fake.registered == [(i, pynvml.nvmlEventTypeXidCriticalError) for i in range(3)]
    assert health.check() == []
    assert fake.waits == [0]  # one non-blocking wait that timed out
    assert health.notes == []


def test_lost_gpu_is_reported() -> None:
    fake = FakeNvml(count=3)
    health = started(fake)
    fake.handle_errors[1] = pynvml.NVMLError_GpuIsLost
    problems = health.check()
    assert [(p.index, p.kind) for p in problems] == [(1, "lost")]
    assert "GPU is lost" in problems[0].detail


def test_gpu_lost_mid_checks_is_reported_once() -> None:
    fake = FakeNvml(count=1)
    health = started(fake)
    fake.ecc[0] = pynvml.NVMLError_GpuIsLost
    fake.rows[0] = pynvml.NVMLError_GpuIsLost
    assert health.check() == [GpuProblem(0, "lost", "NVML reports the GPU lost")]


def test_critical_xid_reported_and_benign_xid_ignored() -> None:
    fake = FakeNvml(count=2)
    health = started(fake)
    fake.queue = [(0, 13), (1, 79), (0, 31), (0, 43), (0, 45)]
    assert health.check() == [GpuProblem(1, "xid", "XID 79 (GPU has fallen off the bus)")]
    assert fake.queue == [] and set(fake.waits) == {0}  # drained without blocking
    assert health.check() == []  # events are read once


def test_xid_from_a_device_nvml_cannot_name() -> None:
    fake = FakeNvml(count=1)
    health = started(fake)

    def no_index(handle: object) -> int:
        raise pynvml.NVMLError_Unknown()

    fake.nvmlDeviceGetIndex = no_index  # type: ignore[method-assign]
    fake.queue = [(0, 48)]
    assert health.check() == [
        GpuProblem(gpuhealth.UNKNOWN_INDEX, "xid", "XID 48 (double-bit ECC error)")
    ]


def test_event_storm_does_not_keep_check_from_returning() -> None:
    fake = FakeNvml(count=1)
    health = started(fake)
    fake.queue = [(0, 79)] * (gpuhealth.MAX_EVENTS_PER_CHECK + 5)
    assert len(health.check()) == gpuhealth.MAX_EVENTS_PER_CHECK
    assert len(health.check()) == 5


def test_uncorrectable_ecc_errors_are_reported() -> None:
    fake = FakeNvml(count=2)
    health = started(fake)
    fake.ecc = {0: 3, 1: 1}
    assert health.check() == [
        GpuProblem(0, "ecc", "3 uncorrectable ECC errors (volatile)"),
        GpuProblem(1, "ecc", "1 uncorrectable ECC error (volatile)"),
    ]


def test_no_ecc_support_is_not_a_problem() -> None:
    fake = FakeNvml(count=2)
    health = started(fake)
    fake.ecc = {0: pynvml.NVMLError_NotSupported, 1: pynvml.NVMLError_NotSupported}
    fake.rows = {0: pynvml.NVMLError_NotSupported, 1: pynvml.NVMLError_FunctionNotFound}
    fake.retired = {0: pynvml.NVMLError_NotSupported, 1: pynvml.NVMLError_NotSupported}
    assert health.check() == []


def test_row_remapping_and_page_retirement_state() -> None:
    fake = FakeNvml(count=4)
    health = started(fake)
    fake.rows = {
        0: (2, 1, 1, 0),  # pending
        1: (0, 1, 0, 1),  # failed
        2: pynvml.NVMLError_NotSupported,  # an older GPU: asks about retired pages instead
        3: pynvml.NVMLError_NotSupported,
    }
    fake.retired = {2: pynvml.NVML_FEATURE_ENABLED, 3: 0}
    assert health.check() == [
        GpuProblem(0, "ecc", "row remapping pending (the GPU needs a reset)"),
        GpuProblem(1, "ecc", "row remapping failed"),
        GpuProblem(2, "ecc", "retired pages pending (the GPU needs a reset)"),
    ]


def test_other_nvml_error_means_unreachable() -> None:
    fake = FakeNvml(count=2)
    health = started(fake)
    fake.ecc[1] = pynvml.NVMLError_Unknown
    problems = health.check()
    assert [(p.index, p.kind) for p in problems] == [(1, "unreachable")]
    assert "Unknown Error" in problems[0].detail


def test_findings_are_reported_on_every_check() -> None:
    fake = FakeNvml(count=1)
    health = started(fake)
    fake.ecc[0] = 2
    assert health.check() == health.check() != []


def test_xid_events_unsupported_on_one_gpu_keeps_checks_on() -> None:
    fake = FakeNvml(count=2)
    fake.register_errors[0] = pynvml.NVMLError_NotSupported
    health = started(fake)
    assert len(health.notes) == 1 and health.notes[0].startswith("GPU 0: no XID events")
    fake.queue = [(1, 95)]
    fake.ecc[0] = 4
    assert health.check() == [
        GpuProblem(1, "xid", "XID 95 (uncontained uncorrectable ECC error)"),
        GpuProblem(0, "ecc", "4 uncorrectable ECC errors (volatile)"),
    ]


def test_no_xid_events_anywhere_frees_the_event_set() -> None:
    fake = FakeNvml(count=1)
    fake.register_errors[0] = pynvml.NVMLError_NotSupported
    health = started(fake)
    assert fake.frees == 1
    assert health.check() == [] and fake.waits == []
    health.close()
    assert fake.frees == 1 and fake.shutdowns == 1


def test_close_is_idempotent() -> None:
    fake = FakeNvml(count=2)
    health = started(fake)
    health.close()
    health.close()
    assert fake.frees == 1 and fake.shutdowns == 1
    fake.ecc[0] = 5
    assert health.check() == []  # closed: checks are off
    GpuHealth(FakeNvml()).close()  # never started: nothing to free


def test_start_twice_opens_nvml_once() -> None:
    fake = FakeNvml(count=1)
    health = started(fake)
    assert health.start() == ""
    assert fake.inits == 1 and len(fake.registered) == 1


def test_xid_table() -> None:
    for code in (13, 31, 43, 45):
        assert benign_xid(code)
    for code in (48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 119, 120, 999):
        assert not benign_xid(code)
        assert code == 999 or code in gpuhealth.XID_MEANINGS
    assert xid_detail(79) == "XID 79 (GPU has fallen off the bus)"
    assert xid_detail(12345).startswith("XID 12345 (not in trainyard's table")


def test_constants_match_pynvml() -> None:
    assert pynvml.nvmlEventTypeXidCriticalError == gpuhealth.EVENT_XID_CRITICAL
    assert gpuhealth.MEMORY_ERROR_UNCORRECTED == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    assert gpuhealth.VOLATILE_ECC == pynvml.NVML_VOLATILE_ECC
    assert gpuhealth.FEATURE_ENABLED == pynvml.NVML_FEATURE_ENABLED


def test_real_pynvml_without_a_driver() -> None:
    health = GpuHealth()
    reason = health.start()
    try:
        if not reason:  # pragma: no cover - only on a machine with a driver
            pytest.skip("this machine has an NVIDIA driver")
        assert reason.startswith("NVML: ")
        assert health.check() == []
    finally:
        health.close()
        health.close()
