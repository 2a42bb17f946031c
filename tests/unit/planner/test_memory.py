"""Memory per GPU: Korthikanti Table 2 activations, ZeRO model states, pipeline stages, layout
validation, checked on hand-computed cases."""

from __future__ import annotations

from typing import Any

import pytest

from trainyard.planner.errors import PlannerError
from trainyard.planner.layout import ParallelLayout
from trainyard.planner.memory import (
    GB,
    layer_activation_bytes,
    memory_per_gpu,
    stage_in_flight,
    stage_memory,
)
from trainyard.planner.model import Model

# s = 128, b = 2, h = 256, a = 8  ->  s·b·h = 65536 and 5·a·s/h = 20.
MODEL = Model("t", layers=8, hidden=256, heads=8, seq_len=128, vocab=1024, global_batch=64)
SBH = 128 * 2 * 256


def acts(**kw: Any) -> float:
    return layer_activation_bytes(MODEL, ParallelLayout(micro_batch=2, **kw))


def test_no_parallelism_is_34sbh_plus_5as2b() -> None:
    a, s, b = 8, 128, 2
    assert acts() == 34 * SBH + 5 * a * s * s * b == SBH * 54


@pytest.mark.parametrize(
    ("kw", "per_sbh"),
    [
        ({"tp": 4}, 10 + 24 / 4 + 20 / 4),
        ({"tp": 4, "sequence_parallel": True}, (34 + 20) / 4),
        ({"tp": 4, "recompute": "selective"}, 10 + 24 / 4),
        ({"tp": 4, "sequence_parallel": True, "recompute": "selective"}, 34 / 4),
        ({"recompute": "full"}, 2),
        ({"tp": 4, "recompute": "full"}, 2),
        ({"tp": 4, "sequence_parallel": True, "recompute": "full"}, 2 / 4),
    ],
)
def test_korthikanti_table2(kw: dict[str, Any], per_sbh: float) -> None:
    assert acts(**kw) == pytest.approx(SBH * per_sbh)


@pytest.mark.parametrize(
    ("zero", "bytes_per_param"),
    [(0, 16), (1, 4 + 12 / 8), (2, 2 + 14 / 8), (3, 16 / 8)],
)
def test_zero_model_states_match_rajbhandari(zero: int, bytes_per_param: float) -> None:
    mem = memory_per_gpu(MODEL, ParallelLayout(dp=8, zero=zero))
    states = mem.weights + mem.grads + mem.optimizer
    # ZeRO-3 / FSDP also holds two gathered layers' weights and one layer's gradients.
    gathered = 6 * MODEL.layer_params if zero == 3 else 0
    assert states * GB == pytest.approx(bytes_per_param * MODEL.params + gathered)


def test_megatron_fp32_grads_is_18_bytes_per_param() -> None:
    mem = memory_per_gpu(MODEL, ParallelLayout(fp32_grads=True))
    assert (mem.weights + mem.grads + mem.optimizer) * GB == pytest.approx(18 * MODEL.params)


def test_single_stage_activations_include_embedding_and_output_layer() -> None:
    mem = memory_per_gpu(MODEL, ParallelLayout(micro_batch=2))
    layers = 8 * 54 * SBH
    dropout = SBH  # one micro-batch in flight
    output = 4 * SBH + 4 * 128 * 2 * 1024
    assert mem.stage == "only"
    assert mem.activations * GB == pytest.approx(layers + dropout + output)
    assert mem.total == pytest.approx(mem.weights + mem.grads + mem.optimizer + mem.activations)


def test_first_pipeline_stage_holds_pp_microbatches() -> None:
    # pp = 4: 2 layers per stage, 4 micro-batches in flight on stage 1 (32 per iteration).
    mem = memory_per_gpu(MODEL, ParallelLayout(pp=4, micro_batch=2))
    assert mem.stage == "first"
    assert mem.activations * GB == pytest.approx(4 * 2 * 54 * SBH + 4 * SBH)
    params = 2 * MODEL.layer_params + 1024 * 256 + 128 * 256
    assert (mem.weights + mem.grads + mem.optimizer) * GB == pytest.approx(16 * params)


