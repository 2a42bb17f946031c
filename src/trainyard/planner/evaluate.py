"""Evaluation of the time model (`trainyard.planner.compute`) against published throughput.

This module owns reading ``<shared>/planner/published_configs.csv`` (sources in SOURCES.md next
to it), turning each row into a `Model`, `ParallelLayout` and `GPU`, predicting the achieved
TFLOP/s per GPU and comparing it with the published value. It only reads the file.

Row conventions (all documented here, none guessed per row):

* GPU: the catalogue's A100-80GB, H100-SXM or V100-32GB picked from `gpu_type`, with the dense
  peak from `gpu_peak_tflops` (default A100 312, H100 989, V100 125 when the cell is empty).
* ParallelLayout: tp, pp from the row; dp from `data_parallel`, else num_gpus/(tp·pp); a missing
  micro-batch is taken as 1 (SC21_T1 and the 2020/2021 README tables do not give it; 1 is the
  smallest, and SC'21 §5.1 uses small micro-batches for its large runs). Rows noting ZeRO-3 use
  `zero=3`.
* Recompute: the `activation_recompute` cell when given (full / selective); otherwise "full"
  for the SC'21-era tables (SC'21 counts the recomputed forward, Eq. 3 with 96) and "none" for
  README_2024_H100 (Megatron-Core default; its TFLOP/s / peak equals the stated MFU).
* Published TFLOP/s are compared with `StepTime.hardware_tflops_per_gpu` (executed FLOPs, the
  SC'21 convention), which equals the model-FLOP rate when nothing is recomputed.
* Rows whose notes mention --tp-comm-overlap are predicted with tp_overlap = TP_COMM_OVERLAP
  and, when tp > 1, sequence parallelism (Megatron-Core's overlap of tensor-parallel
  communication works on the sequence-parallel reduce-scatter/all-gather and requires it).
* Attention: fused (flash) for README_2024_H100 (Megatron-Core r0.8 with Transformer Engine's
  fused attention); materialised scores for every other table, which predate FlashAttention
  (Dao et al., May 2022) in Megatron.
* Rows in `compute.CALIBRATION_ROWS` are marked: the time model's constants were fitted on
  them; all other rows are held out.
* ZeRO-3 rows (SC21_T2's DeepSpeed baseline) are skipped: their iteration (~66 s for 175B at
  768 and 1536 GPUs alike) is bound by DeepSpeed's parameter gathering far below NCCL's
  bandwidth, which this model does not describe; predicting them from NCCL rates is 2-3x off.
* Rows without a published TFLOP/s but with `hfu_pct` (README_MFU_HFU, the Korthikanti et al.
  Table 3 configurations) are compared as hfu_pct · peak, the executed-FLOP rate, with the
  interleaving factor `v=N` their notes give.
* Rows without a published TFLOP/s or HFU (MFU-only strong-scaling points), without heads, or
  without the TP/PP split are skipped, with the reason.

error = (predicted - published) / published.
"""

from __future__ import annotations

import csv
import dataclasses
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from trainyard.datafiles import shared_root
from trainyard.planner.compute import (
    CALIBRATION,
    CALIBRATION_ROWS,
    TP_COMM_OVERLAP,
    Calibration,
    step_time,
)
from trainyard.planner.errors import PlannerError
from trainyard.planner.hardware import GPU, gpu
from trainyard.planner.layout import ParallelLayout, Recompute
from trainyard.planner.model import Model

__all__ = [
    "DEFAULT_PEAKS",
    "Case",
    "Evaluation",
    "Row",
    "default_csv_path",
    "evaluate",
    "load_cases",
    "row_inputs",
]

DEFAULT_PEAKS: Final[dict[str, float]] = {"A100": 312.0, "H100": 989.0, "V100": 125.0}
_CATALOGUE_NAME: Final[dict[str, str]] = {
    "A100": "A100-80GB",
    "H100": "H100-SXM",
    "V100": "V100-32GB",
}
_NO_RECOMPUTE_TABLES: Final = ("README_2024_H100",)
_FLASH_ATTENTION_TABLES: Final = ("README_2024_H100",)


