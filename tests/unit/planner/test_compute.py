"""The time model (trainyard.planner.compute): hand-computed cases, properties, bad input."""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

import pytest

from trainyard.planner.compute import (
    CALIBRATION,
    REFERENCE_TFLOPS,
    Calibration,
    causal_share,
    flops_executed,
    gemm_efficiency,
    memory_bound_bytes,
    step_time,
)
from trainyard.planner.errors import PlannerError
from trainyard.planner.hardware import FP8_SPLIT_ACCUMULATOR, gpu
from trainyard.planner.layout import ParallelLayout
from trainyard.planner.model import Model

A100 = gpu("A100")
SMALL = Model("small", layers=8, hidden=1024, heads=16, seq_len=1024, vocab=32000, global_batch=64)


def test_single_gpu_is_gemm_time_plus_memory_bound_time() -> None:
    r = step_time(SMALL, ParallelLayout(), A100)
    b, s, n, h, v, a = 64, 1024, 8, 1024, 32000, 16
    # Real shapes: 24h² + 4sh per token and layer forward, 2hV for the output layer; 3 passes.
    flops = 3 * b * s * (n * (24 * h * h + 4 * s * h) + 2 * h * v)
    assert flops_executed(SMALL, "none") == pytest.approx(flops)
    g = CALIBRATION.gemm_max * h / (h + CALIBRATION.gemm_half)  # A100 is the reference peak
    # Korthikanti: 34·s·b·h + 5·a·s²·b stored bytes per layer, 3 passes, plus 4·s·b·V fp32
    # logits in 3 passes; micro-batch 1, so 64 micro-batches.
    per_layer = s * h * (34 + 5 * a * s / h)
    traffic = (3 * per_layer * n + 3 * 4 * s * v) * b
    memory_s = CALIBRATION.traffic * traffic / 2.039e12
    assert memory_bound_bytes(SMALL, ParallelLayout()) == pytest.approx(traffic)
    assert r.memory_bound_s == pytest.approx(memory_s)
    assert r.compute_s == pytest.approx(flops / (312e12 * g) + memory_s)
    assert r.efficiency == pytest.approx(flops / (312e12 * r.compute_s))
    assert r.iteration_s == pytest.approx(r.compute_s)
    assert (r.tp_comm_s, r.bubble_s, r.dp_comm_s, r.dp_exposed_s) == (0.0, 0.0, 0.0, 0.0)
    assert r.tflops_per_gpu == pytest.approx(312 * r.efficiency)
    assert r.mfu == pytest.approx(r.efficiency)


def test_memory_bound_bytes_by_recompute_flash_and_parallelism() -> None:
    s, h, a, n, v = 1024, 1024, 16, 8, 32000
    scores = 5 * a * s * s  # bytes of the score, softmax and dropout tensors per sequence
    rest = 34 * s * h
    logits = 3 * 4 * s * v
    per_seq = {
        ParallelLayout(): 3 * (rest + scores) * n + logits,
        ParallelLayout(recompute="full"): 4 * (rest + scores) * n + logits,
        ParallelLayout(recompute="selective"): (3 * rest + 4 * scores) * n + logits,
        ParallelLayout(flash_attention=True): 3 * rest * n + logits,
        ParallelLayout(recompute="selective", flash_attention=True): 3 * rest * n + logits,
    }
    for layout, expected in per_seq.items():
        assert memory_bound_bytes(SMALL, layout) == pytest.approx(64 * expected), layout
    # tp = 4 without sequence parallelism splits all but the 10·s·b·h of norms and dropout;
    # the vocabulary is padded to a multiple of 128·4 (32,256).
    logits4 = 3 * 4 * s * 32256
    tp4 = (3 * (s * h * (10 + 24 / 4) + scores / 4) * n + logits4 / 4) * 64
    assert memory_bound_bytes(SMALL, ParallelLayout(tp=4)) == pytest.approx(tp4)
    sp4 = (3 * (rest + scores) / 4 * n + logits4 / 4) * 64
    assert memory_bound_bytes(SMALL, ParallelLayout(tp=4, sequence_parallel=True)) == pytest.approx(
        sp4
    )
    # Two stages: half the layers each; the logits are charged to every stage.
    pp2 = (3 * (rest + scores) * n / 2 + logits) * 64
    assert memory_bound_bytes(SMALL, ParallelLayout(pp=2)) == pytest.approx(pp2)


def test_flash_attention_is_faster_and_leaner_than_stored_scores() -> None:
    from trainyard.planner.memory import memory_per_gpu

    plain = step_time(SMALL, ParallelLayout(), A100)
    flash = step_time(SMALL, ParallelLayout(flash_attention=True), A100)
    assert flash.memory_bound_s < plain.memory_bound_s
    assert flash.iteration_s < plain.iteration_s
    assert flash.flops == plain.flops
    lean = memory_per_gpu(SMALL, ParallelLayout(flash_attention=True)).activations
    assert lean < memory_per_gpu(SMALL, ParallelLayout()).activations
    assert lean == pytest.approx(
        memory_per_gpu(SMALL, ParallelLayout(recompute="selective")).activations
    )


