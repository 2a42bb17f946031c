"""Issue 18: mixtures of experts in the planner: parameter and FLOP counts from the real shapes
(checked against the published totals and Megatron-Bridge's own FLOP counts), expert
parallelism's validity, memory and all-to-all time, and the search over it."""

from __future__ import annotations

import dataclasses

import pytest

from trainyard.planner.compute import step_time
from trainyard.planner.errors import PlannerError
from trainyard.planner.hardware import gpu
from trainyard.planner.layout import ParallelLayout
from trainyard.planner.memory import memory_per_gpu
from trainyard.planner.model import Model
from trainyard.planner.moe import all_to_all_s, expert_gemm_size, layer_all_to_all_s
from trainyard.planner.presets import preset
from trainyard.planner.search import search


def active(model: Model, tables: int) -> float:
    """Parameters one token goes through: its layers' matrix weights and `tables` of the two
    vocabulary tables (publishers differ: Mistral and Qwen count both, OpenAI only one)."""
    return model.layers * model.layer_matmul_params + tables * model.vocab * model.hidden


@pytest.mark.parametrize(
    ("name", "total_b", "active_b", "tables"),
    [
        ("mixtral-8x7b", 46.7, 12.9, 2),  # Jiang et al. 2024, arXiv:2401.04088 §2
        ("qwen3-30b-a3b", 30.5, 3.3, 2),  # Qwen3 model card: 30.5B total, 3.3B activated
        ("qwen3-235b-a22b", 235.0, 22.0, 2),  # 235B total, 22B activated
        ("gpt-oss-120b", 116.83, 5.13, 1),  # gpt-oss model card: 116.83B total, 5.13B active
    ],
)
def test_published_parameter_counts(
    name: str, total_b: float, active_b: float, tables: int
) -> None:
    model = preset(name)
    assert model.params / 1e9 == pytest.approx(total_b, rel=0.01)
    assert active(model, tables) / 1e9 == pytest.approx(active_b, rel=0.02)


def test_kimi_k2_is_deepseek_v3s_shape_with_more_experts_and_fewer_heads() -> None:
    # The model card rounds: 1T total, 32B activated (one vocabulary table counted).
    kimi, ds = preset("kimi-k2"), preset("deepseek-v3")
    assert kimi.params / 1e12 == pytest.approx(1.0, rel=0.03)
    assert active(kimi, 1) / 1e9 == pytest.approx(32.0, rel=0.02)
    assert (kimi.layers, kimi.hidden, kimi.moe_ffn_hidden) == (
        ds.layers,
        ds.hidden,
        ds.moe_ffn_hidden,
    )
    assert (kimi.experts, kimi.heads, kimi.dense_layers) == (384, 64, 1)


@pytest.mark.parametrize(
    ("name", "tflops", "tokens"),
    [("qwen3-30b-a3b", 206, 8960), ("qwen3-235b-a22b", 253, 1712)],
)
def test_flops_match_megatron_bridge_counts(name: str, tflops: float, tokens: float) -> None:
    """Megatron-Bridge publishes both tokens/s and model TFLOP/s per GPU for its Qwen3 runs
    (docs/performance-summary-archive.md, 26.04.01, DGX-H100): their ratio is its FLOPs per
    token, which counts the causal half of the attention core."""
    model = preset(name)
    core = 3 * model.layers * 4.0 * model.seq_len * model.attention_width
    ours = model.flops_per_token(recompute=False) - core / 2
    assert ours == pytest.approx(tflops * 1e12 / tokens, rel=0.02)


