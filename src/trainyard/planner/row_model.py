"""The `Model` a row of a published table describes: from its shape columns, or, when it leaves
them out, from the preset its `model` cell names.

This module owns how a row's model columns become a `Model` (`row_model`); the other columns
and the conventions for reading them are `trainyard.planner.rows`', the spellings of the cells
`trainyard.planner.cells`'. Pure: it reads the cells of one row.

Shape columns: num_layers, hidden_size, num_attention_heads and vocab_size (with the optional
ones `rows` lists: num_kv_heads, ffn_hidden_size, mlp, experts, ...). A row that leaves any of
the four out but names a model the planner knows (`presets.preset_named`: "Llama 3.1 405B",
"GPT-3 175B", "Mixtral 8x7B", "Qwen3 235B-A22B") takes that preset's shape, with every shape
column it does give in its place. A row that gives the layers, hidden size and vocabulary but
not the heads, and names no known model (the Megatron-LM README's tables of April 2021 print
no heads), is read with heads of width 128 (`ASSUMED_HEAD_DIM`; 64 where the hidden size is
not a multiple of 128), as GPT-3 from 6.7B up (Brown et al. arXiv:2005.14165 Table 2.1), the
SC'21 models from 7.5B to 310B and Llama 2 and 3 have them; `heads_assumed` says so, and
evaluation labels the row. The FLOPs do not depend on the split into heads; an unfused
attention's score matrices (memory and the bytes its softmax moves) and the tensor-parallel
split's divisibility do. seq_len and global_batch_size are the run's own and always
come from the row (the batch may be given in tokens, `global_batch_tokens`, or per
data-parallel rank, `local_batch_size`): a row without them is not expressible.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from trainyard.planner.cell_names import mlp_cell, precision_cell
from trainyard.planner.cells import count, flag, integer, row_cell
from trainyard.planner.errors import PlannerError
from trainyard.planner.model import MLPS, Model
from trainyard.planner.presets import model_from_mapping, preset_named
from trainyard.planner.row_split import stated_data_parallel, stated_gpu_count

__all__ = ["ASSUMED_HEAD_DIM", "SHAPE_COLUMNS", "heads_assumed", "row_model"]

# The columns without which a row needs a named preset for its model's shape.
SHAPE_COLUMNS: Final = ("num_layers", "hidden_size", "num_attention_heads", "vocab_size")
# The head width read for a row that states no heads (see the module docstring).
ASSUMED_HEAD_DIM: Final = 128
# Shape columns a row may state over a preset's, and the `Model` field each sets.
_OVERRIDES: Final = {
    "num_layers": "layers", "hidden_size": "hidden", "num_attention_heads": "heads",
    "vocab_size": "vocab", "num_kv_heads": "kv_heads", "ffn_hidden_size": "ffn_hidden",
    "head_dim": "head_dim",
}  # fmt: skip


def row_model(row: Mapping[str, str | None]) -> Model | str:
    """The row's `Model`, or why it has none ("no seq_len", ...). Raises `PlannerError` naming
    the column for a cell that is not of its column's form."""
    values: dict[str, int] = {}
    in_tokens = _TOKEN_UNIT.search(row_cell(row, "global_batch_size"))
    for field in (*SHAPE_COLUMNS, "seq_len", *(() if in_tokens else ("global_batch_size",))):
        value = count(row, field)
        if value is not None:
            values[field] = value
    if "global_batch_size" not in values and "seq_len" in values:
        field = "global_batch_size" if in_tokens else "global_batch_tokens"
        batch = _batch_from_tokens(row, values["seq_len"], field) or _batch_from_local(row)
        if batch is not None:
            values["global_batch_size"] = batch
    for field in ("seq_len", "global_batch_size"):
        if field not in values:
            return f"no {field}"
    missing = [field for field in SHAPE_COLUMNS if field not in values]
    named = preset_named(row_cell(row, "model")) if missing else None
    if named is not None:
        return _from_preset(row, named, values)
    if missing == ["num_attention_heads"] and (heads := _assumed_heads(values)):
        values["num_attention_heads"] = heads
    elif missing:
        return f"no {missing[0]}, and the model is not one the planner knows by name"
    return _from_columns(row, values)


def _assumed_heads(values: Mapping[str, int]) -> int:
    """Heads of width `ASSUMED_HEAD_DIM` (else 64) over the row's hidden size; 0 when neither
    divides it."""
    hidden = values["hidden_size"]
    for width in (ASSUMED_HEAD_DIM, 64):
        if hidden % width == 0:
            return hidden // width
    return 0


def heads_assumed(row: Mapping[str, str | None]) -> bool:
    """Whether `row_model` reads this row with heads it assumed (it states none and names no
    model the planner knows)."""
    return (
        count(row, "num_attention_heads") is None
        and all(count(row, field) is not None for field in SHAPE_COLUMNS[:2] + SHAPE_COLUMNS[3:])
        and preset_named(row_cell(row, "model")) is None
    )


_TOKENS: Final = re.compile(r"(\d+(?:\.\d+)?)\s*([km]?)\s*(?:tokens?|tok)?", re.IGNORECASE)
_TOKEN_UNIT: Final = re.compile(r"\btok(en)?s?\b|\d\s*[km]?\s*tok", re.IGNORECASE)


