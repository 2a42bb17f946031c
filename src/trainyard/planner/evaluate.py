"""Evaluation of the time model (`trainyard.planner.compute`) against published throughput.

This module owns reading published training runs from CSV (``<shared>/planner/
published_configs.csv``, sources in SOURCES.md next to it, and the package's own
`trainyard/planner/data/published_runs.csv`), turning each row into a `Model`,
`ParallelLayout` and `GPU`, predicting the row's published figure and comparing. It only reads
files. A row it cannot express is skipped with its reason; no row aborts the evaluation.

Columns. Required: num_layers, hidden_size, num_attention_heads, seq_len, vocab_size,
global_batch_size, gpu_type, tensor_parallel, pipeline_parallel, and one published figure.
Optional, each with its default: num_kv_heads (= heads), ffn_hidden_size (4·hidden), mlp
(gelu; swiglu, geglu, relu, squared_relu), vocab_multiple (128), tied_embeddings (yes),
network_gbps_per_gpu (the catalogue's), context_parallel (1), data_parallel
(GPUs/(tp·cp·pp)), virtual_pipeline (a ``v=N`` in notes, else 1), first_stage_layers /
last_stage_layers (even stages), sharding (none; zero1, zero2, zero3, fsdp, hsdp; a ``ZeRO-3``
in notes means zero3), shard_group (hsdp's shard group; 8, one node, when not given),
precision (bf16; fp16, fp8), micro_batch_size (1), gpu_peak_tflops (the GPU's),
activation_recompute, flash_attention, tp_comm_overlap (yes/no), split (calibration or
held_out). Published figures, in the order of preference: iteration_time_s (or
iteration_time_ms), tokens_per_sec_per_gpu (both free of any FLOP-counting convention),
achieved_tflops_per_gpu, hfu_pct, mfu_pct.

Row conventions (all documented here, none guessed per row):

* GPU: the catalogue entry whose name appears in `gpu_type` (V100, A100 40/80GB, H100 SXM/PCIe,
  H200, B200, L40S), with the dense peak from `gpu_peak_tflops` when given.
* Interleaving: `virtual_pipeline`, or ``v=N`` in the notes, else none (v = 1). (Choosing the
  fastest factor for rows that do not state one was tried: README_2024_H100's pipelined rows
  then came out 13-20 % too fast, so they evidently ran without it.)
* A missing micro-batch is taken as 1 (SC21_T1 and the 2020/2021 README tables do not give it).
* Recompute: the `activation_recompute` cell when given (none / selective / full); otherwise
  "full" for the SC'21-era tables (SC'21 counts the recomputed forward, Eq. 3 with 96) and
  "none" for README_2024_H100 (Megatron-Core default; its TFLOP/s / peak equals the stated MFU).
* Attention: the `flash_attention` cell; else fused (flash) for README_2024_H100 (Megatron-Core
  r0.8 with Transformer Engine) and materialised scores for the older shared tables.
* TP overlap: the `tp_comm_overlap` cell, or ``--tp-comm-overlap`` in the notes; it implies
  sequence parallelism, as in Megatron-Core. Sequence parallelism is also on when the recompute
  cell says so.
* A published TFLOP/s or HFU is compared with `StepTime.hardware_tflops_per_gpu` (executed
  FLOPs, the SC'21 convention, equal to the model-FLOP rate when nothing is recomputed); an MFU
  with the model-FLOP rate; both over the row's peak. A time or token rate is compared with the
  predicted one. The error is always stated as throughput: (predicted - published)/published,
  positive when the prediction is faster.
* Rows in `compute.CALIBRATION_ROWS` or marked ``split=calibration`` are calibration rows; all
  others are held out.
* Skipped with the reason: rows without a published figure, without the model's shape or the
  TP/PP split, MoE rows (``num_experts`` > 1: expert parallelism is not modelled), and rows
  whose layout the planner rejects (its error names the field).

error = (predicted - published) / published.
"""

from __future__ import annotations

import csv
import dataclasses
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from trainyard.datafiles import shared_root
from trainyard.planner.collectives import LinkSet, ib_link
from trainyard.planner.compute import CALIBRATION, CALIBRATION_ROWS, Calibration, step_time
from trainyard.planner.errors import PlannerError
from trainyard.planner.hardware import CATALOGUE, GPU
from trainyard.planner.layout import ParallelLayout, Recompute
from trainyard.planner.model import MLPS, Model, Precision

