"""How a published table's cells are spelled: the text of a column under any of its names,
numbers with their units, yes / no (the names a table may give a GPU, a sharding, an MLP, a
precision or an attention kernel are `trainyard.planner.cell_names`; `trainyard.planner.rows`
says what a row means).

This module owns the spellings, not the conventions: it reads one cell of one row (a mapping
of column to text) and returns the value it names, raising `PlannerError` naming the column
for a cell that names none. A longer cell ("ZeRO-1 (distributed optimizer)", "SwiGLU FFN",
"activation checkpointing: full") is read by the names it contains (`first_named`); a cell
"-", "n/a", "?" or "unknown" is unstated and reads as empty (the column's default applies).
A header cell's own spelling ("Num GPUs", "MicroBatchSize", "Seq. Len.") is read as the column
it names by `column_name`.
A parallel degree whose column is empty is read from a free-text `parallelism` cell ("TP8
PP16 DP64", "2D (FSDP 8, TP 8)", "8-way tensor, 12-way pipeline"; `_PARALLEL_DEGREES`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Final, TypeVar

from trainyard.planner.errors import PlannerError

__all__ = [
    "FALSE",
    "TRUE",
    "column_name",
    "count",
    "decimal_comma",
    "first_named",
    "flag",
    "folded",
    "integer",
    "number",
    "other_names",
    "percent",
    "row_cell",
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
    "seq_len": ("seq_length", "sequence_length", "max_seq_len", "context_length",
                "seq_len_(t)", "seq_len_(tokens)", "sequence_length_(tokens)",
                "packed_sequence_length"),
    "vocab_size": ("vocab", "vocabulary_size", "vocabulary", "padded_vocab_size"),
    "num_gpus": ("gpus", "world_size", "n_gpus"),
    "num_nodes": ("nodes", "n_nodes", "nnodes"),
    "gpus_per_node": ("nproc_per_node", "gpus_per_host"),
    "tensor_parallel": ("tensor_model_parallel_size", "tp", "tp_size", "tensor_mp_size",
                        "tensor_parallel_degree", "tensor_parallel_size"),
    "pipeline_parallel": ("pipeline_model_parallel_size", "pp", "pp_size", "pipeline_mp_size",
                          "pipeline_parallel_degree", "pipeline_parallel_size"),
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
        "global_batch_size_(tokens)", "global_batch_size_(t)",
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
        "tok/s/device", "throughput_(t/s/gpu)", "throughput_(tokens/s/gpu)",
        "throughput_(tokens/sec/gpu)",
    ),
    "achieved_tflops_per_gpu": (
        "tflops_per_gpu", "tflop/s/gpu", "tflop/s_per_gpu", "tflop/sec/gpu", "tflops/gpu",
        "tflops", "achieved_teraflop/s_per_gpu", "teraflop/s_per_gpu", "achieved_tflop/s_per_gpu",
    ),
    # a model-FLOP rate (recompute not counted: Megatron-LM's logged TFLOP/s, NeMo's and
    # Megatron-Bridge's "Model TFLOP/sec/GPU"), compared as an MFU is (outside review 13)
    "model_tflops_per_gpu": (
        "model_tflop/s/gpu", "model_tflop/sec/gpu", "model_tflops/gpu", "model_tflops",
        "model_tflop/s", "model_tflop/s_per_gpu", "model_flops_per_gpu",
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
        "global_tokens_per_sec", "throughput_(t/s)", "throughput_(tokens/s)",
    ),
    "samples_per_sec": (
        "samples_per_second", "samples/s", "sequences_per_sec", "seqs_per_sec",
        "throughput_samples_per_sec", "throughput_(s/s)", "throughput_(samples/s)",
    ),
    "mfu_pct": ("mfu", "mfu_%", "mfu(%)", "bf16_mfu", "fp8_mfu", "model_flops_utilization"),
    "hfu_pct": ("hfu", "hfu_%", "hfu(%)", "bf16_hfu", "hardware_flops_utilization"),
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
    "training": ("task", "training_type", "finetuning_method", "method"),
}  # fmt: skip


def other_names(field: str) -> tuple[str, ...]:
    """The other names a table may give `field`'s column (`_COLUMN_ALIASES`)."""
    return _COLUMN_ALIASES.get(field, ())


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
    "model_tflops_per_gpu": ("tflop/s", "tflops", "tflop/s/gpu", "tflops/gpu"),
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


# A number written with a decimal comma, as a semicolon-separated export of a European locale
# writes it: "0,57", "34,3 %", "1.234,5 s" (dots then group thousands).
_DECIMAL_COMMA: Final = re.compile(r"\s*([-+]?)(\d{1,3}(?:\.\d{3})+|\d+),(\d+)(\s*[^\d,.;]*)\s*")


def decimal_comma(text: str | None) -> str | None:
    """A cell of a semicolon-separated file with its decimal comma as a point ("0,57" is
    0.57, "1.234,5" 1234.5): a spreadsheet writes ';' between cells where ',' is the decimal
    mark, so there a comma in a number is one (outside review 13: "0,57" s was read as 57 s)."""
    if text is None:
        return None
    found = _DECIMAL_COMMA.fullmatch(text)
    if found is None:
        return text
    sign, whole, fraction, unit = found.groups()
    return f"{sign}{whole.replace('.', '')}.{fraction}{unit}"


def column_name(name: str) -> str:
    """A header cell as the column name it means: words written together in CamelCase apart
    ("MicroBatchSize" is micro_batch_size, "NumKVHeads" num_kv_heads; not "MoE" or "TopK",
    whose parts would be single letters), lower case, spaces and hyphens as '_', no spaces
    around a '/' ("Tokens / sec / GPU" is tokens/sec/gpu), a leading '#' or 'number of' as
    num ("#-GPUs", "# of GPUs" are num_gpus), and no abbreviation's full stop ("Seq. Len." is
    seq_len, as the Llama 3 paper prints it)."""
    name = re.sub(r"(?<=[A-Za-z])\.(?=\s|$)", "", name)
    text = " ".join(_camel_apart(word) for word in name.split())
    text = re.sub(r"\s*/\s*", "/", text.strip().lower().replace("-", " ").replace("_", " "))
    text = re.sub(r"^(#|number\b)\s*(of\b)?", "num ", text)
    return "_".join(text.split())


# Where a CamelCase word's parts meet: a lower-case letter before a capital ("SeqLen"), or
# an upper-case run before a capitalised word ("KVHeads"; not a plural "s": "GPUs"). A word
# with a unit's prefix as a part ("petaFLOPs") stays whole.
_CAMEL: Final = re.compile(r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z](?!s(?![a-z]))[a-z])")
_UNIT_PREFIXES: Final = ("kilo", "mega", "giga", "tera", "peta", "exa")


def _camel_apart(word: str) -> str:
    """`word` with its CamelCase parts apart ("GlobalBatchSize" is "Global Batch Size"), or as
    it is when it is not all letters ("teraFLOP/s"), a part would be one letter (an
    abbreviation such as "MoE" or "TopK") or a unit's prefix ("petaFLOPs")."""
    if not word.isalpha():
        return word
    parts = _CAMEL.split(word)
    if any(len(part) == 1 or part.lower() in _UNIT_PREFIXES for part in parts):
        return word
    return " ".join(parts)
