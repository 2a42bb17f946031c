"""Property test of `trainyard plan --evaluate` (issue 18, acceptance 2): a well-formed row of a
published run never aborts the evaluation. Whatever its combination of model, GPU, degrees,
sharding, precision, recompute, kernel and published figure, it is either compared (a finite,
positive prediction and a finite error) or skipped with a reason that names a column. Rows
are drawn consistent (their degrees multiply to their GPU count, their batch to a multiple of
the data-parallel micro-batches); synthetic: no shared data needed.
"""

from __future__ import annotations

import csv
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainyard.planner.evaluate import load_cases

# (columns) of models given by shape, or by a name the planner knows
MODELS = [
    {"model": "dense-gqa", "num_layers": "32", "hidden_size": "4096", "num_attention_heads": "32",
     "num_kv_heads": "8", "ffn_hidden_size": "14336", "mlp": "swiglu", "vocab_size": "128256"},
    {"model": "gpt", "num_layers": "24", "hidden_size": "2048", "num_attention_heads": "16",
     "mlp": "gelu", "vocab_size": "50257"},
    {"model": "relu2", "num_layers": "16", "hidden_size": "6144", "num_attention_heads": "48",
     "num_kv_heads": "8", "ffn_hidden_size": "24576", "mlp": "squared_relu",
     "vocab_size": "256000"},
    {"model": "moe", "num_layers": "32", "hidden_size": "4096", "num_attention_heads": "32",
     "num_kv_heads": "8", "ffn_hidden_size": "14336", "mlp": "swiglu", "vocab_size": "32000",
     "num_experts": "8", "moe_topk": "2"},
    {"model": "Llama 3.1 70B"},
    {"model": "DeepSeek-V3"},
]  # fmt: skip
GPUS = ["H100", "A100", "A100-40GB", "H200", "B200", "GB200", "B300", "GB300", "V100", "L40S"]
FIGURES = {
    "tokens_per_sec_per_gpu": "1500",
    "iteration_time_s": "10.5",
    "mfu_pct": "40",
    "hfu_pct": "52%",
    "achieved_tflops_per_gpu": "300",
}


@st.composite
def rows(draw: st.DrawFn) -> dict[str, str]:
    model = draw(st.sampled_from(MODELS))
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    pp = draw(st.sampled_from([1, 2, 4, 8]))
    cp = draw(st.sampled_from([1, 2]))
    dp = draw(st.sampled_from([1, 2, 8, 32]))
    micro = draw(st.sampled_from([1, 2, 4]))
    row = {
        **model,
        "table_id": "P",
        "gpu_type": draw(st.sampled_from(GPUS)),
        "num_gpus": str(tp * pp * cp * dp),
        "tensor_parallel": str(tp),
        "pipeline_parallel": str(pp),
        "context_parallel": str(cp),
        "micro_batch_size": str(micro),
        "global_batch_size": str(micro * dp * draw(st.sampled_from([1, 4, 16]))),
        "seq_len": draw(st.sampled_from(["2048", "4096", "8192", "32768"])),
        "sharding": draw(st.sampled_from(["", "none", "zero1", "zero2", "zero3", "fsdp", "hsdp"])),
        "precision": draw(st.sampled_from(["", "bf16", "fp16", "fp8"])),
        "activation_recompute": draw(st.sampled_from(["", "none", "norms", "selective", "full"])),
        "flash_attention": draw(st.sampled_from(["", "yes", "no", "cuDNN"])),
    }
    if pp > 1:
        row["virtual_pipeline"] = draw(st.sampled_from(["", "1", "2", "4"]))
    if model.get("num_experts") or model["model"] == "DeepSeek-V3":
        row["expert_parallel"] = draw(st.sampled_from(["", "1", "2", "8"]))
    figure = draw(st.sampled_from(sorted(FIGURES)))
    row[figure] = FIGURES[figure]
    return row


@given(st.lists(rows(), min_size=1, max_size=4))
def test_a_well_formed_row_is_compared_or_skipped_with_its_reason(
    tmp_path_factory: pytest.TempPathFactory, drawn: list[dict[str, str]]
) -> None:
    path = tmp_path_factory.mktemp("rows") / "rows.csv"
    columns = sorted({name for row in drawn for name in row})
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, columns)
        writer.writeheader()
        writer.writerows(drawn)
    cases, skipped = load_cases(path)  # never raises for a row
    assert len(cases) + len(skipped) == len(drawn)
    for case in cases:
        predicted, error = case.predict(), case.error()
        assert math.isfinite(predicted) and predicted > 0 and math.isfinite(error)
    for _table, _model, reason in skipped:
        assert reason.strip()
