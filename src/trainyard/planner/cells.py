"""How a published table's cells are spelled: the text of a column under any of its names,
numbers with their units, yes / no, and the names a table may give a GPU, a sharding, an MLP,
a precision or an attention kernel (`trainyard.planner.rows` says what a row means).

This module owns the spellings, not the conventions: it reads one cell of one row (a mapping
of column to text) and returns the value it names, raising `PlannerError` naming the column
for a cell that names none. A longer cell ("ZeRO-1 (distributed optimizer)", "SwiGLU FFN",
"activation checkpointing: full") is read by the names it contains (`first_named`); a cell
"-", "n/a", "?" or "unknown" is unstated and reads as empty (the column's default applies).
A parallel degree whose column is empty is read from a free-text `parallelism` cell ("TP8
PP16 DP64", "2D (FSDP 8, TP 8)", "8-way tensor, 12-way pipeline"; `_PARALLEL_DEGREES`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Final, TypeVar

from trainyard.planner.errors import PlannerError
from trainyard.planner.hardware import CATALOGUE
from trainyard.planner.model import AttentionCount, Precision

__all__ = [
    "FALSE",
    "SHARDING_NAMES",
    "TRUE",
    "attention_flops_cell",
    "count",
    "first_named",
    "flag",
    "flash_cell",
    "folded",
    "fsdp_cell",
    "gpu_name",
    "integer",
    "mlp_cell",
    "number",
    "percent",
    "precision_cell",
    "row_cell",
    "sharding_cell",
]

T = TypeVar("T")
Row = Mapping[str, str | None]

TRUE: Final = ("yes", "true", "1", "y", "on", "enabled", "✓", "✔")
FALSE: Final = ("no", "false", "0", "n", "off", "disabled", "✗")
# Cells that say the table does not know: read as empty (the column's default applies).
_UNSTATED: Final = ("-", "—", "–", "n/a", "na", "?", "unknown", "not stated")

# Other names a table may give a column (Megatron-LM's argument names, Hugging Face config
# names, the short ones people write: tp, gbs), read when the column itself is empty.
_COLUMN_ALIASES: Final[dict[str, tuple[str, ...]]] = {
    "model": ("model_name", "model_size", "name"),
    "num_layers": ("num_hidden_layers", "layers", "n_layers", "n_layer"),
    "hidden_size": ("hidden", "d_model", "n_embd"),
    "num_attention_heads": ("num_heads", "heads", "n_heads", "n_head", "attention_heads"),
    "num_kv_heads": ("num_key_value_heads", "num_query_groups", "kv_heads", "n_kv_heads"),
    "ffn_hidden_size": ("intermediate_size", "ffn_dim", "d_ff"),
    "seq_len": ("seq_length", "sequence_length", "max_seq_len", "context_length"),
    "vocab_size": ("vocab", "vocabulary_size", "vocabulary", "padded_vocab_size"),
    "num_gpus": ("gpus", "world_size", "n_gpus"),
    "num_nodes": ("nodes", "n_nodes", "nnodes"),
    "gpus_per_node": ("nproc_per_node", "gpus_per_host"),
    "tensor_parallel": ("tensor_model_parallel_size", "tp", "tp_size", "tensor_mp_size",
                        "tensor_parallel_degree"),
    "pipeline_parallel": ("pipeline_model_parallel_size", "pp", "pp_size", "pipeline_mp_size",
                          "pipeline_parallel_degree"),
    "model_parallel_size": ("model_parallel", "mp", "mp_size"),
    "context_parallel": ("context_parallel_size", "cp", "cp_size", "context_parallel_degree"),
    "data_parallel": ("data_parallel_size", "dp", "dp_size"),
    "virtual_pipeline": ("virtual_pipeline_model_parallel_size", "vpp", "vp"),
    "micro_batch_size": ("micro_batch", "mbs"),
    "gradient_accumulation_steps": ("ga", "gradient_accumulation", "grad_accum",
                                    "accumulation_steps"),
    "global_batch_size": ("global_batch", "gbs", "batch_size"),
    "local_batch_size": ("batch_size_per_dp", "per_device_batch_size", "batch_size/dp",
                         "batch_size_per_gpu", "per_gpu_batch_size"),
    "global_batch_tokens": (
        "batch_size_tokens", "tokens_per_batch", "global_batch_size_tokens", "batch_tokens",
        "global_batch_size_(tokens)",
    ),
    "gpu_type": ("gpu", "accelerator", "system", "hardware", "gpu_model"),
    "precision": ("dtype", "data_type", "numerics", "mixed_precision"),
    "sharding": ("sharding_strategy", "zero_stage", "zero"),
    "activation_recompute": (
        "recompute_granularity", "activation_checkpointing", "recompute", "ac",
    ),
    "sequence_parallel": ("sp",),
    "tp_comm_overlap": ("tp_overlap",),
    "tokens_per_sec_per_gpu": (
        "tokens_per_second_per_gpu", "tokens/sec/gpu", "tokens/s/gpu", "tok/s/gpu",
        "tokens_per_gpu_per_sec", "tokens_per_gpu_per_second", "throughput_per_gpu",
        "tps/gpu", "tps_per_gpu", "tokens/sec/device", "tokens_per_sec_per_device",
        "tok/s/device",
    ),
    "achieved_tflops_per_gpu": (
        "tflops_per_gpu", "tflop/s/gpu", "tflop/s_per_gpu", "model_tflops_per_gpu",
        "model_tflop/s/gpu", "model_tflop/sec/gpu", "tflop/sec/gpu", "tflops/gpu", "tflops",
        "achieved_teraflop/s_per_gpu", "teraflop/s_per_gpu", "achieved_tflop/s_per_gpu",
    ),
    "percent_of_peak": (
        "percentage_of_theoretical_peak_flop/s", "percentage_of_peak", "percent_of_peak_flop/s",
        "%_of_peak",
    ),
    "aggregate_pflops": (
        "achieved_aggregate_petaflop/s", "aggregate_petaflop/s", "aggregate_pflop/s",
    ),
    "iteration_time_s": ("step_time_s", "iteration_time", "step_time", "iter_time_s"),
    "iteration_time_ms": (
        "step_time_ms", "iter_time_ms", "elapsed_time_per_iteration_ms",
        "elapsed_time_per_iteration_(ms)",
    ),
    "tokens_per_sec": (
        "tokens_per_second", "tokens/s", "tokens/sec", "tok/s", "throughput_tokens_per_sec",
        "global_tokens_per_sec",
    ),
    "samples_per_sec": (
        "samples_per_second", "samples/s", "sequences_per_sec", "seqs_per_sec",
        "throughput_samples_per_sec",
    ),
    "mfu_pct": ("mfu", "mfu_%", "mfu(%)"),
    "hfu_pct": ("hfu", "hfu_%", "hfu(%)"),
    "num_experts": ("num_moe_experts", "num_local_experts", "n_routed_experts"),
    "moe_topk": ("moe_router_topk", "num_experts_per_tok", "experts_per_token", "top_k"),
    "moe_ffn_hidden_size": ("moe_intermediate_size", "expert_ffn_hidden_size"),
    "moe_shared_ffn_hidden_size": (
        "moe_shared_expert_intermediate_size", "shared_expert_intermediate_size"
    ),
    "expert_parallel": ("expert_model_parallel_size", "ep", "expert_parallel_degree"),
    "fsdp": ("data_parallel_shard_degree", "dp_shard", "fsdp_size"),
    "head_dim": ("kv_channels", "qk_head_dim", "qk_nope_head_dim"),
    "window_size": ("sliding_window",),
    "rope_dim": ("qk_rope_head_dim", "qk_pos_emb_head_dim"),
    "dense_layers": ("first_k_dense_replace",),
    "cpu_offload_layers": ("cpu_offloading_num_layers", "offload_layers"),
    "parallelism": ("parallel_config", "layout", "parallelization"),
    "attention_flops": ("flops_convention", "attention_flop_count", "causal_flops"),
}  # fmt: skip


def row_cell(row: Row, field: str) -> str:
    """The text of `field` in `row` (or of one of its other names, `_COLUMN_ALIASES`),
    stripped; "" when missing, empty or unstated ("-", "n/a", "?": `_UNSTATED`)."""
    for name in (field, *_COLUMN_ALIASES.get(field, ())):
        value = row.get(name)
        if isinstance(value, str) and value.strip() and value.strip().lower() not in _UNSTATED:
            return value.strip()
    if field in _PARALLEL_DEGREES:
        return _degree_in_text(row, field)
    return ""


# A free-text parallelism cell ("TP8 PP16 DP64", "TP=4, CP=2, PP=8, VP=5", "FSDP 64",
# "8-way tensor, 12-way pipeline"): each degree's names, read when its own column is empty, as
# "<name> N", "<name>=N", "<name>N", "<name> parallel N" or "N-way <name>".
_DEGREE_NAMES: Final[dict[str, str]] = {
    "tensor_parallel": "tp|tensor",
    "pipeline_parallel": "pp|pipeline",
    "context_parallel": "cp|context",
    "data_parallel": "dp|data",
    "expert_parallel": "ep|expert",
    "virtual_pipeline": "vpp|vp|virtual",
    "fsdp": "fsdp",
}
_PARALLEL_DEGREES: Final[dict[str, re.Pattern[str]]] = {
    field: re.compile(
        rf"\b(?:{names})(?:[\s_-]*parallel(?:ism)?)?\s*[=:]?\s*(\d+)\b"
        rf"|\b(\d+)[\s-]*way[\s_-]+(?:{names})\b"
    )
    for field, names in _DEGREE_NAMES.items()
}


def _degree_in_text(row: Row, field: str) -> str:
    """The degree `field` that the row's free-text `parallelism` cell names, or ""."""
    found = _PARALLEL_DEGREES[field].search(row_cell(row, "parallelism").lower())
    return next((g for g in found.groups() if g), "") if found else ""


