"""How a published table's cells may be spelled (trainyard.planner.cells), read through a row
(`row_inputs`, `row_target`): other names of columns and values, units, unstated cells."""

from __future__ import annotations

import pytest
from published_rows import ROW

from trainyard.planner.cell_names import attention_flops_cell, gpu_name
from trainyard.planner.cells import number
from trainyard.planner.errors import PlannerError
from trainyard.planner.evaluate import row_inputs
from trainyard.planner.hardware import CATALOGUE
from trainyard.planner.rows import row_target


@pytest.mark.parametrize(
    ("column", "text", "read"),
    [
        ("sharding", "ZeRO-1", (1, False)),
        ("sharding", "ZeRO stage 2", (2, False)),
        ("sharding", "FULL_SHARD", (3, False)),
        ("sharding", "FSDP2", (3, False)),
        ("sharding", "HYBRID_SHARD", (3, True)),
        ("sharding", "distributed optimizer", (1, False)),
        ("sharding", "ZeRO-1 (distributed optimizer)", (1, False)),
        ("sharding", "DeepSpeed ZeRO stage 3", (3, False)),
        ("sharding", "FSDP (FULL_SHARD)", (3, False)),
        ("sharding", "HSDP, shards of 8", (3, True)),
        ("sharding", "Megatron DDP", (0, False)),
        ("precision", "bf16-mixed", "bf16"),
        ("precision", "FP8 (hybrid, bf16 weights)", "fp8"),
        ("precision", "torch.bfloat16", "bf16"),
        ("precision", "float16", "fp16"),
        ("precision", "MXFP8", "fp8"),
        ("precision", "e4m3, tensorwise", "fp8"),
        ("precision", "FP8-CS", "fp8"),
        ("mlp", "SwiGLU", "swiglu"),
        ("mlp", "silu", "swiglu"),
        ("mlp", "relu2", "squared_relu"),
        ("mlp", "Squared ReLU", "squared_relu"),
        ("mlp", "GeLU (tanh approximation)", "gelu"),
        ("mlp", "SwiGLU FFN", "swiglu"),
        ("activation_recompute", "block", "full"),
        ("activation_recompute", "yes", "full"),
        ("activation_recompute", "off", "none"),
        ("activation_recompute", "activation checkpointing: full", "full"),
        ("activation_recompute", "Megatron selective (core_attn)", "selective"),
        ("flash_attention", "FlashAttention-2", True),
        ("flash_attention", "FA3", True),
        ("flash_attention", "cuDNN fused attention", True),
        ("flash_attention", "SDPA", True),
        ("flash_attention", "eager", False),
        ("flash_attention", "disabled", False),
        ("flash_attention", "n/a", True),  # unstated: a modern table's default, fused
        ("sharding", "-", (1, False)),  # unstated, data parallel: the distributed optimizer
        ("gpu_type", "A100 PCIe 40GB", "A100-40GB"),
        ("gpu_type", "A100 (40 GB)", "A100-40GB"),
        ("gpu_type", "NVIDIA A100-SXM4-80GB", "A100-80GB"),
    ],
)
def test_other_spellings_of_a_cell_are_read(column: str, text: str, read: object) -> None:
    row = {**ROW, "num_gpus": "8", "data_parallel": "8", column: text}
    inputs = row_inputs(row)
    assert not isinstance(inputs, str)
    model, layout, device = inputs
    got = {
        "sharding": (layout.zero, layout.shard_group > 0),
        "precision": model.precision,
        "mlp": model.mlp,
        "activation_recompute": layout.recompute,
        "flash_attention": layout.flash_attention,
        "gpu_type": device.name,
    }[column]
    assert got == read


def test_an_attention_cell_naming_no_kernel_is_a_skip_naming_its_column() -> None:
    with pytest.raises(PlannerError) as err:
        row_inputs({**ROW, "flash_attention": "sometimes"})
    assert err.value.field == "flash_attention" and "cudnn" in err.value.message


def test_a_percentage_may_carry_its_sign() -> None:
    row = {**ROW, "achieved_tflops_per_gpu": "", "mfu_pct": "38%"}
    inputs = row_inputs(row)
    assert not isinstance(inputs, str)
    assert row_target(row, inputs[2]) == ("mfu_tflops", pytest.approx(0.38 * 312))