@dataclass(frozen=True)
class Row:
    """One evaluated row: predicted and published TFLOP/s per GPU and the relative error;
    `calibration` says the time model's constants were fitted on it."""

    table_id: str
    model: str
    gpus: int
    predicted: float
    published: float
    error: float
    calibration: bool = False


@dataclass(frozen=True)
class Evaluation:
    """All evaluated rows, the skipped ones ((table_id, model, reason)), and error statistics."""

    rows: tuple[Row, ...]
    skipped: tuple[tuple[str, str, str], ...]
    median_abs_error: float
    max_abs_error: float

    def held_out(self) -> dict[str, float] | None:
        """Rows, median and max |error| of the rows the constants were not fitted on (None if
        every row is a calibration row)."""
        errors = [abs(r.error) for r in self.rows if not r.calibration]
        if not errors:
            return None
        return {
            "rows": len(errors),
            "median_abs_error": statistics.median(errors),
            "max_abs_error": max(errors),
        }

    def table(self) -> str:
        """The rows as aligned text, one per line (calibration rows marked *), summary last."""
        lines = [f"{'table_id':<22}{'model':<16}{'gpus':>6}{'pred':>9}{'pub':>9}{'err':>8}"]
        for r in self.rows:
            lines.append(
                f"{r.table_id:<22}{r.model[:15]:<16}{r.gpus:>6}{r.predicted:>9.1f}"
                f"{r.published:>9.1f}{r.error:>+8.1%}{' *' if r.calibration else ''}"
            )
        held = self.held_out()
        lines.append(
            f"median |error| {self.median_abs_error:.1%}, max |error| {self.max_abs_error:.1%}, "
            f"{len(self.rows)} rows, {len(self.skipped)} skipped"
        )
        if held is not None:
            lines.append(
                f"held out (not *): median |error| {held['median_abs_error']:.1%}, "
                f"max |error| {held['max_abs_error']:.1%}, {held['rows']:.0f} rows"
            )
        return "\n".join(lines)


def default_csv_path() -> Path:
    """``$TRAINYARD_SHARED`` (else ``../shared`` from the working directory)
    ``/planner/published_configs.csv``."""
    return shared_root() / "planner" / "published_configs.csv"