def folded(text: str) -> str:
    """`text` lower-cased without spaces, hyphens and underscores ("ZeRO-1" -> "zero1")."""
    return re.sub(r"[\s_\-]", "", text.lower())


def first_named(text: str, families: Sequence[tuple[Sequence[str], T]]) -> list[T]:
    """The values of the families whose words appear in `text` (folded), in the families'
    order (most specific first), each once."""
    found: list[T] = []
    for words, value in families:
        if value not in found and any(w in text for w in words):
            found.append(value)
    return found


# Units a cell may repeat after its number, by column (folded: lower case, no spaces), and
# the columns whose counts a table may write in K (1,024: "8K" context, "16K GPUs").
_UNITS: Final[dict[str, tuple[str, ...]]] = {
    "iteration_time_s": ("s", "sec", "secs", "seconds", "s/iter", "s/it"),
    "iteration_time_ms": ("ms", "msec"),
    "tokens_per_sec_per_gpu": ("tok/s", "tokens/s", "tokens/sec", "tok/s/gpu", "tokens/s/gpu",
                               "tokens/sec/gpu", "tps"),
    "achieved_tflops_per_gpu": ("tflop/s", "tflops", "tflop/s/gpu", "tflops/gpu"),
    "tokens_per_sec": ("tok/s", "tokens/s", "tokens/sec", "tps"),
    "samples_per_sec": ("samples/s", "seq/s", "sequences/s", "samples/sec"),
    "gpu_peak_tflops": ("tflop/s", "tflops"),
    "network_gbps_per_gpu": ("gb/s", "gbps", "gbit/s", "gb/s/gpu", "gbps/gpu"),
    "hfu_pct": ("%",),
    "mfu_pct": ("%",),
    "percent_of_peak": ("%",),
    "aggregate_pflops": ("pflop/s", "pflops"),
    "num_gpus": ("gpu", "gpus"),
}  # fmt: skip
# A time column given in the other unit: its factor ("12,300 ms" in iteration_time_s).
_TIME_UNITS: Final[dict[str, dict[str, float]]] = {
    "iteration_time_s": {"ms": 1e-3, "msec": 1e-3, "min": 60.0, "mins": 60.0},
    "iteration_time_ms": {"s": 1e3, "sec": 1e3, "seconds": 1e3},
}
_KILO_COLUMNS: Final = ("seq_len", "num_gpus")
_NUMBER: Final = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?)(.*)", re.IGNORECASE)
# GPUs as nodes x GPUs per node: "8x8", "32 x 8", "16 × 8 GPUs".
_NODES_TIMES_GPUS: Final = re.compile(r"(\d+)\s*[x×*]\s*(\d+)(?:\s*gpus?)?", re.IGNORECASE)