__all__ = [
    "DEFAULT_PEAKS",
    "SHARDING_NAMES",
    "Case",
    "Evaluation",
    "Row",
    "default_csv_path",
    "evaluate",
    "evaluate_paths",
    "load_cases",
    "package_csv_path",
    "row_inputs",
]

DEFAULT_PEAKS: Final[dict[str, float]] = {"A100": 312.0, "H100": 989.0, "V100": 125.0}
# Substrings of `gpu_type`, most specific first, and the catalogue entry each means.
_GPU_NAMES: Final[tuple[tuple[str, str], ...]] = (
    ("H100-PCIE", "H100-PCIe"),
    ("H100 PCIE", "H100-PCIe"),
    ("H100", "H100-SXM"),
    ("H200", "H200"),
    ("B200", "B200"),
    ("A100-SXM4-40GB", "A100-40GB"),
    ("A100 40GB", "A100-40GB"),
    ("A100-40GB", "A100-40GB"),
    ("A100", "A100-80GB"),
    ("V100", "V100-32GB"),
    ("L40S", "L40S"),
)
_NO_RECOMPUTE_TABLES: Final = ("README_2024_H100",)
_FLASH_ATTENTION_TABLES: Final = ("README_2024_H100",)
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
_TRUE: Final = ("yes", "true", "1", "y", "on")
_FALSE: Final = ("no", "false", "0", "n", "off")


@dataclass(frozen=True)
class Row:
    """One evaluated row: predicted and published figure (`metric`, in its unit) and the
    relative error as throughput; `calibration` says the constants were fitted on it."""

    table_id: str
    model: str
    gpus: int
    predicted: float
    published: float
    error: float
    calibration: bool = False
    metric: str = "tflops_per_gpu"


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
        return _summary([r for r in self.rows if not r.calibration])

    def calibration_rows(self) -> dict[str, float] | None:
        """Rows, median and max |error| of the calibration rows (None if there are none)."""
        return _summary([r for r in self.rows if r.calibration])

    def table(self) -> str:
        """The rows as aligned text, one per line (calibration rows marked *), the skipped rows
        with their reasons, and the summary last."""
        lines = [
            f"{'table_id':<20}{'model':<16}{'gpus':>6}  {'metric':<10}{'pred':>9}{'pub':>9}"
            f"{'err':>8}"
        ]
        for r in self.rows:
            lines.append(
                f"{r.table_id[:19]:<20}{r.model[:15]:<16}{r.gpus:>6}  {_METRIC_LABEL[r.metric]:<10}"
                f"{_figure(r.predicted):>9}{_figure(r.published):>9}{r.error:>+8.1%}"
                f"{' *' if r.calibration else ''}"
            )
        for table, model, reason in self.skipped:
            lines.append(f"skipped {table} {model}: {reason}")
        lines.append(
            f"median |error| {self.median_abs_error:.1%}, max |error| {self.max_abs_error:.1%}, "
            f"{len(self.rows)} rows, {len(self.skipped)} skipped"
        )
        for label, part in (("held out (not *)", self.held_out()), ("calibration (*)", None)):
            if label.startswith("calibration"):
                part = self.calibration_rows()
            if part is not None:
                lines.append(
                    f"{label}: median |error| {part['median_abs_error']:.1%}, "
                    f"max |error| {part['max_abs_error']:.1%}, {part['rows']:.0f} rows"
                )
        return "\n".join(lines)


_METRIC_LABEL: Final = {
    "tflops_per_gpu": "TFLOP/s",
    "hfu_tflops": "HFU TF/s",
    "mfu_tflops": "MFU TF/s",
    "tokens_per_sec_per_gpu": "tok/s/GPU",
    "iteration_time_s": "iter s",
}


def _figure(value: float) -> str:
    """A published or predicted figure: one decimal from 10 up, three below (seconds)."""
    return f"{value:.1f}" if value >= 10 else f"{value:.3f}"


def _summary(rows: Sequence[Row]) -> dict[str, float] | None:
    errors = [abs(r.error) for r in rows]
    if not errors:
        return None
    return {
        "rows": len(errors),
        "median_abs_error": statistics.median(errors),
        "max_abs_error": max(errors),
    }


def default_csv_path() -> Path:
    """``$TRAINYARD_SHARED`` (else ``../shared`` from the working directory)
    ``/planner/published_configs.csv``."""
    return shared_root() / "planner" / "published_configs.csv"


def package_csv_path() -> Path:
    """The published runs shipped with the package (`trainyard/planner/data`)."""
    return Path(__file__).resolve().parent / "data" / "published_runs.csv"