def test_a_causal_fused_attention_computes_the_tiles_on_and_below_the_diagonal() -> None:
    assert causal_share(128) == 1.0 and causal_share(64) == 1.0  # one tile: all of it
    assert causal_share(4096) == pytest.approx(33 / 64)  # 32 x 32 tiles, 528 of them run
    assert causal_share(1 << 20) == pytest.approx(0.5, abs=1e-3)
    # Only the attention core's time is cut, by (1 - share) of it; the FLOP count is Megatron's.
    long = Model("long", layers=4, hidden=1024, heads=8, seq_len=16384, vocab=32000,
                 global_batch=8)  # fmt: skip
    flash = step_time(long, ParallelLayout(flash_attention=True), A100, efficiency=0.5)
    _, attn = long.layer_forward_flops(long.seq_len)
    saved = 3 * attn * (1 - causal_share(16384)) / (312e12 * 0.5) * long.layers * 8
    whole = step_time(long, ParallelLayout(), A100, efficiency=0.5)
    assert whole.compute_s - flash.compute_s == pytest.approx(saved, rel=1e-6)
    assert flash.flops == whole.flops


def test_fp8_gemms_fill_the_gpu_at_the_sizes_16_bit_ones_do() -> None:
    # fp8 doubles the peak and halves the bytes: on B200 (no fast-accumulation mode, so no
    # split-accumulator cost) the layers' GEMMs take half the time of bf16's at the same
    # efficiency, the attention core and the output layer the same time.
    b200 = gpu("B200")
    assert b200.fp8_backward_slowdown == 1.0
    model = Model("m", layers=4, hidden=4096, heads=32, seq_len=2048, vocab=32000, global_batch=8)
    lay = ParallelLayout(flash_attention=True)
    bf16 = step_time(model, lay, b200)
    fp8 = step_time(dataclasses.replace(model, precision="fp8"), lay, b200)
    gemm, _ = model.layer_forward_flops(model.seq_len)
    g = gemm_efficiency(model.hidden, 2250.0)
    at_bf16 = 3 * gemm * model.layers * 8 / (2250e12 * g)  # 8 micro-batches
    saved = at_bf16 * (1 - 2250 / 4500)
    flops_s = [r.compute_s - r.memory_bound_s for r in (bf16, fp8)]
    assert flops_s[0] - flops_s[1] == pytest.approx(saved, rel=1e-9)


def test_fp8_backward_gemms_pay_the_split_accumulator_on_hopper() -> None:
    # Transformer Engine accumulates the backward fp8 GEMMs (two forward passes' worth) in
    # higher precision; on H100 that forgoes fast accumulation: those take 1.15x as long.
    h100 = gpu("H100")
    assert h100.fp8_backward_slowdown == FP8_SPLIT_ACCUMULATOR == 1.15
    model = Model("m", layers=4, hidden=4096, heads=32, seq_len=2048, vocab=32000, global_batch=8)
    lay = ParallelLayout(flash_attention=True)
    bf16 = step_time(model, lay, h100)
    fp8_model = dataclasses.replace(model, precision="fp8")
    fp8 = step_time(fp8_model, lay, h100)
    gemm, _ = model.layer_forward_flops(model.seq_len)
    g = gemm_efficiency(model.hidden, 989.0)
    at_bf16 = 3 * gemm * model.layers * 8 / (989e12 * g)
    at_fp8 = at_bf16 * 989 / 1979 * (1 + 2 * 1.15) / 3  # forward fast, backward split
    flops_s = [r.compute_s - r.memory_bound_s for r in (bf16, fp8)]
    assert flops_s[0] - flops_s[1] == pytest.approx(at_bf16 - at_fp8, rel=1e-9)
    # without the slowdown (a catalogue entry may set it to 1) fp8 is twice as fast again
    plain = dataclasses.replace(h100, fp8_backward_slowdown=1.0)
    faster = step_time(fp8_model, lay, plain)
    assert faster.compute_s < fp8.compute_s
    # bf16 models are untouched by it
    assert step_time(model, lay, plain).compute_s == bf16.compute_s