# A figure with a remark in parentheses after it: "664 (622)" (Megatron-Bridge's variant run),
# "128 (16 nodes)". The row is the figure outside them.
_REMARK: Final = re.compile(r"(.*?\S)\s*\([^()]*\)")


def number(row: Row, field: str) -> float | None:
    text = row_cell(row, field).replace(",", "")
    if not text:
        return None
    remark = _REMARK.fullmatch(text)
    if remark:
        text = remark.group(1)
    found = _NUMBER.fullmatch(text)
    rest = folded(found.group(2)) if found else ""
    if found and not rest:
        return float(found.group(1))
    if found and rest in _UNITS.get(field, ()):
        return float(found.group(1))
    if found and rest in _TIME_UNITS.get(field, {}):
        return float(found.group(1)) * _TIME_UNITS[field][rest]
    if found and rest == "k" and field in _KILO_COLUMNS:
        return float(found.group(1)) * 1024
    product = _NODES_TIMES_GPUS.fullmatch(text) if field == "num_gpus" else None
    if product:
        return float(int(product.group(1)) * int(product.group(2)))
    # a degree under its own name in its own column: "TP8", "tp=8", "8-way tensor"
    named = _PARALLEL_DEGREES[field].fullmatch(text.lower()) if field in _PARALLEL_DEGREES else None
    if named:
        return float(next(g for g in named.groups() if g))
    raise PlannerError(field, f"must be a number, got {text!r}")