def test_moe_columns_read_under_megatron_and_hugging_face_names() -> None:
    row = {**ROW, "num_gpus": "8", "num_local_experts": "8", "num_experts_per_tok": "2",
           "moe_intermediate_size": "512", "expert_model_parallel_size": "4",
           "kv_channels": "128", "sliding_window": "256", "full_attention_every": "2"}  # fmt: skip
    inputs = row_inputs(row)
    assert not isinstance(inputs, str)
    model, layout, _ = inputs
    assert (model.experts, model.moe_topk, model.moe_ffn_hidden) == (8, 2, 512)
    assert (model.head_dim, model.window, layout.ep) == (128, 256, 4)
    # the column's own name wins over another name for it
    named = row_inputs({**row, "expert_parallel": "8"})
    assert not isinstance(named, str) and named[1].ep == 8


@pytest.mark.parametrize(
    ("cells", "target"),
    [
        ({"iteration_time_s": "1.5 s"}, ("iteration_time_s", 1.5)),
        ({"iteration_time_s": "", "iteration_time_ms": "1500 ms"}, ("iteration_time_s", 1.5)),
        ({"tokens_per_sec_per_gpu": "3,200 tok/s"}, ("tokens_per_sec_per_gpu", 3200.0)),
        ({"achieved_tflops_per_gpu": "230 TFLOP/s"}, ("tflops_per_gpu", 230.0)),
        ({"iteration_time_s": "12,300 ms"}, ("iteration_time_s", 12.3)),
        ({"iteration_time_s": "0.5 min"}, ("iteration_time_s", 30.0)),
        ({"iteration_time_s": "", "iteration_time_ms": "1.5 s"}, ("iteration_time_s", 1.5)),
    ],
)
def test_a_figure_may_repeat_its_unit(cells: dict[str, str], target: tuple[str, float]) -> None:
    row = {**ROW, "achieved_tflops_per_gpu": "", **cells}
    inputs = row_inputs(row)
    assert not isinstance(inputs, str)
    assert row_target(row, inputs[2]) == (target[0], pytest.approx(target[1]))


@pytest.mark.parametrize(
    ("cells", "column", "says"),
    [
        ({"mfu_pct": "143%"}, "mfu_pct", "above the GPU's highest peak"),
        ({"achieved_tflops_per_gpu": "430 TFLOP/s"}, "achieved_tflops_per_gpu", "above"),
        ({"mfu_pct": "-5%"}, "mfu_pct", "must be > 0, got '-5%'"),
        ({"tokens_per_sec_per_gpu": "0"}, "tokens_per_sec_per_gpu", "got '0'"),
    ],
)
def test_an_impossible_figure_is_a_skip_naming_the_cell_as_written(
    cells: dict[str, str], column: str, says: str
) -> None:
    """Found by an outside review: an MFU of 143 % on an A100 row was scored, and a negative
    one was refused naming `mfu_tflops`, a figure the user never wrote."""
    row = {**ROW, "achieved_tflops_per_gpu": "", **cells}
    inputs = row_inputs(row)
    assert not isinstance(inputs, str)
    with pytest.raises(PlannerError) as err:
        row_target(row, inputs[2])
    assert err.value.field == column and says in err.value.message


def test_header_cells_as_tables_print_them() -> None:
    """`TensorParallelSize` (vLLM, NeMo), the Llama 3 paper's `Seq. Len.` and `BF16 MFU`
    name the planner's columns (an outside review found them dropped)."""
    from trainyard.planner.cells import column_name as _column

    assert _column("Seq. Len.") == "seq_len"
    assert _column("TensorParallelSize") == "tensor_parallel_size"
    cells = {"tensor_parallel_size": "4", "pipeline_parallel_size": "2", "bf16_mfu": "38"}
    assert number(cells, "tensor_parallel") == 4 and number(cells, "pipeline_parallel") == 2
    assert number(cells, "mfu_pct") == 38