def test_pipeline_sends_are_split_over_tp_with_or_without_sequence_parallelism() -> None:
    lay = ParallelLayout(tp=4, pp=2, dp=1, flash_attention=True)
    plain = step_time(SMALL, lay, A100)
    sp = step_time(SMALL, dataclasses.replace(lay, sequence_parallel=True), A100)
    assert plain.p2p_s == pytest.approx(sp.p2p_s)
    one = step_time(SMALL, ParallelLayout(pp=2, flash_attention=True), A100)
    assert plain.p2p_s < one.p2p_s  # a quarter of the bytes each
    # Megatron-LM before the scatter/gather (27fc468964, 2021-01-20): every TP rank sends the
    # whole tensor, as a run without tensor parallelism does
    whole = step_time(SMALL, dataclasses.replace(lay, p2p_split=False), A100)
    assert whole.p2p_s == pytest.approx(one.p2p_s) and whole.p2p_s > plain.p2p_s
    assert whole.iteration_s > plain.iteration_s


def test_efficiency_override_and_full_recompute_hand_computed() -> None:
    r = step_time(SMALL, ParallelLayout(recompute="full"), A100, efficiency=0.5)
    f96 = SMALL.flops_per_iteration(recompute=True)
    f72 = SMALL.flops_per_iteration(recompute=False)
    assert r.compute_s == pytest.approx(f96 / (312e12 * 0.5))
    # Executed FLOPs run at 50 % of peak; model FLOPs are f72/f96 of them.
    assert r.hardware_tflops_per_gpu == pytest.approx(156.0)
    assert r.tflops_per_gpu == pytest.approx(156.0 * f72 / f96)
    assert r.mfu == pytest.approx(0.5 * f72 / f96)


def test_selective_recompute_flops_lie_between_none_and_full() -> None:
    f72 = SMALL.flops_per_iteration(recompute=False)
    f96 = SMALL.flops_per_iteration(recompute=True)
    sel = flops_executed(SMALL, "selective")
    assert f72 < sel < f96
    s, h, n, b = 1024, 1024, 8, 64
    # Selective recompute re-runs the attention core's forward, 4·s·h per token and layer.
    assert sel == pytest.approx(f72 + n * 4 * s * h * s * b)


def test_gemm_efficiency_saturates_and_needs_larger_gemms_on_faster_gpus() -> None:
    cal = CALIBRATION
    assert gemm_efficiency(cal.gemm_half, REFERENCE_TFLOPS) == pytest.approx(cal.gemm_max / 2)
    assert gemm_efficiency(2 * cal.gemm_half, 2 * REFERENCE_TFLOPS) == pytest.approx(
        cal.gemm_max / 2
    )
    values = [gemm_efficiency(h, 989) for h in (512, 1024, 4096, 16384, 1e9)]
    assert values == sorted(values)
    assert values[-1] == pytest.approx(cal.gemm_max, rel=1e-5)
    for h in (1024, 4096, 16384):
        assert gemm_efficiency(h, 125) > gemm_efficiency(h, 312) > gemm_efficiency(h, 989)


def test_calibration_override_changes_only_the_compute_term() -> None:
    slow = Calibration(gemm_max=0.3, gemm_half=0.0, traffic=0.0)
    r = step_time(SMALL, ParallelLayout(tp=2, dp=2), A100, calibration=slow)
    base = step_time(SMALL, ParallelLayout(tp=2, dp=2), A100)
    assert r.memory_bound_s == 0.0
    assert r.compute_s == pytest.approx(r.flops / (4 * 312e12 * 0.3))
    assert (r.tp_comm_s, r.dp_comm_s) == (base.tp_comm_s, base.dp_comm_s)


def test_tensor_parallel_adds_all_reduces_and_full_recompute_adds_half_more() -> None:
    base = step_time(SMALL, ParallelLayout(tp=4), A100)
    full = step_time(SMALL, ParallelLayout(tp=4, recompute="full"), A100)
    assert base.tp_comm_s > 0
    assert full.tp_comm_s == pytest.approx(1.5 * base.tp_comm_s)
    hidden = step_time(SMALL, ParallelLayout(tp=4), A100, tp_overlap=0.5)
    assert hidden.tp_comm_s == pytest.approx(0.5 * base.tp_comm_s)


def test_data_parallel_exposed_share_and_zero3_volume() -> None:
    plain = step_time(SMALL, ParallelLayout(dp=16), A100)
    assert plain.dp_comm_s > 0
    assert plain.dp_exposed_s == pytest.approx(0.5 * plain.dp_comm_s)
    none_hidden = step_time(SMALL, ParallelLayout(dp=16), A100, dp_overlap=0.0)
    assert none_hidden.dp_exposed_s == pytest.approx(plain.dp_comm_s)
    zero3 = step_time(SMALL, ParallelLayout(dp=16, zero=3), A100)
    assert zero3.dp_comm_s == 0.0  # nothing once per iteration: it all runs per micro-batch
    assert zero3.iteration_s >= plain.iteration_s - plain.dp_exposed_s


