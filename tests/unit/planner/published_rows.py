"""A minimal published-run row (the planner's CSV columns as text) that the planner tests vary
cell by cell, and `write`, which puts rows in a CSV of the shared file's columns."""

from __future__ import annotations

import csv
from pathlib import Path

ROW = {
    "table_id": "T",
    "model": "tiny",
    "num_layers": "8",
    "hidden_size": "1024",
    "num_attention_heads": "16",
    "seq_len": "1024",
    "vocab_size": "32000",
    "gpu_type": "A100-SXM4-80GB",
    "num_gpus": "1",
    "tensor_parallel": "1",
    "pipeline_parallel": "1",
    "global_batch_size": "64",
    "achieved_tflops_per_gpu": "150",
}

FIELDS = [
    "table_id",
    "model",
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "seq_len",
    "vocab_size",
    "gpu_type",
    "gpu_peak_tflops",
    "num_gpus",
    "tensor_parallel",
    "pipeline_parallel",
    "data_parallel",
    "global_batch_size",
    "micro_batch_size",
    "activation_recompute",
    "achieved_tflops_per_gpu",
    "notes",
]


def write(tmp_path: Path, rows: list[dict[str, str]], extra: list[str] | None = None) -> Path:
    """`rows` as <tmp_path>/planner/published_configs.csv: FIELDS, then the `extra` columns."""
    path = tmp_path / "planner" / "published_configs.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    fields = FIELDS + (extra or [])
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fields)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: row.get(k, "") for k in fields})
    return path
