"""Recomputing the layer norms and the experts' activation ("norms", Megatron-Core's
`--recompute-modules layernorm moe_act`): what it saves, what it costs, how it is read,
searched and launched (trainyard.planner.memory, work, compute, rows, search, launch)."""

from __future__ import annotations

import dataclasses

import pytest
from published_rows import ROW
from test_launch_megatron_args import parse

from trainyard.planner.compute import step_time
from trainyard.planner.evaluate import row_inputs
from trainyard.planner.hardware import gpu
from trainyard.planner.launch import launch_settings
from trainyard.planner.layout import ParallelLayout
from trainyard.planner.memory import layer_activation_bytes, memory_per_gpu
from trainyard.planner.presets import preset
from trainyard.planner.search import Plan
from trainyard.planner.work import flops_executed

H100 = gpu("H100")
SP = ParallelLayout(tp=8, dp=8, sequence_parallel=True, flash_attention=True)


@pytest.mark.parametrize(("precision", "saved"), [("bf16", 4.0), ("fp8", 2.0)])
def test_the_norms_outputs_are_what_it_saves_in_a_dense_layer(precision: str, saved: float) -> None:
    # The QKV projection's and the MLP's inputs: 4 bytes per s·b·h in 16 bits, 2 in fp8,
    # split over tp with sequence parallelism.
    llama = dataclasses.replace(preset("llama3-70b"), precision=precision)
    none = layer_activation_bytes(llama, SP)
    norms = layer_activation_bytes(llama, dataclasses.replace(SP, recompute="norms"))
    sbh = llama.seq_len * llama.hidden
    assert none - norms == pytest.approx(saved * sbh / 8)


def test_an_moe_layer_also_drops_its_experts_activation_products() -> None:
    qwen = preset("qwen3-30b-a3b")
    lay = ParallelLayout(dp=16, ep=8, flash_attention=True)
    none = layer_activation_bytes(qwen, lay)
    norms = layer_activation_bytes(qwen, dataclasses.replace(lay, recompute="norms"))
    sbh = qwen.seq_len * qwen.hidden
    routed = qwen.moe_topk * qwen.moe_ffn_hidden / qwen.hidden
    assert none - norms == pytest.approx((4.0 + 2.0 * routed) * sbh)


def test_it_costs_memory_traffic_not_gemms() -> None:
    llama = preset("llama3-70b")
    assert flops_executed(llama, "norms") == flops_executed(llama, "none")
    times = {
        mode: step_time(llama, dataclasses.replace(SP, recompute=mode), H100).iteration_s
        for mode in ("none", "norms", "full")
    }
    assert times["none"] < times["norms"] < 1.01 * times["none"] < times["full"]
    mem = {
        mode: memory_per_gpu(llama, dataclasses.replace(SP, recompute=mode)).activations
        for mode in ("none", "norms", "full")
    }
    assert mem["none"] > mem["norms"] > mem["full"]


def test_a_row_that_names_the_modules_reads_as_norms_and_one_that_needs_it_infers_it() -> None:
    for cell in ("layernorm", "norms", "recompute_modules: layernorm, moe_act"):
        inputs = row_inputs({**ROW, "activation_recompute": cell})
        assert not isinstance(inputs, str) and inputs[1].recompute == "norms", cell
    # Llama 3.1 405B in fp8 on 256 B200, tp 4, pp 16 x 4 chunks: nothing recomputed (186.7
    # GB) does not fit 95 % of the 191.5 GB CUDA gives, the norms (176.4 GB) do, so a row
    # that does not say is read with them.
    row = {"model": "Llama 3.1 405B", "num_gpus": "256", "gpu_type": "B200",
           "precision": "fp8", "global_batch_size": "1536", "micro_batch_size": "1",
           "seq_len": "8192", "tensor_parallel": "4", "pipeline_parallel": "16",
           "virtual_pipeline": "4", "tokens_per_sec_per_gpu": "843"}  # fmt: skip
    inputs = row_inputs(row)
    assert not isinstance(inputs, str) and inputs[1].recompute == "norms"