def _cell(row: Mapping[str, str | None], field: str) -> str:
    value = row.get(field)
    return value.strip() if isinstance(value, str) else ""


def _number(row: Mapping[str, str | None], field: str) -> float | None:
    text = _cell(row, field).replace(",", "")
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise PlannerError(field, f"must be a number, got {text!r}") from None


def _int(row: Mapping[str, str | None], field: str) -> int | None:
    value = _number(row, field)
    if value is None:
        return None
    if value != int(value):
        raise PlannerError(field, f"must be a whole number, got {_cell(row, field)!r}")
    return int(value)


def _flag(row: Mapping[str, str | None], field: str) -> bool | None:
    text = _cell(row, field).lower()
    if not text:
        return None
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise PlannerError(field, f"must be yes or no, got {_cell(row, field)!r}")


def _gpu(row: Mapping[str, str | None]) -> GPU:
    text = _cell(row, "gpu_type").upper()
    name = next((entry for key, entry in _GPU_NAMES if key in text), None)
    if name is None:
        raise PlannerError(
            "gpu_type",
            f"unknown GPU {_cell(row, 'gpu_type')!r}; name one of {', '.join(CATALOGUE)}",
        )
    device = CATALOGUE[name]
    peak = _number(row, "gpu_peak_tflops")
    if peak is not None:
        if peak <= 0:
            raise PlannerError("gpu_peak_tflops", f"must be > 0, got {peak}")
        device = dataclasses.replace(device, bf16_tflops=peak)
    return device


def _recompute(row: Mapping[str, str | None]) -> Recompute:
    cell = _cell(row, "activation_recompute").lower()
    if cell.startswith(("selective", "sel")):
        return "selective"
    if cell.startswith("full"):
        return "full"
    if cell.startswith(("none", "no")):
        return "none"
    if cell:
        raise PlannerError("activation_recompute", f"must be none, selective or full, got {cell!r}")
    return "none" if _cell(row, "table_id") in _NO_RECOMPUTE_TABLES else "full"


def _sharding(row: Mapping[str, str | None]) -> tuple[int, bool]:
    cell = _cell(row, "sharding").lower().replace("-", "").replace(" ", "")
    if not cell:
        return (3, False) if "zero-3" in _cell(row, "notes").lower() else (0, False)
    cell = {"zero": "zero1", "zero3fsdp": "zero3"}.get(cell, cell)
    if cell not in SHARDING_NAMES:
        raise PlannerError(
            "sharding", f"unknown sharding {cell!r}; use one of {', '.join(SHARDING_NAMES)}"
        )
    return SHARDING_NAMES[cell]


def _precision(row: Mapping[str, str | None]) -> Precision:
    cell = _cell(row, "precision").lower() or "bf16"
    for name in ("bf16", "fp16", "fp8"):
        if cell == name:
            return name
    raise PlannerError("precision", f"must be bf16, fp16 or fp8, got {cell!r}")


def _model(row: Mapping[str, str | None]) -> Model | str:
    needed = ("num_layers", "hidden_size", "num_attention_heads", "seq_len", "vocab_size")
    values = {}
    for field in (*needed, "global_batch_size"):
        value = _int(row, field)
        if value is None:
            return f"no {field}"
        values[field] = value
    mlp = _cell(row, "mlp").lower().replace("-", "_")
    if mlp and mlp not in MLPS:
        raise PlannerError("mlp", f"unknown MLP {mlp!r}; use one of {', '.join(MLPS)}")
    tied = _flag(row, "tied_embeddings")
    return Model(
        _cell(row, "model") or "row",
        values["num_layers"],
        values["hidden_size"],
        values["num_attention_heads"],
        values["seq_len"],
        values["vocab_size"],
        values["global_batch_size"],
        kv_heads=_int(row, "num_kv_heads") or 0,
        ffn_hidden=_int(row, "ffn_hidden_size") or 0,
        precision=_precision(row),
        mlp=mlp,
        bias=mlp not in ("swiglu", "geglu") if mlp else True,
        tied_embeddings=True if tied is None else tied,
        learned_positions=mlp not in ("swiglu", "geglu") if mlp else True,
        vocab_multiple=_int(row, "vocab_multiple") or 128,
    )