def _batch_from_tokens(
    row: Mapping[str, str | None], seq_len: int, field: str = "global_batch_tokens"
) -> int | None:
    """Sequences per batch from a batch given in tokens (`global_batch_tokens`, or a
    `global_batch_size` cell that says tokens: "16M", "4M tokens", "2,097,152"; K and M of
    1,024 and 1,048,576, as Meta's "16M tokens" of 8K sequences are 2,048 of them), or None
    when the row gives none."""
    text = row_cell(row, field).replace(",", "")
    if not text:
        return None
    found = _TOKENS.fullmatch(text)
    if not found:
        raise PlannerError(field, f"must be a token count, got {text!r}")
    scale = {"": 1, "k": 1024, "m": 1024 * 1024}[found.group(2).lower()]
    tokens = float(found.group(1)) * scale
    sequences = tokens / seq_len
    if sequences < 1 or abs(sequences - round(sequences)) > 1e-6 * sequences:
        raise PlannerError(
            field,
            f"{text!r} is not a whole number of {seq_len}-token sequences; give "
            "global_batch_size instead",
        )
    return round(sequences)


def _batch_from_local(row: Mapping[str, str | None]) -> int | None:
    """Sequences per batch from a batch per data-parallel rank (`local_batch_size`, as
    torchtitan states it) times the data-parallel degree: stated, an `fsdp` size, or the GPUs
    over tp x cp x pp when the row gives all three; None when it gives no such batch."""
    local = count(row, "local_batch_size")
    if local is None:
        return None
    dp = stated_data_parallel(row)
    gpus, cp = stated_gpu_count(row), count(row, "context_parallel") or 1
    tp, pp = count(row, "tensor_parallel"), count(row, "pipeline_parallel")
    if dp is None and gpus and tp and pp:
        dp = gpus // (tp * pp * cp) or None
    if dp is None and gpus and not (tp or pp):
        dp = gpus // cp  # no model parallelism stated
    return local * dp if dp else None


def _from_preset(row: Mapping[str, str | None], base: Model, values: dict[str, int]) -> Model:
    """`base` with the row's own fields, through `presets.model_from_mapping` (which also
    re-derives the fields a changed shape implies: key/value heads, head width, MLP width)."""
    changes: dict[str, Any] = {
        "preset": base.name,
        "name": row_cell(row, "model"),
        "seq_len": values["seq_len"],
        "global_batch": values["global_batch_size"],
        "precision": precision_cell(row),
    }
    for column, field in _OVERRIDES.items():
        value = count(row, column)
        if value is not None:
            changes[field] = value
    return model_from_mapping(changes)


def _from_columns(row: Mapping[str, str | None], values: dict[str, int]) -> Model:
    mlp = mlp_cell(row)
    if mlp and mlp not in MLPS:
        raise PlannerError("mlp", f"unknown MLP {mlp!r}; use one of {', '.join(MLPS)}")
    tied = flag(row, "tied_embeddings")
    experts = _experts(row)
    return Model(
        row_cell(row, "model") or "row",
        values["num_layers"],
        values["hidden_size"],
        values["num_attention_heads"],
        values["seq_len"],
        values["vocab_size"],
        values["global_batch_size"],
        kv_heads=integer(row, "num_kv_heads") or 0,
        ffn_hidden=integer(row, "ffn_hidden_size") or 0,
        precision=precision_cell(row),
        mlp=mlp,
        bias=mlp not in ("swiglu", "geglu") if mlp else True,
        tied_embeddings=True if tied is None else tied,
        learned_positions=mlp not in ("swiglu", "geglu") if mlp else True,
        vocab_multiple=integer(row, "vocab_multiple") or 128,
        head_dim=count(row, "head_dim") or 0,
        window=count(row, "window_size") or 0,
        full_attention_every=count(row, "full_attention_every") or 0,
        kv_lora_rank=count(row, "kv_lora_rank") or 0,
        q_lora_rank=count(row, "q_lora_rank") or 0,
        rope_dim=count(row, "rope_dim") or 0,
        v_head_dim=count(row, "v_head_dim") or 0,
        dense_layers=count(row, "dense_layers") or 0,
        experts=experts[0],
        moe_topk=experts[1],
        moe_ffn_hidden=experts[2],
        moe_shared_ffn_hidden=experts[3],
    )


def _experts(row: Mapping[str, str | None]) -> tuple[int, int, int, int]:
    """(experts, top-k, expert hidden, shared hidden) of a mixture of experts from the row;
    zeros when num_experts <= 1 (a dense model)."""
    experts = integer(row, "num_experts") or 0
    if experts < 0:
        raise PlannerError("num_experts", f"must be a whole number >= 0, got {experts}")
    if experts <= 1:
        return 0, 0, 0, 0
    cells = ("moe_topk", "moe_ffn_hidden_size", "moe_shared_ffn_hidden_size")
    topk, f_e, shared = (count(row, cell) or 0 for cell in cells)
    return experts, topk, f_e, shared
