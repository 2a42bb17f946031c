"""A minimal published-run row (the planner's CSV columns as text) that the planner tests vary
cell by cell."""

from __future__ import annotations

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
