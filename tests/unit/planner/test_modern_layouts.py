"""Issue 18: today's training stacks in the planner: real model shapes (GQA, gated MLPs,
vocabulary padding), uneven pipeline stages, context parallelism, FSDP/ZeRO priced per
micro-batch, hybrid sharding, fp8, tensor-parallel overlap, and the search over them."""

from __future__ import annotations

import dataclasses

import pytest

from trainyard.planner.compute import step_time
from trainyard.planner.errors import PlannerError
from trainyard.planner.hardware import gpu
from trainyard.planner.layout import ParallelLayout
from trainyard.planner.memory import layer_activation_bytes, memory_per_gpu, stage_memory
from trainyard.planner.model import Model
from trainyard.planner.pipeline_split import uneven_stages
from trainyard.planner.presets import preset
from trainyard.planner.search import context_parallel_options, search

H100, A100 = gpu("H100"), gpu("A100")


def test_llama_flops_and_params_come_from_the_real_shapes() -> None:
    m = preset("llama2-70b")  # h 8192, 64 heads, 8 kv heads, f 28672, SwiGLU, V 32000
    h, k_d, f, s, v = 8192, 8 * 128, 28672, 4096, 32000
    per_layer = 2 * h * h + 2 * h * k_d + 3 * h * f
    assert m.layer_matmul_params == per_layer
    forward = 80 * (2 * per_layer + 4 * s * h) + 2 * h * v
    assert m.forward_flops_per_token() == pytest.approx(forward)
    assert m.flops_per_token(recompute=False) == pytest.approx(3 * forward)
    # GPT-shape Eq. 3 (4h MLP, full multi-head K and V) would count 5% too few for this one.
    gpt_shape = 72 * h * h * (1 + s / (6 * h)) * 80 + 6 * h * v
    assert gpt_shape / m.flops_per_token(recompute=False) == pytest.approx(0.946, abs=0.002)
    assert 68.9e9 < m.params < 69.1e9


def test_vocabulary_padding_follows_megatron() -> None:
    m = Model("v", 2, 256, 4, 128, 50257, 8)
    assert (m.padded_vocab(), m.padded_vocab(8)) == (50304, 51200)
    assert dataclasses.replace(m, vocab_multiple=1).padded_vocab(8) == 50257 + 7


def test_mlp_kinds_are_validated_and_agree_with_gated_mlp() -> None:
    assert Model("a", 2, 256, 4, 128, 512, 8, mlp="squared_relu").mlp_matrices == 2
    assert Model("a", 2, 256, 4, 128, 512, 8, gated_mlp=True).mlp == "swiglu"
    assert Model("a", 2, 256, 4, 128, 512, 8, mlp="GeGLU").gated_mlp
    with pytest.raises(PlannerError) as err:
        Model("a", 2, 256, 4, 128, 512, 8, mlp="tanh")
    assert err.value.field == "mlp"


def test_gqa_and_swiglu_activations_generalise_korthikanti() -> None:
    gpt = Model("g", 2, 1024, 16, 256, 512, 8)
    lay = ParallelLayout(flash_attention=True)
    assert layer_activation_bytes(gpt, lay) == 34 * 256 * 1024
    llama = Model("l", 2, 1024, 16, 256, 512, 8, kv_heads=4, ffn_hidden=2816, mlp="swiglu")
    # 10 outside + Q 2 + K,V 4·(4/16) + proj 2 + SwiGLU 6·f/h
    expected = (10 + 2 + 1 + 2 + 6 * 2816 / 1024) * 256 * 1024
    assert layer_activation_bytes(llama, lay) == pytest.approx(expected)
    fp8 = dataclasses.replace(llama, precision="fp8")
    assert layer_activation_bytes(fp8, lay) < layer_activation_bytes(llama, lay)