def test_latent_attention_drops_its_up_projected_q_k_v_and_runs_their_gemms_again() -> None:
    ds = preset("deepseek-v3")
    lay = ParallelLayout(pp=16, dp=16, ep=8, flash_attention=True, first_stage_layers=4,
                         last_stage_layers=1)  # fmt: skip
    norms = dataclasses.replace(lay, recompute="norms")
    h = ds.hidden
    q, kv = ds.attention_width / h, ds.kv_heads * ds.head_dim / h
    routed = ds.moe_share * ds.moe_topk * ds.moe_ffn_hidden / h
    latents = 2.0 * (ds.q_lora_rank + ds.kv_lora_rank + ds.rope_dim) / h
    saved = 4.0 + 2.0 * routed + 2.0 * q + 4.0 * kv - latents
    sbh = ds.seq_len * h
    drop = layer_activation_bytes(ds, lay) - layer_activation_bytes(ds, norms)
    assert drop == pytest.approx(saved * sbh)
    # the up-projections (54.5M weights of a layer's 585M) run once more
    extra = flops_executed(ds, "norms") - flops_executed(ds, "none")
    assert extra == pytest.approx(2.0 * ds.mla_up_params * ds.tokens_per_iteration * ds.layers)
    assert ds.mla_up_params == 1536 * 128 * 192 + 512 * 128 * 256


@pytest.mark.parametrize(
    ("name", "modules"),
    [("llama3-8b", ["layernorm"]), ("qwen3-30b-a3b", ["layernorm", "moe_act"]),
     ("deepseek-v3", ["layernorm", "moe_act", "mla_up_proj"])],
)  # fmt: skip
def test_it_launches_as_megatron_cores_recompute_modules(name: str, modules: list[str]) -> None:
    model = preset(name)
    lay = ParallelLayout(dp=8 if model.layers % 2 == 0 else 1, ep=8 if model.is_moe else 1,
                         zero=1, recompute="norms", flash_attention=True)  # fmt: skip
    if model.is_mla:  # DeepSeek-V3 on 16 x 8 stages
        lay = dataclasses.replace(lay, pp=16, dp=8, first_stage_layers=4, last_stage_layers=1)
    plan = Plan(lay, memory_per_gpu(model, lay), step_time(model, lay, H100), 1.0, 1.0, 0.5)
    flags = parse(launch_settings(model, plan, H100).megatron)
    assert flags["--recompute-granularity"] == ["selective"]
    assert flags["--recompute-modules"] == modules


def test_a_row_that_needs_more_than_the_norms_offloads_where_that_is_faster() -> None:
    # Llama 3 70B fully sharded on 64 GB200 / GB300 (Bridge's FSDP rows, which state no
    # recompute): offloading a share of the layers to the Grace host beats full recompute,
    # and the fewest layers that fit come out near the 40 / 20 of Bridge's recipes.
    row = {"model": "Llama 3 70B", "num_gpus": "64", "precision": "fp8",
           "global_batch_size": "128", "micro_batch_size": "2", "seq_len": "8192",
           "tensor_parallel": "1", "pipeline_parallel": "1", "fsdp": "64",
           "tokens_per_sec_per_gpu": "4224"}  # fmt: skip
    offloaded = {}
    for system in ("GB200", "GB300"):
        inputs = row_inputs({**row, "gpu_type": system})
        assert not isinstance(inputs, str)
        assert inputs[1].recompute == "none" and inputs[1].offload_layers > 0, system
        offloaded[system] = inputs[1].offload_layers
    assert 30 <= offloaded["GB200"] <= 50 and 10 <= offloaded["GB300"] <= 30
    # where recompute is stated, it stays
    stated = row_inputs({**row, "gpu_type": "GB200", "activation_recompute": "full"})
    assert not isinstance(stated, str) and stated[1].offload_layers == 0
