"""The time model against ../shared/planner/published_configs.csv (trainyard.planner.evaluate).

The shared folder is found from TRAINYARD_SHARED (default: <repo>/../shared). Missing data is a
skip locally and a failure when CI=true. The synthetic-CSV tests need no shared data.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest

from trainyard.planner.compute import step_time
from trainyard.planner.errors import PlannerError
from trainyard.planner.evaluate import default_csv_path, evaluate, row_inputs

REPO = Path(__file__).resolve().parents[3]
SHARED = Path(os.environ.get("TRAINYARD_SHARED", REPO.parent / "shared"))
CSV = SHARED / "planner" / "published_configs.csv"

# Issue acceptance 1: median |error| <= 7 %, every row within 15 %. Achieved when written:
# median 2.6 %, max 13.3 % (README_2024_H100 32B, held out) over 38 rows (34 TFLOP/s rows and
# 4 HFU rows); over the 22 held-out rows median 3.6 %, max 13.3 %.
MEDIAN_BOUND = 0.07
MAX_BOUND = 0.15

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


def published_csv() -> Path:
    if not CSV.is_file():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{CSV} is missing (set TRAINYARD_SHARED); CI must not skip this check")
        pytest.skip(f"{CSV} not found; set TRAINYARD_SHARED to evaluate the time model")
    return CSV


def test_time_model_matches_published_throughput() -> None:
    result = evaluate(published_csv())
    print()
    print(result.table())
    assert len(result.rows) >= 30
    assert result.median_abs_error <= MEDIAN_BOUND
    assert result.max_abs_error <= MAX_BOUND
    # The constants were fitted on 16 rows (compute.CALIBRATION_ROWS); the rest are held out.
    calibrated = [r for r in result.rows if r.calibration]
    assert len(calibrated) == 16
    held_out = [abs(r.error) for r in result.rows if not r.calibration]
    assert len(held_out) == len(result.rows) - 16
    assert max(held_out) <= MAX_BOUND
    assert "held out (not *)" in result.table()


def write(tmp_path: Path, rows: list[dict[str, str]], extra: list[str] | None = None) -> Path:
    path = tmp_path / "planner" / "published_configs.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    fields = FIELDS + (extra or [])
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fields)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: row.get(k, "") for k in fields})
    return path


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


def test_synthetic_row_is_predicted_with_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, [ROW, {**ROW, "tensor_parallel": ""}, {**ROW, "model": "mfu-only",
                "achieved_tflops_per_gpu": ""}])  # fmt: skip
    result = evaluate(path)
    assert len(result.rows) == 1
    reasons = [s[2] for s in result.skipped]
    assert reasons == [
        "no tensor_parallel / pipeline_parallel split",
        "no published figure (iteration_time_s, tokens_per_sec_per_gpu, "
        "achieved_tflops_per_gpu, hfu_pct or mfu_pct)",
    ]
    inputs = row_inputs(ROW)
    assert not isinstance(inputs, str)
    model, layout, device = inputs
    # Missing micro-batch -> 1; no recompute column on an SC'21-era row -> full; A100 peak 312.
    assert (layout.micro_batch, layout.dp, layout.recompute) == (1, 1, "full")
    assert device.bf16_tflops == 312
    predicted = step_time(model, layout, device).hardware_tflops_per_gpu
    row = result.rows[0]
    assert (row.table_id, row.model, row.gpus) == ("T", "tiny", 1)
    assert row.predicted == pytest.approx(predicted)
    assert row.error == pytest.approx((predicted - 150) / 150)
    assert result.median_abs_error == pytest.approx(abs(row.error))
    assert "median |error|" in result.table()


def test_hfu_rows_compare_executed_flop_rate_with_interleaving(tmp_path: Path) -> None:
    row = {**ROW, "table_id": "README_MFU_HFU", "model": "hfu", "num_gpus": "4",
           "pipeline_parallel": "2", "data_parallel": "1", "tensor_parallel": "2",
           "global_batch_size": "8", "activation_recompute": "selective + sequence parallel",
           "achieved_tflops_per_gpu": "", "hfu_pct": "50",
           "notes": "interleaved pipeline v=2 per calculon config"}  # fmt: skip
    inputs = row_inputs(row)
    assert not isinstance(inputs, str)
    model, layout, device = inputs
    assert (layout.virtual_stages, layout.recompute, layout.sequence_parallel) == (
        2,
        "selective",
        True,
    )
    result = evaluate(write(tmp_path, [row], extra=["hfu_pct"]))
    assert result.rows[0].published == pytest.approx(0.5 * 312)
    predicted = step_time(model, layout, device).hardware_tflops_per_gpu
    assert result.rows[0].predicted == pytest.approx(predicted)


def test_gpu_peaks_from_type_and_column(tmp_path: Path) -> None:
    for gpu_type, peak_cell, peak in (("V100 (DGX-2)", "", 125), ("H100", "", 989),
                                      ("H100", "900", 900)):  # fmt: skip
        inputs = row_inputs({**ROW, "gpu_type": gpu_type, "gpu_peak_tflops": peak_cell})
        assert not isinstance(inputs, str)
        assert inputs[2].bf16_tflops == peak
    h100 = row_inputs({**ROW, "table_id": "README_2024_H100", "gpu_type": "H100"})
    assert not isinstance(h100, str)
    assert h100[1].recompute == "none"


def test_bad_rows_and_paths_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(PlannerError) as exc:
        row_inputs({**ROW, "gpu_type": "TPU v4"})
    assert exc.value.field == "gpu_type"
    with pytest.raises(PlannerError) as exc:
        row_inputs({**ROW, "hidden_size": "lots"})
    assert exc.value.field == "hidden_size"
    with pytest.raises(PlannerError) as exc:
        row_inputs({**ROW, "hidden_size": "1000"})  # not divisible by 16 heads
    assert exc.value.field == "hidden"
    with pytest.raises(PlannerError) as exc:
        evaluate(tmp_path / "missing.csv")
    assert exc.value.field == "path"
    with pytest.raises(PlannerError) as exc:
        evaluate(write(tmp_path, [{**ROW, "achieved_tflops_per_gpu": ""}]))
    assert exc.value.field == "path"


def test_default_path_follows_trainyard_shared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINYARD_SHARED", str(tmp_path))
    assert default_csv_path() == tmp_path / "planner" / "published_configs.csv"
    monkeypatch.delenv("TRAINYARD_SHARED")
    monkeypatch.chdir(tmp_path)
    assert default_csv_path() == tmp_path.parent / "shared" / "planner" / "published_configs.csv"