def test_uneven_stages_split_the_layers_and_name_the_fix() -> None:
    m = preset("llama3-405b")
    lay = ParallelLayout(tp=8, pp=16, dp=2, first_stage_layers=7, last_stage_layers=7)
    assert lay.stage_layers(m) == [7] + [8] * 14 + [7]
    lay.check(m)
    assert dataclasses.replace(lay, virtual_stages=8).embedding_and_loss_as_layers(m)
    with pytest.raises(PlannerError) as err:
        ParallelLayout(tp=8, pp=16, dp=2).check(m)
    assert err.value.field == "pp" and "first_stage_layers" in err.value.message
    with pytest.raises(PlannerError) as err:
        ParallelLayout(pp=16, first_stage_layers=6, last_stage_layers=7).check(m)
    assert err.value.field == "first_stage_layers"
    with pytest.raises(PlannerError) as err:
        ParallelLayout(first_stage_layers=3)
    assert err.value.field == "first_stage_layers"
    assert uneven_stages(126, 16) == (7, 8) and uneven_stages(128, 16) is None


def test_lighter_end_stages_balance_the_embedding_and_the_loss() -> None:
    m = dataclasses.replace(preset("llama3-8b"), layers=30, global_batch=64)
    even = ParallelLayout(tp=4, pp=2, dp=1, sequence_parallel=True)
    even_t = step_time(m, dataclasses.replace(even, pp=3), H100)
    lighter = dataclasses.replace(even, pp=4, first_stage_layers=7, last_stage_layers=7)
    assert lighter.stage_layers(m) == [7, 8, 8, 7]
    assert {s.stage for s in stage_memory(m, lighter)} == {"first", "second", "last"}
    assert step_time(m, lighter, H100).iteration_s < even_t.iteration_s


def test_context_parallelism_splits_activations_and_costs_kv_exchange() -> None:
    m = dataclasses.replace(preset("llama3-8b"), seq_len=131072, global_batch=8)
    one = ParallelLayout(tp=8, dp=8, sequence_parallel=True, flash_attention=True)
    cp8 = dataclasses.replace(one, dp=1, cp=8)
    assert layer_activation_bytes(m, cp8) == pytest.approx(layer_activation_bytes(m, one) / 8)
    t = step_time(m, cp8, H100)
    assert t.cp_comm_s >= 0 and t.iteration_s > 0
    with pytest.raises(PlannerError) as err:
        dataclasses.replace(cp8, cp=3, dp=1).check(m)
    assert err.value.field == "cp"
    assert context_parallel_options(m, 8) == [1, 2, 4, 8]
    assert context_parallel_options(preset("gpt3-175b"), 8) == [1]  # 2,048 tokens


def test_fsdp_gathers_every_micro_batch() -> None:
    # The same batch in more, smaller micro-batches: FSDP gathers the weights for each one,
    # so its communication grows with gradient accumulation (it was priced once before).
    m = dataclasses.replace(preset("llama2-13b"), global_batch=128)
    few = ParallelLayout(dp=64, micro_batch=2, zero=3, flash_attention=True)
    many = dataclasses.replace(few, dp=8, micro_batch=1)  # 16 micro-batches
    comm_few = step_time(m, few, A100)
    comm_many = step_time(m, many, A100)
    assert comm_few.shard_comm_s > 0 and comm_few.dp_comm_s == 0.0
    per_mb_few = comm_few.shard_comm_s / few.microbatches(m)
    per_mb_many = comm_many.shard_comm_s / many.microbatches(m)
    assert per_mb_many > 0 and per_mb_few > 0
    assert comm_many.shard_comm_s > comm_few.shard_comm_s


def test_hybrid_sharding_sits_between_replication_and_full_sharding() -> None:
    m = preset("llama2-13b")
    full = ParallelLayout(dp=64, zero=3, flash_attention=True)
    hsdp = dataclasses.replace(full, shard_group=8)
    assert hsdp.sharding == "hsdp" and full.sharding == "zero3"
    mems = [memory_per_gpu(m, lay).total for lay in (full, hsdp, dataclasses.replace(full, zero=0))]
    assert mems == sorted(mems)
    assert step_time(m, hsdp, A100).dp_comm_s > 0  # gradients all-reduced across replicas
    with pytest.raises(PlannerError) as err:
        ParallelLayout(dp=64, zero=1, shard_group=8)
    assert err.value.field == "shard_group"