def percent(row: Row, field: str) -> float | None:
    """A percentage cell ("38", "38 %"); a bare number of at most 1 is read as a fraction
    ("0.38": 38 %), since no published run reaches only 1 % of its peak."""
    value = number(row, field)
    if value is not None and 0 < value <= 1 and "%" not in row_cell(row, field):
        return value * 100
    return value


def integer(row: Row, field: str) -> int | None:
    value = number(row, field)
    if value is None:
        return None
    if value != int(value):
        raise PlannerError(field, f"must be a whole number, got {row_cell(row, field)!r}")
    return int(value)


def count(row: Row, field: str) -> int | None:
    """A count cell (GPUs, a parallel degree, a batch): None when empty, else >= 1."""
    value = integer(row, field)
    if value is not None and value < 1:
        raise PlannerError(field, f"must be a whole number >= 1, got {row_cell(row, field)!r}")
    return value


def flag(row: Row, field: str) -> bool | None:
    text = row_cell(row, field).lower()
    if not text:
        return None
    if text in TRUE:
        return True
    if text in FALSE:
        return False
    raise PlannerError(field, f"must be yes or no, got {row_cell(row, field)!r}")


# What a `flash_attention` cell may name instead of yes / no: a fused attention kernel
# (FlashAttention 1-3, cuDNN's or Transformer Engine's fused attention, PyTorch's SDPA,
# xFormers' memory-efficient attention), or the unfused one that stores the scores.
_FUSED_ATTENTION: Final = ("flash", "fa1", "fa2", "fa3", "cudnn", "fused", "sdpa", "xformers",
                           "memeff", "memoryefficient", "te")  # fmt: skip
_UNFUSED_ATTENTION: Final = ("eager", "math", "unfused", "naive", "standard", "none")


def flash_cell(row: Row) -> bool | None:
    """The `flash_attention` cell: yes / no, or the kernel it names ("FlashAttention-2",
    "cuDNN fused", "SDPA": fused; "eager": the scores are stored)."""
    text = row_cell(row, "flash_attention").lower()
    if not text or text in TRUE or text in FALSE:
        return flag(row, "flash_attention")
    name = folded(text)
    if name.startswith(_UNFUSED_ATTENTION):
        return False
    if any(kernel in name for kernel in _FUSED_ATTENTION):
        return True
    raise PlannerError(
        "flash_attention",
        f"must be yes or no (or the kernel: flash, cudnn, sdpa, eager), got {text!r}",
    )


# How a table counted the attention core in its FLOP figures: the whole score matrix (SC'21,
# the Megatron-LM README tables), its causal lower triangle (Megatron-LM's logged TFLOP/s
# since 8873b55d6a, 2025-03-06), or not at all (an MFU of 6 x parameters x tokens); under its
# `causal_flops` name the cell may hold yes / no.
_FULL_COUNT: Final = ("full", "whole", "square", "noncausal")
_NO_COUNT: Final = ("none", "6n", "6nd", "excluded", "notcounted", "noattention", "without")
_CAUSAL_COUNT: Final = ("causal", "half", "triangle", "masked")