def test_bubble_is_p_minus_1_over_m_v() -> None:
    layout = ParallelLayout(pp=4, micro_batch=1)
    r = step_time(SMALL, layout, A100)
    m = layout.microbatches(SMALL)
    steady = r.compute_s + r.tp_comm_s + r.p2p_s  # m micro-batches of the slowest stage
    # (p-1)/v stage times of the mean stage, which is no slower than the slowest
    assert 0 < r.bubble_s <= 3 / m * steady * (1 + 1e-9)
    inter = step_time(SMALL, ParallelLayout(pp=4, micro_batch=1, virtual_stages=2), A100)
    assert inter.bubble_s == pytest.approx(r.bubble_s / 2, rel=0.02)


LAYOUTS = [
    ParallelLayout(),
    ParallelLayout(tp=2),
    ParallelLayout(tp=8, pp=2, dp=4),
    ParallelLayout(tp=4, pp=4, dp=2, micro_batch=2, recompute="full", virtual_stages=2),
    ParallelLayout(dp=32, zero=3, recompute="selective"),
    ParallelLayout(tp=16, pp=1, dp=2, sequence_parallel=True),
]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("device", ["A100", "H100", "V100"])
def test_times_are_finite_and_never_negative(layout: ParallelLayout, device: str) -> None:
    r = step_time(SMALL, layout, gpu(device))
    parts = (r.compute_s, r.tp_comm_s, r.bubble_s, r.dp_comm_s, r.dp_exposed_s, r.cp_comm_s)
    assert all(math.isfinite(x) and x >= 0 for x in (*parts, r.shard_comm_s, r.p2p_s))
    assert r.iteration_s == pytest.approx(
        r.compute_s
        + r.tp_comm_s
        + r.cp_comm_s
        + r.shard_comm_s
        + r.p2p_s
        + r.bubble_s
        + r.dp_exposed_s
    )
    assert r.iteration_s > 0
    assert 0 < r.mfu < 1


def test_more_gpus_never_increase_compute_time() -> None:
    for make in (
        lambda k: ParallelLayout(dp=k),
        lambda k: ParallelLayout(tp=k),
        lambda k: ParallelLayout(pp=k, micro_batch=1),
        lambda k: ParallelLayout(tp=2, pp=2, dp=k),
    ):
        times = [step_time(SMALL, make(k), A100).compute_s for k in (1, 2, 4, 8)]
        assert all(b <= a for a, b in itertools.pairwise(times))


def test_bubble_shrinks_with_more_micro_batches() -> None:
    fractions = []
    for batch in (8, 16, 32, 64, 128):
        model = Model("m", 8, 1024, 16, 1024, 32000, global_batch=batch)
        r = step_time(model, ParallelLayout(pp=4, micro_batch=1), A100)
        fractions.append(r.bubble_s / (r.compute_s + r.tp_comm_s))
    assert all(b < a for a, b in itertools.pairwise(fractions))
    # Same global batch, smaller micro-batches: more of them, smaller bubble.
    bubbles = [
        step_time(SMALL, ParallelLayout(pp=4, micro_batch=b), A100).bubble_s for b in (8, 4, 2, 1)
    ]
    assert all(b < a for a, b in itertools.pairwise(bubbles))


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"nodes_of": 0}, "nodes_of"),
        ({"dp_overlap": 1.5}, "dp_overlap"),
        ({"tp_overlap": -0.1}, "tp_overlap"),
        ({"efficiency": 0.0}, "efficiency"),
        ({"efficiency": float("nan")}, "efficiency"),
    ],
)
def test_bad_arguments_name_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(PlannerError) as exc:
        step_time(SMALL, ParallelLayout(), A100, **kwargs)
    assert exc.value.field == field


def test_bad_layout_and_inputs_name_the_field() -> None:
    with pytest.raises(PlannerError) as exc:
        step_time(SMALL, ParallelLayout(tp=3), A100)
    assert exc.value.field == "tp"
    with pytest.raises(PlannerError) as exc:
        step_time(SMALL, ParallelLayout(dp=3), A100)
    assert exc.value.field == "micro_batch"
    with pytest.raises(PlannerError) as exc:
        flops_executed(SMALL, "some")
    assert exc.value.field == "recompute"
    with pytest.raises(PlannerError) as exc:
        gemm_efficiency(0, 312)
    assert exc.value.field == "hidden"
    with pytest.raises(PlannerError) as exc:
        gemm_efficiency(1024, float("inf"))
    assert exc.value.field == "peak_tflops"
    for kwargs, field in (
        ({"gemm_max": 1.5}, "gemm_max"),
        ({"gemm_half": -1.0}, "gemm_half"),
        ({"traffic": float("nan")}, "traffic"),
    ):
        with pytest.raises(PlannerError) as exc:
            Calibration(**kwargs)  # type: ignore[arg-type]
        assert exc.value.field == field