def test_context_and_gpu_counts_may_be_written_in_k_and_other_suffixes_are_refused() -> None:
    row = {**ROW, "seq_len": "8K", "num_gpus": "16K", "data_parallel": "16384",
           "global_batch_size": "16384"}  # fmt: skip
    inputs = row_inputs(row)
    assert not isinstance(inputs, str)
    model, layout, _device = inputs
    assert model.seq_len == 8192 and layout.gpus == 16384
    # GPUs as nodes x GPUs per node, or with their unit.
    for text in ("2048 x 8", "2048×8 GPUs", "16384 GPUs"):
        inputs = row_inputs({**row, "num_gpus": text})
        assert not isinstance(inputs, str) and inputs[1].gpus == 16384, text
    refused = (("seq_len", "8M"), ("global_batch_size", "4K"), ("iteration_time_s", "1.5 GB"),
               ("tokens_per_sec_per_gpu", "3.2k"), ("num_gpus", "8x"))  # fmt: skip
    for column, text in refused:
        with pytest.raises(PlannerError) as err:
            bad = {**ROW, column: text}
            inputs = row_inputs(bad)
            row_target(bad, CATALOGUE["A100-80GB"])
        assert err.value.field == column, column


def test_core_columns_read_under_the_names_configs_and_people_give_them() -> None:
    """A row written with Hugging Face config names and the short names of a slide (tp, pp,
    gbs, mbs) reads as the same run as one with the planner's column names."""
    ours = {**ROW, "num_gpus": "8", "tensor_parallel": "2", "pipeline_parallel": "2",
            "micro_batch_size": "2", "num_kv_heads": "4", "ffn_hidden_size": "2816",
            "mlp": "swiglu"}  # fmt: skip
    theirs = {
        "table_id": "T", "model": "tiny", "num_hidden_layers": "8", "hidden": "1024",
        "num_heads": "16", "num_key_value_heads": "4", "intermediate_size": "2816",
        "mlp": "swiglu", "seq_length": "1024", "vocab": "32000", "gpu": "A100-SXM4-80GB",
        "gpus": "8", "tp": "2", "pp": "2", "gbs": "64", "mbs": "2",
        "achieved_tflops_per_gpu": "150",
    }  # fmt: skip
    a, b = row_inputs(ours), row_inputs(theirs)
    assert not isinstance(a, str) and not isinstance(b, str)
    assert a[0] == b[0] and a[1] == b[1] and a[2] == b[2]


@pytest.mark.parametrize("text", ["NVFP4", "fp32", "TF32"])
def test_a_precision_the_planner_does_not_model_says_so(text: str) -> None:
    with pytest.raises(PlannerError) as caught:
        row_inputs({**ROW, "precision": text})
    assert caught.value.field == "precision" and "no fp4 or fp32" in caught.value.message


@pytest.mark.parametrize(
    ("cells", "target"),
    [
        ({"tflop/s/gpu": "230"}, ("tflops_per_gpu", 230.0)),
        # a model-FLOP rate (recompute not counted) compares as an MFU does (outside review 13)
        ({"model_tflops_per_gpu": "230 TFLOP/s"}, ("mfu_tflops", 230.0)),
        ({"model_tflop/sec/gpu": "230"}, ("mfu_tflops", 230.0)),
        ({"tokens/sec/gpu": "3,200"}, ("tokens_per_sec_per_gpu", 3200.0)),
        ({"step_time_s": "1.5 s"}, ("iteration_time_s", 1.5)),
        ({"mfu": "38%"}, ("mfu_tflops", 0.38 * 312)),
        ({"mfu": "0.38"}, ("mfu_tflops", 0.38 * 312)),  # a fraction
        ({"mfu": "38"}, ("mfu_tflops", 0.38 * 312)),
        ({"tokens_per_sec": "1,000,000", "num_gpus": "256"},
         ("tokens_per_sec_per_gpu", 1e6 / 256)),  # the whole run's, over its GPUs
        ({"samples/s": "100", "seq_len": "4096", "num_gpus": "", "num_nodes": "4",
          "gpus_per_node": "8"}, ("tokens_per_sec_per_gpu", 100 * 4096 / 32)),
        ({"elapsed_time_per_iteration_(ms)": "1500"}, ("iteration_time_s", 1.5)),
    ],
)  # fmt: skip
def test_published_figures_under_the_names_tables_give_them(
    cells: dict[str, str], target: tuple[str, float]
) -> None:
    row = {**ROW, "achieved_tflops_per_gpu": "", **cells}
    got = row_target(row, CATALOGUE["A100-80GB"])
    assert got is not None and got[0] == target[0] and got[1] == pytest.approx(target[1])