def test_fewer_microbatches_than_stages_limits_in_flight() -> None:
    # global_batch 64 / (dp 16 x mb 2) = 2 micro-batches < pp 4.
    mem = memory_per_gpu(MODEL, ParallelLayout(pp=4, dp=16, micro_batch=2))
    assert mem.activations * GB == pytest.approx(2 * 2 * 54 * SBH + 2 * SBH)


def test_interleaving_multiplies_first_stage_activations() -> None:
    plain = memory_per_gpu(MODEL, ParallelLayout(pp=4, micro_batch=2))
    inter = memory_per_gpu(MODEL, ParallelLayout(pp=4, micro_batch=2, virtual_stages=2))
    layers = 8 * 54 * SBH
    assert inter.activations * GB - 4 * SBH == pytest.approx(layers * (1 + 3 / 8))
    assert plain.activations * GB - 4 * SBH == pytest.approx(layers)


def test_interleaved_stages_hold_megatron_cores_warm_up_chunks_plus_one() -> None:
    # Megatron-Core's interleaved schedule: stage i warms up (pp - i - 1)·2 + (v - 1)·pp
    # chunks of a v-th of its layers, and holds one more at its peak.
    assert stage_in_flight(4, 0, 2, 100) == 5.5 == 4 * (1 + 3 / 8)  # Korthikanti §4.2.3
    assert stage_in_flight(16, 1, 4, 384) == 19.25  # (28 + 48 + 1) / 4
    assert stage_in_flight(4, 3, 2, 100) == 2.5  # the last stage: 1F1B's would hold 1
    assert stage_in_flight(4, 3, 1, 100) == 1.0
    assert stage_in_flight(4, 0, 2, 2) == 2.0  # at most all m·v chunks of the iteration
    assert stage_in_flight(4, 1, 1, 2) == 2.0  # 1F1B: min(pp - i, m)


def test_the_last_stage_of_an_interleaved_pipeline_holds_most_of_pp() -> None:
    lay = ParallelLayout(pp=4, micro_batch=2, recompute="none")
    plain = stage_memory(MODEL, lay)[-1]
    inter = stage_memory(MODEL, ParallelLayout(pp=4, micro_batch=2, virtual_stages=2))[-1]
    assert plain.stage == inter.stage == "last"
    layer_bytes = 2 * 54 * SBH  # two layers on each of the four stages
    assert (inter.activations - plain.activations) * GB == pytest.approx(layer_bytes * 1.5)


def test_last_stage_wins_with_a_large_vocabulary() -> None:
    big_vocab = Model("v", layers=8, hidden=256, heads=8, seq_len=128, vocab=256_000,
                      global_batch=64)  # fmt: skip
    mem = memory_per_gpu(big_vocab, ParallelLayout(pp=2, micro_batch=2, recompute="full"))
    assert mem.stage == "last"


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"tp": 3}, "tp"),
        ({"tp": 0}, "tp"),
        ({"pp": 3}, "pp"),
        ({"pp": 4, "virtual_stages": 4}, "pp"),
        ({"virtual_stages": 2}, "virtual_stages"),
        ({"dp": 3}, "micro_batch"),
        ({"micro_batch": 128}, "micro_batch"),
        ({"zero": 4}, "zero"),
        ({"recompute": "some"}, "recompute"),
        ({"sequence_parallel": 1}, "sequence_parallel"),
        ({"dp": 2.0}, "dp"),
    ],
)
def test_bad_layout_names_the_field(kw: dict[str, Any], field: str) -> None:
    with pytest.raises(PlannerError) as err:
        memory_per_gpu(MODEL, ParallelLayout(**kw))
    assert err.value.field == field


def test_tp_must_divide_kv_heads() -> None:
    gqa = Model("g", layers=8, hidden=256, heads=8, kv_heads=2, seq_len=128, vocab=1024,
                global_batch=64)  # fmt: skip
    with pytest.raises(PlannerError) as err:
        memory_per_gpu(gqa, ParallelLayout(tp=4))
    assert err.value.field == "tp" and "kv_heads" in err.value.message