def test_dense_models_are_unchanged_by_the_moe_fields() -> None:
    dense = preset("llama3-8b")
    assert not dense.is_moe and dense.expert_params == 0
    assert dense.mlp_width == dense.ffn_hidden and dense.moe_topk == 0
    explicit = dataclasses.replace(dense, head_dim=dense.hidden // dense.heads)
    assert explicit == dense and explicit.layer_params == dense.layer_params


def test_moe_fields_need_experts_and_valid_top_k() -> None:
    base = preset("llama2-7b")
    with pytest.raises(PlannerError) as exc:
        dataclasses.replace(base, moe_topk=2)
    assert exc.value.field == "moe_topk"
    with pytest.raises(PlannerError) as exc:
        dataclasses.replace(base, experts=4, moe_topk=8)
    assert exc.value.field == "moe_topk"
    moe = dataclasses.replace(base, experts=8)
    assert (moe.moe_topk, moe.moe_ffn_hidden) == (2, base.ffn_hidden)  # Megatron's defaults


def test_a_changed_hidden_size_keeps_a_derived_head_dim_derived() -> None:
    from trainyard.planner.presets import model_from_mapping

    wider = model_from_mapping({"preset": "llama2-7b", "hidden": 5120, "heads": 40})
    assert wider.head_dim == 128
    qwen = model_from_mapping({"preset": "qwen3-30b-a3b", "hidden": 4096})
    assert qwen.head_dim == 128  # stated, not derived: kept


@pytest.mark.parametrize(
    ("layout", "field"),
    [
        (ParallelLayout(dp=16, ep=3), "ep"),  # 3 does not divide 128 experts
        (ParallelLayout(dp=4, ep=8), "ep"),  # more than tp x cp x dp
        (ParallelLayout(tp=2, dp=8, ep=8), "sequence_parallel"),
    ],
)
def test_invalid_expert_layouts_name_the_field(layout: ParallelLayout, field: str) -> None:
    with pytest.raises(PlannerError) as exc:
        layout.check(preset("qwen3-30b-a3b"))
    assert exc.value.field == field


def test_expert_parallelism_needs_experts() -> None:
    with pytest.raises(PlannerError) as exc:
        ParallelLayout(dp=8, ep=8).check(preset("llama2-7b"))
    assert exc.value.field == "ep"


def test_experts_weights_split_over_ep_and_their_optimizer_over_expert_dp() -> None:
    model = preset("qwen3-30b-a3b")
    one = memory_per_gpu(model, ParallelLayout(dp=16, zero=1, flash_attention=True))
    eight = memory_per_gpu(model, ParallelLayout(dp=16, ep=8, zero=1, flash_attention=True))
    experts = model.layers * model.expert_params
    assert (one.weights - eight.weights) * 1e9 == pytest.approx(2 * experts * (1 - 1 / 8))
    # ZeRO-1 shards the experts' optimizer over the 16 / 8 = 2 ranks holding the same experts
    assert (one.optimizer - eight.optimizer) * 1e9 == pytest.approx(
        12 * experts / 16 - 12 * experts / 8 / 2
    )


def test_all_to_all_prices_nvlink_inside_a_node_and_the_nic_across() -> None:
    h100 = gpu("H100")
    inside = all_to_all_s(1e8, 8, 8, h100)
    across = all_to_all_s(1e8, 16, 8, h100)
    assert 0 < inside < across
    assert all_to_all_s(1e8, 1, 8, h100) == 0.0
    # across two nodes half the bytes cross the network at the NIC's rate
    net = h100.network_gb_s * 0.96e9  # ib_link: 12 GB/s per 100 Gbit/s
    assert across == pytest.approx(0.5e8 / net + 14e-6, rel=1e-3)


def test_all_to_all_time_and_its_place_in_the_step() -> None:
    model, h100 = preset("qwen3-30b-a3b"), gpu("H100")
    base = ParallelLayout(dp=16, zero=1, flash_attention=True)
    tokens = float(model.seq_len)
    assert layer_all_to_all_s(model, base, h100, 8, tokens, 3.0) == 0.0
    in_node = dataclasses.replace(base, ep=8)
    two_nodes = dataclasses.replace(base, ep=16)
    a, b = (layer_all_to_all_s(model, lay, h100, 8, tokens, 3.0) for lay in (in_node, two_nodes))
    assert 0 < a < b
    full = dataclasses.replace(in_node, recompute="full")
    assert layer_all_to_all_s(model, full, h100, 8, tokens, 4.0) == pytest.approx(1.5 * a)
    st = step_time(model, two_nodes, h100)
    assert st.ep_comm_s == pytest.approx(model.layers * b * two_nodes.microbatches(model))
    assert step_time(model, in_node, h100).iteration_s < st.iteration_s


def test_thin_expert_gemms_run_below_the_dense_efficiency() -> None:
    model = preset("qwen3-30b-a3b")
    small = expert_gemm_size(model, ParallelLayout(dp=16, ep=16), 4096.0)  # 4,096 per expert
    large = expert_gemm_size(model, ParallelLayout(dp=16, ep=16, micro_batch=8), 8 * 4096.0)
    assert small < large <= model.hidden
    assert small == pytest.approx(1.25 / (1 / 4096 + 1 / 2048 + 1 / 768))
    assert expert_gemm_size(preset("llama3-8b"), ParallelLayout(), 4096.0) == 4096


def test_search_tries_expert_parallelism_for_moe_models_only() -> None:
    model, h100 = preset("qwen3-30b-a3b"), gpu("H100")
    plans = search(model, 16, h100, top=30)
    assert {p.layout.ep for p in plans} > {1}
    for plan in plans:
        plan.layout.check(model)
        assert model.experts % plan.layout.ep == 0
    assert {p.layout.ep for p in search(preset("llama2-7b"), 16, h100, top=30)} == {1}


def test_sliding_window_attention_costs_its_window() -> None:
    oss = preset("gpt-oss-120b")
    assert oss.attention_spans() == (0.5, 0.5)  # every other layer attends to all 4,096
    _, core = oss.layer_forward_flops(1.0)
    assert core == pytest.approx(4.0 * (0.5 * 4096 + 0.5 * 128) * 64 * 64)
    full = dataclasses.replace(oss, window=0, full_attention_every=0)
    assert full.attention_spans() == (1.0, 0.0)
    assert full.layer_forward_flops(1.0)[1] == pytest.approx(4.0 * 4096 * 64 * 64)
    longer = dataclasses.replace(oss, window=8192)  # a window past the sequence is no window
    assert longer.attention_spans() == (1.0, 0.0)
    layout = ParallelLayout(pp=4, dp=16, ep=8, flash_attention=True)
    h100 = gpu("H100")
    assert step_time(oss, layout, h100).iteration_s < step_time(full, layout, h100).iteration_s
    with pytest.raises(PlannerError) as exc:
        dataclasses.replace(full, full_attention_every=2)
    assert exc.value.field == "full_attention_every"


def test_zero3_gathers_experts_over_their_expert_data_parallel_group() -> None:
    """Under ZeRO-3 the experts are sharded over tp·cp·dp/ep ranks: with ep = dp there is
    nothing to gather of them (each GPU holds its experts whole), with ep = dp/2 they are
    gathered from two ranks for every micro-batch."""
    model, h100 = preset("qwen3-30b-a3b"), gpu("H100")
    whole = ParallelLayout(dp=8, ep=8, zero=3, flash_attention=True)
    halves = dataclasses.replace(whole, ep=4)
    assert step_time(model, whole, h100).shard_comm_s < step_time(model, halves, h100).shard_comm_s
    experts = model.layers * model.expert_params
    weights = memory_per_gpu(model, whole).weights - memory_per_gpu(model, halves).weights
    # ep 8: 1/8 of the experts whole; ep 4: 1/4 of them in halves (1/8) -- the same shard, but
    # the ep-4 GPU also holds two layers' gathered experts (1/4 each) while computing
    gathered = 2 * 2 * model.expert_params / 4 - 2 * 2 * model.expert_params / 8
    assert weights * 1e9 == pytest.approx(2 * experts / 8 - 2 * experts / 8 - gathered)


def test_a_gb200_rack_is_one_nvlink_domain() -> None:
    """GB200 NVL72: 72 GPUs on NVLink; groups of power-of-two sizes fit whole in it, while the
    8-GPU boards keep Megatron's packing (gcd)."""
    from trainyard.planner.comm import per_node

    assert gpu("GB200").gpus_per_node == 72
    assert (per_node(64, 72), per_node(96, 72), per_node(48, 72)) == (64, 48, 48)
    assert (per_node(12, 8), per_node(64, 8), per_node(4, 8)) == (4, 8, 4)
    model = preset("gpt-oss-120b")
    layout = ParallelLayout(dp=64, ep=64, micro_batch=4, flash_attention=True)
    rack = step_time(model, layout, gpu("GB200"), gpu("GB200").gpus_per_node)
    boards = step_time(model, layout, gpu("GB200"), 8)  # the same GPUs on 8-GPU nodes
    assert rack.ep_comm_s < boards.ep_comm_s / 3  # the all-to-all stays on NVLink


def test_deepseek_v3_latent_attention_and_dense_first_layers() -> None:
    """DeepSeek-V3: 671B parameters, 37B activated (arXiv:2412.19437 §1; its MTP module not
    counted); latent attention's weights and core from its ranks and head widths."""
    ds = preset("deepseek-v3")
    assert ds.params / 1e9 == pytest.approx(671, rel=0.005)
    assert active(ds, 2) / 1e9 == pytest.approx(37, rel=0.02)
    assert ds.is_mla and ds.moe_share == pytest.approx(58 / 61)
    h, a = 7168, 128  # q: down 1536, up to 128 heads x (128 + 64); kv: down 512 + 64, up 128 x 256
    expected = h * 1536 + 1536 * a * 192 + h * (512 + 64) + 512 * a * 256 + a * 128 * h
    assert ds.attention_params == expected
    assert ds.core_width == pytest.approx(a * (192 + 128) / 2)
    # FLOPs per token with the core counted causally: Megatron-Bridge's published 864 TFLOP/s
    # at 3,328 tokens/s/GPU (26.04.01, 256 B200) is 259.6 GFLOP, with its MTP layer (about 2 %)
    core = 3 * ds.layers * 4.0 * ds.seq_len * ds.core_width
    assert (ds.flops_per_token(recompute=False) - core / 2) / 1e9 == pytest.approx(259.6, rel=0.05)
    with pytest.raises(PlannerError) as exc:
        dataclasses.replace(preset("llama2-7b"), dense_layers=2)
    assert exc.value.field == "dense_layers"
    with pytest.raises(PlannerError) as exc:
        dataclasses.replace(preset("llama2-7b"), v_head_dim=128)
    assert exc.value.field == "v_head_dim"


def test_dense_first_layers_carry_no_experts_or_all_to_all() -> None:
    ds, h100 = preset("deepseek-v3"), gpu("H100")
    all_moe = dataclasses.replace(ds, dense_layers=0)
    assert ds.expert_params == pytest.approx(all_moe.expert_params * 58 / 61, rel=1e-6)
    layout = ParallelLayout(pp=16, dp=128, ep=64, flash_attention=True, zero=1)
    tokens = float(ds.seq_len)
    a, b = (layer_all_to_all_s(m, layout, h100, 8, tokens, 3.0) for m in (ds, all_moe))
    assert a == pytest.approx(b * 58 / 61)