def row_inputs(row: Mapping[str, str | None]) -> tuple[Model, ParallelLayout, GPU] | str:
    """The `Model`, `ParallelLayout` and `GPU` a CSV row describes, or why it cannot be
    evaluated. Raises `PlannerError` for a cell that is not of its column's form."""
    experts = _int(row, "num_experts")
    if experts is not None and experts > 1:
        return f"MoE ({experts} experts): expert parallelism is not modelled"
    model = _model(row)
    if isinstance(model, str):
        return model
    if "zero-3 (no model parallelism)" in _cell(row, "notes").lower():
        return (
            "DeepSpeed ZeRO-3 baseline of 2021 (SC21_T2): ~66 s per iteration for 175B at 768 "
            "and 1536 GPUs alike, bound by that version's parameter gathering, an order of "
            "magnitude below NCCL's all-gather rate; not a property of the layout"
        )
    tp = _int(row, "tensor_parallel")
    pp = _int(row, "pipeline_parallel")
    if tp is None or pp is None:
        return "no tensor_parallel / pipeline_parallel split"
    cp = _int(row, "context_parallel") or 1
    gpus = _int(row, "num_gpus") or tp * pp * cp
    dp = _int(row, "data_parallel") or gpus // (tp * pp * cp)
    if tp * pp * cp * dp != gpus:
        return f"tp x cp x pp x dp = {tp * cp * pp * dp} but num_gpus = {gpus}"
    notes = _cell(row, "notes")
    found = re.search(r"\bv=(\d+)", notes)
    v = _int(row, "virtual_pipeline") or (int(found.group(1)) if found and pp > 1 else 0)
    zero, hybrid = _sharding(row)
    overlap = _flag(row, "tp_comm_overlap")
    if overlap is None:
        overlap = "--tp-comm-overlap" in notes
    overlap = overlap and tp > 1
    flash = _flag(row, "flash_attention")
    if flash is None:
        flash = _cell(row, "table_id") in _FLASH_ATTENTION_TABLES
    recompute_cell = _cell(row, "activation_recompute")
    layout = ParallelLayout(
        tp=tp,
        pp=pp,
        dp=dp,
        cp=cp,
        micro_batch=_int(row, "micro_batch_size") or 1,
        zero=zero,
        shard_group=(_int(row, "shard_group") or 8) if hybrid else 0,
        recompute=_recompute(row),
        virtual_stages=v or 1,
        sequence_parallel=tp > 1 and (overlap or "sequence parallel" in recompute_cell),
        flash_attention=flash,
        tp_comm_overlap=overlap,
        first_stage_layers=_int(row, "first_stage_layers") or 0,
        last_stage_layers=_int(row, "last_stage_layers") or 0,
    )
    layout.check(model)
    return model, layout, _gpu(row)


def _links(row: Mapping[str, str | None]) -> LinkSet | None:
    gbps = _number(row, "network_gbps_per_gpu")
    if gbps is None:
        return None
    if gbps <= 0:
        raise PlannerError("network_gbps_per_gpu", f"must be > 0, got {gbps}")
    return LinkSet(inter=ib_link(gbps), source="network_gbps_per_gpu")


def _target(row: Mapping[str, str | None], gpu: GPU) -> tuple[str, float] | None:
    """The published figure to compare with: (metric, value), or None."""
    seconds = _number(row, "iteration_time_s")
    if seconds is None:
        ms = _number(row, "iteration_time_ms")
        seconds = ms / 1000 if ms is not None else None
    options: list[tuple[str, float | None]] = [
        ("iteration_time_s", seconds),
        ("tokens_per_sec_per_gpu", _number(row, "tokens_per_sec_per_gpu")),
        ("tflops_per_gpu", _number(row, "achieved_tflops_per_gpu")),
    ]
    peak = gpu.bf16_tflops
    for field, metric in (("hfu_pct", "hfu_tflops"), ("mfu_pct", "mfu_tflops")):
        pct = _number(row, field)
        options.append((metric, pct / 100 * peak if pct is not None else None))
    for metric, value in options:
        if value is not None:
            if value <= 0:
                raise PlannerError(metric, f"must be > 0, got {value}")
            return metric, value
    return None


