"""The fused attention kernels' time (trainyard.planner.attention) and how step_time uses it."""

from __future__ import annotations

import dataclasses
import math

import pytest

from trainyard.planner.attention import (
    BACKWARD_WORK,
    CURVE,
    fused_attention_efficiency,
    fused_attention_times,
)
from trainyard.planner.compute import Calibration, causal_share, step_time
from trainyard.planner.hardware import gpu
from trainyard.planner.layout import ParallelLayout
from trainyard.planner.model import Model

H100 = gpu("H100-SXM")


def test_the_curve_is_the_published_h100_cudnn_sweep_as_fractions_of_peak() -> None:
    # FlashAttention-3 paper, cuDNN at head dim 128: 529 TFLOP/s forward (causal) and 518
    # backward at 8K tokens, of the H100's 989.4 dense BF16 peak.
    assert fused_attention_efficiency(8192) == pytest.approx((529 / 989.4, 518 / 989.4))
    assert [n for n, _f, _b in CURVE] == [512, 1024, 2048, 4096, 8192, 16384]
    # Efficiency rises with the keys a query block sweeps and stays below a large GEMM's.
    fwd = [f for _n, f, _b in CURVE]
    assert fwd == sorted(fwd) and max(fwd) < 0.6


def test_between_points_it_is_interpolated_in_log_length_and_kept_flat_beyond() -> None:
    mid = fused_attention_efficiency(math.sqrt(1024 * 2048))
    lo, hi = fused_attention_efficiency(1024), fused_attention_efficiency(2048)
    assert mid[0] == pytest.approx((lo[0] + hi[0]) / 2)
    assert mid[1] == pytest.approx((lo[1] + hi[1]) / 2)
    assert fused_attention_efficiency(64) == fused_attention_efficiency(512)
    assert fused_attention_efficiency(1 << 20) == fused_attention_efficiency(16384)
    assert fused_attention_efficiency(math.inf) == fused_attention_efficiency(16384)
    assert fused_attention_efficiency(math.nan) == fused_attention_efficiency(512)


def test_the_backward_does_two_and_a_half_forwards_of_work() -> None:
    f, b = fused_attention_efficiency(4096)
    forward, backward = fused_attention_times(1e12, 4096, 1e15)
    assert forward == pytest.approx(1e12 / f / 1e15)
    assert backward == pytest.approx(2.5 * 1e12 / b / 1e15)
    assert BACKWARD_WORK == 2.5


def test_a_fused_core_is_priced_by_the_kernel_curve_not_by_the_hidden_size() -> None:
    # Two models whose layers differ only in the keys each query attends to: the difference of
    # their compute time is the core's time, at the kernel's efficiency, whatever the GEMM
    # calibration says (the unfused core runs at the GEMMs' g, which the calibration sets).
    base = Model("m", layers=2, hidden=4096, heads=32, seq_len=8192, vocab=32000,
                 global_batch=1)  # fmt: skip
    lay = ParallelLayout(flash_attention=True)
    core = base.layer_forward_flops(base.seq_len)[1]
    f, b = fused_attention_efficiency(8192)
    expected = base.layers * core * causal_share(8192) * (1 / f + BACKWARD_WORK / b) / 989.4e12
    for cal in (Calibration(0.75, 400, 2.2, 1.0), Calibration(0.5, 100, 2.2, 1.0)):
        whole = step_time(base, lay, H100, calibration=cal)
        # a window of one key leaves the core next to nothing (1/8192 of its work)
        gemm_only = step_time(dataclasses.replace(base, window=1), lay, H100, calibration=cal)
        assert whole.compute_s > gemm_only.compute_s
        assert whole.compute_s - gemm_only.compute_s == pytest.approx(expected, rel=0.02)


def test_flashattention2s_generation_is_slower_on_hopper_only() -> None:
    # Outside review 13, F4: the kernel a row names ("FlashAttention-2", "SDPA") was read and
    # made no difference. FlashAttention-2 reaches 35 % of an H100's peak (arXiv:2407.08608).
    from published_rows import ROW

    from trainyard.planner.attention import FA2_ON_HOPPER, kernel_speed
    from trainyard.planner.cell_names import attention_kernel_cell
    from trainyard.planner.launch import launch_settings
    from trainyard.planner.memory import memory_per_gpu
    from trainyard.planner.search import Plan

    assert pytest.approx(0.35 * 989.4 / 539.0) == FA2_ON_HOPPER
    assert kernel_speed("fa2", 9.0) == kernel_speed("fa2", 10.0) == FA2_ON_HOPPER
    assert kernel_speed("fa2", 8.0) == kernel_speed("cudnn", 9.0) == 1.0
    names = {"FlashAttention-2": "fa2", "SDPA": "fa2", "xFormers": "fa2", "flash_attn 2": "fa2",
             "cuDNN": "cudnn", "FlashAttention-3": "cudnn", "TE": "cudnn", "yes": "cudnn",
             "SDPA (cuDNN)": "cudnn", "": "cudnn"}  # fmt: skip
    assert {k: attention_kernel_cell({**ROW, "flash_attention": k}) for k in names} == names
    model = Model("long", layers=32, hidden=4096, heads=32, seq_len=32768, vocab=128256,
                  global_batch=8)  # fmt: skip
    layout = ParallelLayout(dp=8, flash_attention=True, recompute="full")
    fa2 = dataclasses.replace(layout, attention_kernel="fa2")
    h100, a100 = gpu("H100"), gpu("A100-80GB")
    slow, fast = step_time(model, fa2, h100), step_time(model, layout, h100)
    assert slow.iteration_s > 1.2 * fast.iteration_s
    assert step_time(model, fa2, a100).iteration_s == step_time(model, layout, a100).iteration_s
    plan = Plan(fa2, memory_per_gpu(model, fa2), slow, 1.0, 1.0, 0.5)
    flags = launch_settings(model, plan, h100).megatron
    assert flags[flags.index("--attention-backend") + 1] == "flash"
    with pytest.raises(Exception, match="attention_kernel"):
        ParallelLayout(attention_kernel="fa4")  # type: ignore[arg-type]