@pytest.mark.parametrize(
    ("cells", "count"),
    [
        ({}, "full"),
        ({"attention_flops": "full"}, "full"),
        ({"attention_flops": "Full (whole score matrix)"}, "full"),
        ({"attention_flops": "non-causal"}, "full"),
        ({"attention_flops": "causal"}, "causal"),
        ({"attention_flops": "Causal (lower triangle)"}, "causal"),
        ({"flops_convention": "causal half"}, "causal"),
        ({"causal_flops": "yes"}, "causal"),
        ({"causal_flops": "no"}, "full"),
        ({"attention_flops": "n/a"}, "full"),
        ({"attention_flops": "none"}, "none"),
        ({"flops_convention": "6N"}, "none"),
        ({"attention_flops": "6ND (no attention)"}, "none"),
        ({"attention_flops": "not counted"}, "none"),
    ],
)
def test_how_a_table_counts_attention_flops_is_read(cells: dict[str, str], count: str) -> None:
    assert attention_flops_cell({**ROW, **cells}) == count


def test_an_unknown_attention_flop_count_names_its_column() -> None:
    with pytest.raises(PlannerError) as err:
        attention_flops_cell({**ROW, "attention_flops": "sometimes"})
    assert err.value.field == "attention_flops"
    assert all(word in err.value.message for word in ("full", "causal", "none"))


@pytest.mark.parametrize(
    ("text", "name"),
    [("DGX H100", "H100-SXM"), ("8xH100", "H100-SXM"), ("DGX-GB200", "GB200"),
     ("GB200 NVL72", "GB200"), ("NVIDIA H200 SXM", "H200"), ("A100-SXM4-40GB", "A100-40GB")],
)  # fmt: skip
def test_a_gpu_is_the_catalogue_entry_its_name_contains(text: str, name: str) -> None:
    assert gpu_name({"gpu_type": text}) == name


@pytest.mark.parametrize("text", ["H100 NVL", "NVIDIA H100 NVL 94GB"])
def test_a_gpu_whose_name_contains_another_is_not_read_as_that_one(text: str) -> None:
    # An H100 NVL (835 TFLOP/s) is no SXM H100 (989): refused, not priced 18 % fast.
    with pytest.raises(PlannerError) as err:
        gpu_name({"gpu_type": text})
    assert err.value.field == "gpu_type" and "catalogue does not hold" in err.value.message


@pytest.mark.parametrize(
    ("column", "text", "value"),
    [  # a degree under its own name in its own column
     ("tensor_parallel", "TP8", 8), ("pipeline_parallel", "pp=16", 16),
     ("expert_parallel", "EP 64", 64), ("tensor_parallel", "8-way tensor", 8),
     # a remark in parentheses after the figure (Megatron-Bridge's variant run): the row is
     # the figure outside them
     ("tokens_per_sec_per_gpu", "664 (622)", 664), ("num_gpus", "128 (16 nodes)", 128),
     ("iteration_time_s", "12.3 s (measured)", 12.3), ("tensor_parallel", "2 (4)", 2)],
)  # fmt: skip
def test_a_figure_under_its_name_or_before_a_remark_is_read(
    column: str, text: str, value: float
) -> None:
    assert number({column: text}, column) == value


@pytest.mark.parametrize(
    ("column", "text"),
    [("tensor_parallel", "PP8"),  # another degree's name
     ("tensor_parallel", "(4)"), ("num_gpus", "(4)"), ("iteration_time_s", "(4)")],  # only a remark
)  # fmt: skip
def test_another_degrees_name_or_a_remark_alone_is_no_figure(column: str, text: str) -> None:
    with pytest.raises(PlannerError) as err:
        number({column: text}, column)
    assert err.value.field == column


def test_a_skipped_row_named_by_one_heading_is_named_once() -> None:
    from trainyard.planner.evaluate import _named

    assert _named("Llama 3 (Table 4)", "Llama 3 (Table 4)") == "Llama 3 (Table 4)"
    assert _named("SC21_T1", "GPT-1.7B") == "SC21_T1 GPT-1.7B"
    assert _named("file.csv", "") == "file.csv"
