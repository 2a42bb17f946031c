"""A file of published runs as rows, and the columns of it the planner does not read.

This module owns how `plan --evaluate` reads a file before any row is interpreted
(`file_rows`): CSV text as a spreadsheet exports it (a byte-order mark dropped; comma, tab or
semicolon separated, the header's separator; with a semicolon a comma in a number is its
decimal mark, `cells.decimal_comma`), a Markdown page's pipe tables (`markdown_tables`), or
why a file has no row to read (a spreadsheet's own format, not UTF-8, nothing after the
header). Column names are matched as `cells.column_name` writes them.

It also owns `READ_COLUMNS`, every column a row may give the planner under its own name (its
other names are `cells.other_names`), and `columns_not_read`: a file's columns that are
neither, so a misspelt `tensor_paralel` or a setting the planner does not model
(`torch_compile`, `zero_bubble`) is named rather than silently dropped (outside review 13).
The tests keep `READ_COLUMNS` equal to what the row readers ask for.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final

from trainyard.planner.cells import column_name, decimal_comma, other_names
from trainyard.planner.markdown_tables import is_markdown, markdown_rows

__all__ = ["READ_COLUMNS", "columns_not_read", "file_rows"]

READ_COLUMNS: Final = frozenset({
    "achieved_tflops_per_gpu", "activation_recompute", "aggregate_pflops", "attention_flops",
    "context_parallel", "cpu_offload_layers", "data_parallel", "date", "dense_layers",
    "expert_parallel", "ffn_hidden_size", "first_stage_layers", "flash_attention", "fsdp",
    "full_attention_every", "global_batch_size", "gpu_peak_tflops", "gpu_type", "gpus_per_node",
    "gradient_accumulation_steps", "head_dim", "hfu_pct", "hidden_size", "iteration_time_ms",
    "iteration_time_s", "kv_lora_rank", "last_stage_layers", "local_batch_size", "mfu_pct",
    "micro_batch_size", "mlp", "model", "model_parallel_size", "model_tflops_per_gpu",
    "moe_ffn_hidden_size", "moe_shared_ffn_hidden_size", "moe_topk", "network_gbps_per_gpu",
    "notes", "num_attention_heads", "num_experts", "num_gpus", "num_kv_heads", "num_layers",
    "num_nodes", "parallelism", "params_billion", "percent_of_peak", "pipeline_parallel",
    "precision", "q_lora_rank", "rope_dim", "samples_per_sec", "scatter_gather", "seq_len",
    "sequence_parallel", "shard_group", "sharding", "source", "split", "table_id",
    "tensor_parallel", "tied_embeddings", "tokens_per_sec", "tokens_per_sec_per_gpu",
    "tp_comm_overlap", "training", "v_head_dim", "virtual_pipeline", "vocab_multiple",
    "vocab_size", "window_size", "year",
})  # fmt: skip
_KNOWN: Final = READ_COLUMNS | {alias for field in READ_COLUMNS for alias in other_names(field)}

_SPREADSHEETS: Final = (".xlsx", ".xls", ".ods", ".numbers")
_AS_CSV: Final = (
    "export it as CSV (UTF-8; comma, tab or semicolon separated) or Markdown tables and pass that"
)


def file_rows(path: Path) -> list[dict[str, str | None]] | str:
    """The file's rows, or why it has none to read: a spreadsheet's own format, not UTF-8
    text, or no line after the header."""
    if path.suffix.lower() in _SPREADSHEETS:
        return f"a spreadsheet file: {_AS_CSV}"
    try:
        rows = list(_rows(path))
    except UnicodeDecodeError:
        return f"not UTF-8 text: {_AS_CSV}"
    return rows or (
        "no rows: a header line, then one line per published run (or Markdown pipe tables)"
    )


def _rows(path: Path) -> Iterable[dict[str, str | None]]:
    """The file's rows by column name (module docstring). A Markdown page's pipe tables read
    the same way, the headings above a table giving its model and table id."""
    text = path.read_text(encoding="utf-8-sig")
    if is_markdown(path.name, text):
        yield from markdown_rows(text, column_name)
        return
    lines = text.splitlines(keepends=True)
    header = lines[0] if lines else ""
    counts = {sep: header.count(sep) for sep in (",", "\t", ";")}
    sep = max(counts, key=lambda k: counts[k]) if any(counts.values()) else ","
    cell = decimal_comma if sep == ";" else (lambda text: text)
    for raw in csv.DictReader(lines, delimiter=sep):
        yield {column_name(k): cell(v) for k, v in raw.items() if k is not None}


def columns_not_read(rows: Sequence[dict[str, str | None]]) -> list[str]:
    """The columns of `rows` (in the order first met) that hold a value in some row and that
    the planner reads under no name (a page's own keys, `_line`, aside)."""
    seen: dict[str, None] = {}
    for row in rows:
        for name, value in row.items():
            if name not in _KNOWN and not name.startswith("_") and (value or "").strip():
                seen.setdefault(name)
    return list(seen)