def attention_flops_cell(row: Row) -> AttentionCount:
    """How the row's FLOP figures count the attention core (the `attention_flops` cell):
    "full" (also when unstated), "causal" or "none"."""
    text = row_cell(row, "attention_flops")
    name = folded(text)
    if not name or text.lower() in FALSE:
        return "full"
    if text.lower() in TRUE:
        return "causal"
    if name.startswith(_FULL_COUNT):
        return "full"
    if name.startswith(_NO_COUNT):
        return "none"
    if any(word in name for word in _CAUSAL_COUNT):
        return "causal"
    raise PlannerError(
        "attention_flops",
        f"must be full (the whole score matrix, SC'21's count), causal (its lower half, "
        f"Megatron-LM's count since 2025) or none (6 x parameters x tokens), got {text!r}",
    )


# Substrings of `gpu_type`, most specific first, and the catalogue entry each means.
_GPU_NAMES: Final[tuple[tuple[str, str], ...]] = (
    ("H100-PCIE", "H100-PCIe"),
    ("H100 PCIE", "H100-PCIe"),
    ("H100", "H100-SXM"),
    ("H800", "H800"),
    ("A800", "A800-80GB"),
    ("H200", "H200"),
    ("GB200", "GB200"),
    ("B200", "B200"),
    ("GB300", "GB300"),
    ("B300", "B300"),
    ("A100-SXM4-40GB", "A100-40GB"),
    ("A100 40GB", "A100-40GB"),
    ("A100-40GB", "A100-40GB"),
    ("A100", "A100-80GB"),
    ("V100", "V100-32GB"),
    ("L40S", "L40S"),
)


# GPUs whose name contains a catalogue entry's but that differ from it in what the time model
# prices: refused rather than read as that one. (GH200's Hopper GPU is read as the H200, whose
# peaks and bandwidth it shares within 20 %.)
_NOT_IN_CATALOGUE: Final = (
    ("H100 NVL", "a PCIe card pair (94 GB, 835 TFLOP/s bf16), not the SXM part"),
)


def gpu_name(row: Row) -> str:
    """The catalogue name of the row's `gpu_type` (the first known name it contains; an A100
    that says 40GB anywhere is the 40 GB one). A GPU the catalogue does not hold, or one whose
    name contains another's (`_NOT_IN_CATALOGUE`), is an error naming the ones it holds."""
    text = row_cell(row, "gpu_type").upper()
    if not text:
        raise PlannerError("gpu_type", f"no GPU named; give the run's: {', '.join(CATALOGUE)}")
    for key, what in _NOT_IN_CATALOGUE:
        if key in text:
            raise PlannerError(
                "gpu_type",
                f"{row_cell(row, 'gpu_type')!r} is {what}, which the catalogue does not hold; "
                f"name one of {', '.join(CATALOGUE)}",
            )
    name = next((entry for key, entry in _GPU_NAMES if key in text), None)
    if name == "A100-80GB" and re.search(r"\b40\s?GB\b", text):
        name = "A100-40GB"  # "A100 PCIe 40GB", "A100 (40 GB)"
    if name is None:
        raise PlannerError(
            "gpu_type",
            f"unknown GPU {row_cell(row, 'gpu_type')!r}; name one of {', '.join(CATALOGUE)}",
        )
    return name


# `sharding` cell -> (ZeRO stage, hybrid).
SHARDING_NAMES: Final[dict[str, tuple[int, bool]]] = {
    "none": (0, False),
    "ddp": (0, False),
    "zero0": (0, False),
    "zero1": (1, False),
    "distributed_optimizer": (1, False),
    "zero2": (2, False),
    "zero3": (3, False),
    "fsdp": (3, False),
    "hsdp": (3, True),
}
_SHARDING_FOLDED: Final = {folded(name): name for name in SHARDING_NAMES}
# Words that name a sharding (ZeRO's stages, PyTorch FSDP's strategies, FSDP2, Megatron's
# distributed optimizer), most specific first: the first family a cell names decides.
_SHARDING_WORDS: Final[tuple[tuple[tuple[str, ...], str], ...]] = (
    (("hsdp", "hybridshard"), "hsdp"),
    (("fsdp", "fullshard"), "fsdp"),
    (("zero3", "zerostage3"), "zero3"),
    (("zero2", "zerostage2", "shardgradop"), "zero2"),
    (("zero1", "zerostage1", "distributedoptimizer", "distopt"), "zero1"),
    (("zero0", "ddp", "noshard"), "none"),
)