@dataclass(frozen=True)
class Case:
    """One usable row, ready to predict: its inputs and the published figure (`metric`)."""

    table_id: str
    model_name: str
    model: Model
    layout: ParallelLayout
    gpu: GPU
    published: float
    tp_overlap: float | None = None
    metric: str = "tflops_per_gpu"
    split: str = ""
    links: LinkSet | None = None

    @property
    def calibration(self) -> bool:
        """Whether the time model's constants were fitted on this row."""
        if self.split:
            return self.split == "calibration"
        return (self.table_id, self.model_name) in CALIBRATION_ROWS

    def predict(self, calibration: Calibration = CALIBRATION) -> float:
        """The predicted figure in the unit of `metric` (TFLOP/s per GPU, tokens/s per GPU or
        seconds per iteration)."""
        result = step_time(
            self.model,
            self.layout,
            self.gpu,
            tp_overlap=self.tp_overlap,
            calibration=calibration,
            links=self.links,
        )
        if self.metric == "iteration_time_s":
            return result.iteration_s
        if self.metric == "tokens_per_sec_per_gpu":
            return self.model.tokens_per_iteration / result.iteration_s / self.layout.gpus
        if self.metric == "mfu_tflops":
            return result.tflops_per_gpu
        return result.hardware_tflops_per_gpu

    def error(self, calibration: Calibration = CALIBRATION) -> float:
        """(predicted - published) / published as throughput (positive: predicted faster)."""
        predicted = self.predict(calibration)
        if self.metric == "iteration_time_s":
            return self.published / predicted - 1
        return (predicted - self.published) / self.published


def _rows(path: Path) -> Iterable[dict[str, str | None]]:
    with path.open(newline="", encoding="utf-8") as f:
        yield from csv.DictReader(f)


def load_cases(
    path: str | Path | None = None,
) -> tuple[list[Case], list[tuple[str, str, str]]]:
    """The usable rows of a published-runs CSV (default: the shared published_configs.csv) and
    the skipped ones (table_id, model, reason). Never raises for a row: a row the planner cannot
    express is skipped with the reason; raises `PlannerError` only when the file is missing."""
    csv_path = Path(path) if path is not None else default_csv_path()
    if not csv_path.is_file():
        raise PlannerError("path", f"{csv_path} not found (set TRAINYARD_SHARED)")
    cases: list[Case] = []
    skipped: list[tuple[str, str, str]] = []
    for line, raw in enumerate(_rows(csv_path), start=2):
        table, name = _cell(raw, "table_id") or f"line {line}", _cell(raw, "model")
        try:
            case = _case(raw, table, name)
        except PlannerError as exc:
            skipped.append((table, name, f"{exc.field}: {exc.message}"))
            continue
        if isinstance(case, str):
            skipped.append((table, name, case))
        else:
            cases.append(case)
    return cases, skipped


def _case(raw: Mapping[str, str | None], table: str, name: str) -> Case | str:
    inputs = row_inputs(raw)
    if isinstance(inputs, str):
        return inputs
    model, layout, device = inputs
    target = _target(raw, device)
    if target is None:
        return (
            "no published figure (iteration_time_s, tokens_per_sec_per_gpu, "
            "achieved_tflops_per_gpu, hfu_pct or mfu_pct)"
        )
    split = _cell(raw, "split").lower()
    if split not in ("", "calibration", "held_out"):
        raise PlannerError("split", f"must be calibration or held_out, got {split!r}")
    metric, published = target
    case = Case(table, name, model, layout, device, published, None, metric, split, _links(raw))
    case.predict()  # a layout the time model rejects is skipped here, with its reason
    return case


def evaluate(path: str | Path | None = None, calibration: Calibration = CALIBRATION) -> Evaluation:
    """Predict every usable row of one CSV (default: the shared published_configs.csv) and
    compare with the published figure (with the shipped constants unless `calibration`
    replaces them)."""
    return evaluate_paths([path] if path is not None else [default_csv_path()], calibration)


def evaluate_paths(
    paths: Sequence[str | Path], calibration: Calibration = CALIBRATION
) -> Evaluation:
    """`evaluate` over several files, one evaluation. Raises `PlannerError` when no file has a
    usable row."""
    cases: list[Case] = []
    skipped: list[tuple[str, str, str]] = []
    for path in paths:
        found, left = load_cases(path)
        cases += found
        skipped += left
    if not cases:
        names = ", ".join(str(p) for p in paths)
        raise PlannerError("path", f"{names}: no row with a published figure to evaluate")
    rows = [
        Row(
            case.table_id,
            case.model_name,
            case.layout.gpus,
            case.predict(calibration),
            case.published,
            case.error(calibration),
            case.calibration,
            case.metric,
        )
        for case in cases
    ]
    errors = [abs(r.error) for r in rows]
    return Evaluation(tuple(rows), tuple(skipped), statistics.median(errors), max(errors))