def test_fp8_runs_gemms_at_the_fp8_peak_where_the_gpu_has_one() -> None:
    bf16 = preset("llama3-8b")
    fp8 = dataclasses.replace(bf16, precision="fp8")
    lay = ParallelLayout(tp=2, dp=4, sequence_parallel=True, flash_attention=True)
    assert step_time(fp8, lay, H100).compute_s < step_time(bf16, lay, H100).compute_s
    # No fp8 on A100: Transformer Engine's fp8 does not run there; priced as bf16.
    assert step_time(fp8, lay, A100).compute_s == step_time(bf16, lay, A100).compute_s


def test_tensor_parallel_overlap_exposes_one_ring_step() -> None:
    m = preset("gpt3-13b")
    lay = ParallelLayout(tp=8, dp=1, sequence_parallel=True, flash_attention=True)
    plain = step_time(m, lay, H100)
    overlapped = step_time(m, dataclasses.replace(lay, tp_comm_overlap=True), H100)
    assert overlapped.tp_comm_s == pytest.approx(plain.tp_comm_s / 8)
    with pytest.raises(PlannerError) as err:
        ParallelLayout(tp=8, tp_comm_overlap=True)
    assert err.value.field == "tp_comm_overlap"


def test_search_uses_cp_for_long_sequences_and_uneven_stages() -> None:
    long = dataclasses.replace(preset("llama3-8b"), seq_len=65536, global_batch=16)
    plans = search(long, 64, H100, top=40)
    assert any(p.layout.cp > 1 for p in plans)
    odd = dataclasses.replace(preset("llama3-8b"), layers=30, global_batch=64)
    assert any(p.layout.uneven for p in search(odd, 32, A100, top=200))
    for p in search(preset("gpt3-175b"), 128, H100, top=20):
        assert not (p.layout.pp > 1 and p.layout.zero >= 2)


def test_torchtitan_per_op_checkpointing_recomputes_every_second_matmul() -> None:
    """torchtitan's per-operator selective checkpointing keeps the outputs of a layer's
    matrix multiplies and of its fused attention, except every second multiply in forward
    order (key, output projection, MLP up-projection), which it recomputes with every
    element-wise operator: more FLOPs than no recompute, fewer than full, and activations
    between the two."""
    from trainyard.planner.compute import flops_executed
    from trainyard.planner.rows import row_inputs

    m = dataclasses.replace(preset("llama2-70b"), global_batch=64)
    h, k_d, f = 8192, 8 * 128, 28672
    assert m.op_recomputed_matmul_params == h * k_d + h * h + h * f
    none, op, full = (flops_executed(m, r) for r in ("none", "op", "full"))
    tokens = m.tokens_per_iteration
    assert op - none == pytest.approx(80 * 2 * (h * k_d + h * h + h * f) * tokens)
    assert none < op < full
    lay = ParallelLayout(dp=64, zero=3, flash_attention=True)
    b = {
        r: layer_activation_bytes(m, dataclasses.replace(lay, recompute=r))
        for r in ("none", "op", "full")
    }
    sbh = m.seq_len * h
    assert b["op"] == pytest.approx((2 + 6 + 2 * 8 / 64 + 2 * f / h) * sbh)
    assert b["full"] < b["op"] < b["none"]
    t = {r: step_time(m, dataclasses.replace(lay, recompute=r), A100).iteration_s for r in b}
    assert t["none"] < t["op"] < t["full"]
    row = {
        "model": "Llama 2 70B", "num_layers": "80", "hidden_size": "8192",
        "num_attention_heads": "64", "num_kv_heads": "8", "ffn_hidden_size": "28672",
        "mlp": "swiglu", "seq_len": "4096", "vocab_size": "32000", "gpu_type": "A100 80GB",
        "num_gpus": "64", "tensor_parallel": "1", "pipeline_parallel": "1",
        "data_parallel": "64", "sharding": "fsdp", "global_batch_size": "64",
        "micro_batch_size": "1", "activation_recompute": "selective_op",
        "flash_attention": "yes",
    }  # fmt: skip
    parsed = row_inputs(row)
    assert not isinstance(parsed, str) and parsed[1].recompute == "op"
    with pytest.raises(
        PlannerError, match=r"activation_recompute.*none, norms .*, selective, full or op"
    ):
        row_inputs({**row, "activation_recompute": "sometimes"})