def sharding_cell(row: Row) -> tuple[int, bool] | None:
    """(ZeRO stage, hybrid) the `sharding` cell names; None when it is empty. A bare "ZeRO"
    is stage 1."""
    cell = folded(row_cell(row, "sharding"))
    if not cell:
        return None
    if cell in ("0", "1", "2", "3"):  # a ZeRO stage column's number
        return int(cell), False
    name = _SHARDING_FOLDED.get("zero1" if cell == "zero" else cell)
    named = [name] if name else first_named(cell, _SHARDING_WORDS)
    if not named:
        raise PlannerError(
            "sharding",
            f"unknown sharding {row_cell(row, 'sharding')!r}; use one of "
            f"{', '.join(SHARDING_NAMES)}",
        )
    return SHARDING_NAMES[named[0]]


def fsdp_cell(row: Row) -> int | None:
    """An `fsdp` column, as Megatron-Bridge's performance tables have: the ranks the states
    are sharded over (a number; 1 or yes: all the data-parallel ranks, returned as 0), or None
    when no, 0 or empty."""
    text = row_cell(row, "fsdp").lower()
    if not text or text in FALSE:
        return None
    if text in TRUE or text == "-1":  # torchtitan's data_parallel_shard_degree -1: the rest
        return 0
    size = count(row, "fsdp")
    return None if size is None else (0 if size == 1 else size)


# Words that name an MLP (`Model.mlp`), most specific first: a gated GELU before GELU, the
# squared ReLUs before ReLU.
_MLP_WORDS: Final[tuple[tuple[tuple[str, ...], str], ...]] = (
    (("swiglu", "gatedsilu", "silu", "swish"), "swiglu"),
    (("geglu", "gatedgelu"), "geglu"),
    (("squaredrelu", "sqrelu", "relu2", "relu²"), "squared_relu"),
    (("gelu",), "gelu"),
    (("relu",), "relu"),
)


def mlp_cell(row: Row) -> str:
    """The MLP the `mlp` cell names ("" when empty): the first of `_MLP_WORDS` it contains,
    else the cell as written (for `Model` to refuse, naming the ones it knows)."""
    cell = row_cell(row, "mlp")
    named = first_named(folded(cell), _MLP_WORDS)
    return named[0] if named else cell.lower()


# Other spellings of the precisions: PyTorch's dtype names, and Transformer Engine's fp8
# formats and scaling recipes (Megatron-LM's --fp8-format / --fp8-recipe values).
_PRECISION_WORDS: Final[tuple[tuple[str, Precision], ...]] = (
    ("float16", "fp16"), ("half", "fp16"), ("float8", "fp8"), ("e4m3", "fp8"),
    ("e5m2", "fp8"), ("tensorwise", "fp8"), ("delayed", "fp8"),
)  # fmt: skip


def precision_cell(row: Row) -> Precision:
    """bf16, fp16 or fp8: the one of them the cell names ("bf16-mixed", "FP8 (hybrid)",
    "bfloat16", "MXFP8", "e4m3"); fp4 and fp32 training are not modelled (an error saying so)."""
    cell = row_cell(row, "precision").lower().replace("bfloat16", "bf16") or "bf16"
    names: tuple[Precision, ...] = ("bf16", "fp16", "fp8")
    named = [name for name in names if name in cell]
    if not named:
        named = sorted({name for word, name in _PRECISION_WORDS if word in cell})
    if len(named) == 1:
        return named[0]
    if "fp8" in named:  # fp8 training keeps 16-bit weights and attention: the cell says both
        return "fp8"
    other = any(word in cell for word in ("fp4", "fp32", "tf32", "float32"))
    unmodelled = "; the planner models no fp4 or fp32 training" if other else ""
    raise PlannerError("precision", f"must be bf16, fp16 or fp8, got {cell!r}{unmodelled}")