def _int(row: dict[str, str], field: str) -> int | None:
    text = row.get(field, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError as exc:
        raise PlannerError(field, f"must be a number, got {text!r}") from exc
    if value != int(value):
        raise PlannerError(field, f"must be a whole number, got {text!r}")
    return int(value)


def _gpu(row: dict[str, str]) -> GPU:
    kind = next((k for k in DEFAULT_PEAKS if k in row.get("gpu_type", "")), None)
    if kind is None:
        raise PlannerError("gpu_type", f"unknown GPU {row.get('gpu_type', '')!r}")
    peak_text = row.get("gpu_peak_tflops", "").strip()
    peak = float(peak_text) if peak_text else DEFAULT_PEAKS[kind]
    return dataclasses.replace(gpu(_CATALOGUE_NAME[kind]), bf16_tflops=peak)


def _recompute(row: dict[str, str]) -> Recompute:
    cell = row.get("activation_recompute", "").strip().lower()
    if cell.startswith("selective"):
        return "selective"
    if cell.startswith("full"):
        return "full"
    return "none" if row.get("table_id") in _NO_RECOMPUTE_TABLES else "full"


def row_inputs(row: dict[str, str]) -> tuple[Model, ParallelLayout, GPU] | str:
    """The `Model`, `ParallelLayout` and `GPU` a CSV row describes, or why it cannot be
    evaluated."""
    needed = ("num_layers", "hidden_size", "num_attention_heads", "seq_len", "vocab_size")
    for field in (*needed, "global_batch_size", "tensor_parallel", "pipeline_parallel"):
        if _int(row, field) is None:
            return f"no {field}"
    layers, hidden, heads, seq, vocab = (_int(row, f) or 0 for f in needed)
    batch = _int(row, "global_batch_size") or 0
    tp = _int(row, "tensor_parallel") or 0
    pp = _int(row, "pipeline_parallel") or 0
    gpus = _int(row, "num_gpus") or tp * pp
    dp = _int(row, "data_parallel") or gpus // (tp * pp)
    micro = _int(row, "micro_batch_size") or 1
    notes = row.get("notes", "")
    zero = 3 if "zero-3" in notes.lower() else 0
    overlap = "--tp-comm-overlap" in notes
    found = re.search(r"\bv=(\d+)", notes)
    v = int(found.group(1)) if found and pp > 1 else 1
    model = Model(row.get("model", "") or "row", layers, hidden, heads, seq, vocab, batch)
    layout = ParallelLayout(
        tp=tp,
        pp=pp,
        dp=dp,
        micro_batch=micro,
        zero=zero,
        recompute=_recompute(row),
        virtual_stages=v,
        sequence_parallel=tp > 1
        and (overlap or "sequence parallel" in row.get("activation_recompute", "")),
        flash_attention=row.get("table_id") in _FLASH_ATTENTION_TABLES,
    )
    return model, layout, _gpu(row)


@dataclass(frozen=True)
class Case:
    """One usable row, ready to predict: its inputs and the published TFLOP/s per GPU."""

    table_id: str
    model_name: str
    model: Model
    layout: ParallelLayout
    gpu: GPU
    published: float
    tp_overlap: float

    @property
    def calibration(self) -> bool:
        """Whether the time model's constants were fitted on this row."""
        return (self.table_id, self.model_name) in CALIBRATION_ROWS

    def predict(self, calibration: Calibration = CALIBRATION) -> float:
        """Predicted executed TFLOP/s per GPU (`StepTime.hardware_tflops_per_gpu`)."""
        result = step_time(
            self.model, self.layout, self.gpu, tp_overlap=self.tp_overlap, calibration=calibration
        )
        return result.hardware_tflops_per_gpu


def load_cases(path: str | Path | None = None) -> tuple[list[Case], list[tuple[str, str, str]]]:
    """The usable rows of published_configs.csv and the skipped ones (table_id, model, reason)."""
    csv_path = Path(path) if path is not None else default_csv_path()
    if not csv_path.is_file():
        raise PlannerError("path", f"{csv_path} not found (set TRAINYARD_SHARED)")
    cases: list[Case] = []
    skipped: list[tuple[str, str, str]] = []
    with csv_path.open(newline="") as f:
        for raw in csv.DictReader(f):
            table, name = raw.get("table_id", ""), raw.get("model", "")
            published_text = raw.get("achieved_tflops_per_gpu", "").strip()
            hfu_text = raw.get("hfu_pct", "").strip()
            if not published_text and not hfu_text:
                skipped.append((table, name, "no achieved_tflops_per_gpu or hfu_pct"))
                continue
            if "zero-3" in raw.get("notes", "").lower():
                skipped.append((table, name, "ZeRO-3 baseline (not modelled)"))
                continue
            inputs = row_inputs(raw)
            if isinstance(inputs, str):
                skipped.append((table, name, inputs))
                continue
            model, layout, g = inputs
            if published_text:
                published = float(published_text)
            else:
                published = float(hfu_text) / 100 * g.peak_tflops(model.precision)
            tp_overlap = TP_COMM_OVERLAP if "--tp-comm-overlap" in raw.get("notes", "") else 0.0
            cases.append(Case(table, name, model, layout, g, published, tp_overlap))
    if not cases:
        raise PlannerError("path", f"{csv_path} has no row with a published TFLOP/s to evaluate")
    return cases, skipped


def evaluate(path: str | Path | None = None, calibration: Calibration = CALIBRATION) -> Evaluation:
    """Predict every usable row of published_configs.csv and compare with the published value
    (with the shipped constants unless `calibration` replaces them)."""
    cases, skipped = load_cases(path)
    rows: list[Row] = []
    for case in cases:
        predicted = case.predict(calibration)
        err = (predicted - case.published) / case.published
        rows.append(
            Row(
                case.table_id,
                case.model_name,
                case.layout.gpus,
                predicted,
                case.published,
                err,
                case.calibration,
            )
        )
    errors = [abs(r.error) for r in rows]
    return Evaluation(tuple(rows), tuple(skipped), statistics.median(errors), max(errors))
