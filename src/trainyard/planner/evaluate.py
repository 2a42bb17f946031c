"""Evaluation of the time model (`trainyard.planner.compute`) against published throughput.

This module owns reading published training runs from CSV (``<shared>/planner/
published_configs.csv``, sources in SOURCES.md next to it, and the package's own
`trainyard/planner/data/published_runs.csv`), predicting each row's published figure and
comparing, and the summary of the errors. What a row's cells mean (its columns, the `Model`,
`ParallelLayout` and `GPU` it describes, its published figure) is `trainyard.planner.rows`. It
only reads files. A row it cannot express is skipped with its reason; no row aborts the
evaluation.

Comparison conventions:

* A published TFLOP/s or HFU is compared with `StepTime.hardware_tflops_per_gpu` (executed
  FLOPs, the SC'21 convention, equal to the model-FLOP rate when nothing is recomputed); an MFU
  or a model TFLOP/s (`model_tflops_per_gpu`, "Model TFLOP/sec/GPU") with the model-FLOP rate;
  percentages over the row's peak. A time or token rate is compared with the
  predicted one. The error is always stated as throughput: (predicted - published)/published,
  positive when the prediction is faster.
* FLOPs are counted as the table counts them: the attention core's whole score matrix (SC'21's
  Eq. 3 and the Megatron-LM README tables, the planner's own convention), or its causal lower
  half where the row's `attention_flops` cell says causal (Megatron-LM's logged TFLOP/s since
  commit 8873b55d6a of 2025-03-06), or none of it where it says none (an MFU of 6 x
  parameters x tokens). The predicted rate is the planner's time over the FLOPs so counted;
  at 8K tokens the whole and the causal count differ by about 4 %, at 128K by 40 %.
* Rows in `compute.CALIBRATION_ROWS` or marked ``split=calibration`` are calibration rows; all
  others are held out.
* A held-out row whose model name, GPU count and published figure are a calibration row's
  (the README image of April 2021 prints SC'21's Table 1 again, without heads or
  the TP/PP split) is marked "=" and summarised apart: its figure is one the constants were
  fitted on, read another way, so it is no test of them.
* Rows whose TP/PP split is read from their ``model_parallel_size`` (`rows`) are marked
  "(split from mp)" and summarised apart as well as with the rest.
* Skipped with the reason: rows without a published figure, without the model's shape or the
  TP/PP split (nor a model-parallel size that gives it), rows whose layout the planner
  rejects (its error names the field), and rows whose shape gives a parameter count more than
  `PARAMS_TOLERANCE` times off the ``params_billion`` they state (a typo in the shape, which
  would otherwise be scored and move the statistics; the published rows are within 13 %).

error = (predicted - published) / published.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from trainyard.datafiles import shared_root
from trainyard.planner.cell_names import attention_flops_cell, names_adapters
from trainyard.planner.collectives import LinkSet
from trainyard.planner.compute import CALIBRATION, CALIBRATION_ROWS, Calibration, step_time
from trainyard.planner.errors import PlannerError
from trainyard.planner.hardware import GPU
from trainyard.planner.layout import ParallelLayout
from trainyard.planner.model import AttentionCount, Model
from trainyard.planner.row_files import columns_not_read, file_rows
from trainyard.planner.row_model import heads_assumed
from trainyard.planner.rows import (
    DEFAULT_PEAKS,
    SHARDING_NAMES,
    row_cell,
    row_inputs,
    row_links,
    row_target,
    split_from_model_parallel,
)
from trainyard.planner.work import flops_executed

# DEFAULT_PEAKS, SHARDING_NAMES and row_inputs live in `rows`; re-exported for existing callers.
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
    read_as: str = ""  # the layout the row was read as, defaults included (`read_as`)
    split_from_mp: bool = False  # tp / pp read from the row's model_parallel_size
    repeats: bool = False  # a held-out row with a calibration row's figure


def read_as(model: Model, layout: ParallelLayout) -> str:
    """How a row was read, in one short line: the parallel split, micro-batch, sharding,
    recompute, the layers whose activations are offloaded to the host (offN) and the switches
    that are on (sp, flash or flash-fa2, tp-overlap, fp8), so that a row's
    defaults (`trainyard.planner.rows`) are visible next to its error."""
    parts = [f"t{layout.tp}"]
    parts += [f"{k}{v}" for k, v in (("c", layout.cp), ("p", layout.pp)) if v > 1]
    if layout.first_stage_layers or layout.last_stage_layers:
        counts = layout.stage_layers(model)
        parts[-1] += f"({counts[0]}/{counts[-1]})"  # first / last stage's layers
    if layout.virtual_stages > 1:
        parts.append(f"v{layout.virtual_stages}")
    parts.append(f"d{layout.dp}")
    if model.is_moe:
        parts.append(f"e{layout.ep}/{model.experts}x{model.moe_topk}")  # ep / experts x top-k
    parts += [f"mb{layout.micro_batch}", f"zero{layout.zero}"]
    if layout.shard_group:
        parts[-1] += f"/hsdp{layout.shard_group}"
    parts.append(f"rc:{layout.recompute}")
    if layout.offload_layers:
        parts.append(f"off{layout.offload_layers}")
    switches = (
        (layout.sequence_parallel, "sp"),
        (layout.flash_attention, "flash" if layout.attention_kernel == "cudnn" else "flash-fa2"),
        (layout.tp_comm_overlap, "tp-overlap"),
        (not layout.p2p_split and layout.pp > 1 and layout.tp > 1, "whole-sends"),
        (model.precision == "fp8", "fp8"),
    )
    parts += [label for on, label in switches if on]
    return " ".join(parts)


@dataclass(frozen=True)
class Evaluation:
    """All evaluated rows, the skipped ones ((table_id, model, reason)), and error statistics."""

    rows: tuple[Row, ...]
    skipped: tuple[tuple[str, str, str], ...]
    median_abs_error: float
    max_abs_error: float
    not_read: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (file, its columns not read)

    def held_out(self) -> dict[str, float] | None:
        """Rows, median and max |error| of the rows the constants were not fitted on, less
        those that repeat a calibration row's figure (None if there are none)."""
        return _summary([r for r in self.rows if not (r.calibration or r.repeats)])

    def repeats(self) -> dict[str, float] | None:
        """Rows, median and max |error| of the held-out rows that repeat a calibration row's
        published figure (module docstring; None if none do)."""
        return _summary([r for r in self.rows if r.repeats])

    def calibration_rows(self) -> dict[str, float] | None:
        """Rows, median and max |error| of the calibration rows (None if there are none)."""
        return _summary([r for r in self.rows if r.calibration])

    def split_from_mp(self) -> dict[str, float] | None:
        """Rows, median and max |error| of the rows whose tensor / pipeline split was read
        from their model-parallel size (`rows.split_from_model_parallel`; None if none)."""
        return _summary([r for r in self.rows if r.split_from_mp])

    def table(self) -> str:
        """The rows as aligned text, one per line (calibration rows marked *), the skipped rows
        with their reasons, and the summary last."""
        lines = [
            f"{'table_id':<20}{'model':<16}{'gpus':>6}  {'metric':<10}{'pred':>9}{'pub':>9}"
            f"{'err':>8}  read as"
        ]
        for r in self.rows:
            lines.append(
                f"{r.table_id[:19]:<20}{r.model[:15]:<16}{r.gpus:>6}  {_METRIC_LABEL[r.metric]:<10}"
                f"{_figure(r.predicted):>9}{_figure(r.published):>9}{r.error:>+8.1%}"
                f" {'*' if r.calibration else '=' if r.repeats else ' '} {r.read_as}"
            )
        for table, model, reason in self.skipped:
            lines.append(f"skipped {_named(table, model)}: {reason}")
        lines += [_not_read_line(name, columns) for name, columns in self.not_read]
        lines.append(
            f"median |error| {self.median_abs_error:.1%}, max |error| {self.max_abs_error:.1%}, "
            f"{len(self.rows)} rows, {len(self.skipped)} skipped"
        )
        parts = (
            ("held out (not * or =)", self.held_out()),
            ("calibration (*)", self.calibration_rows()),
            ("repeating a calibration figure (=)", self.repeats()),
            ("split from model_parallel_size", self.split_from_mp()),
        )
        for label, part in parts:
            if part is not None:
                lines.append(
                    f"{label}: median |error| {part['median_abs_error']:.1%}, "
                    f"max |error| {part['max_abs_error']:.1%}, {part['rows']:.0f} rows"
                )
        return "\n".join(lines)


_METRIC_LABEL: Final = {
    "tflops_per_gpu": "TFLOP/s",
    "hfu_tflops": "HFU TF/s",
    "mfu_tflops": "model TF/s",  # an MFU or a model TFLOP/s: the model FLOPs' rate
    "tokens_per_sec_per_gpu": "tok/s/GPU",
    "iteration_time_s": "iter s",
}


_FLOP_METRICS: Final = ("tflops_per_gpu", "hfu_tflops", "mfu_tflops")
# A FLOP rate counted otherwise than the planner counts it, marked in `read as`.
_COUNT_LABEL: Final = {"full": "", "causal": " causal-flops", "none": " no-attention-flops"}


def _not_read_line(name: str, columns: Sequence[str]) -> str:
    """What a file holds that no row of it tells the planner (`row_files.columns_not_read`)."""
    return (
        f"{name}: columns not read (a misspelt name, or a setting the planner does not "
        f"model): {', '.join(columns)}"
    )


def _named(table: str, model: str) -> str:
    """A skipped row as its table and model, or a skipped file as its name; once when they
    are the same words (a Markdown heading gives both; an outside review saw it twice)."""
    return f"{table} {model}" if model and model != table else table


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
    split_from_mp: bool = False
    attention_flops: AttentionCount = "full"  # how the table counts the attention core
    heads_assumed: bool = False  # the row states no heads (`row_model.heads_assumed`)

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
            self.gpu.gpus_per_node,  # the NVLink domain: 8, or 72 for a GB200 NVL72 rack
            tp_overlap=self.tp_overlap,
            calibration=calibration,
            links=self.links,
        )
        if self.metric == "iteration_time_s":
            return result.iteration_s
        if self.metric == "tokens_per_sec_per_gpu":
            return self.model.tokens_per_iteration / result.iteration_s / self.layout.gpus
        model_rate = self.metric == "mfu_tflops"  # else the executed (hardware) FLOP rate
        rate = result.tflops_per_gpu if model_rate else result.hardware_tflops_per_gpu
        if self.attention_flops == "full":
            return rate
        # the FLOPs counted the table's way over the planner's count of the same work
        recompute = "none" if model_rate else self.layout.recompute
        counted = flops_executed(self.model, recompute, attention=self.attention_flops)
        return rate * counted / (result.model_flops if model_rate else result.flops)

    def error(self, calibration: Calibration = CALIBRATION) -> float:
        """(predicted - published) / published as throughput (positive: predicted faster)."""
        predicted = self.predict(calibration)
        if self.metric == "iteration_time_s":
            return self.published / predicted - 1
        return (predicted - self.published) / self.published


def load_cases(
    path: str | Path | None = None,
    not_read: list[tuple[str, tuple[str, ...]]] | None = None,
    catalogue: Mapping[str, GPU] | None = None,
) -> tuple[list[Case], list[tuple[str, str, str]]]:
    """The usable rows of a published-runs CSV (default: the shared published_configs.csv) and
    the skipped ones (table_id, model, reason). Never raises for a row: a row the planner cannot
    express is skipped with the reason, and so is a file that is not CSV text (a
    spreadsheet's own format, another encoding) or has no rows, as one entry named by the file;
    raises `PlannerError` only when the file is missing. `not_read` gets (file name, its
    columns the planner does not read), for a file that has any (`row_files.columns_not_read`);
    `catalogue`: the GPUs rows may name (`--gpu-file`'s, with the built-in ones)."""
    csv_path = Path(path) if path is not None else default_csv_path()
    if not csv_path.is_file():
        raise PlannerError("path", f"{csv_path} not found (set TRAINYARD_SHARED)")
    cases: list[Case] = []
    skipped: list[tuple[str, str, str]] = []
    unread = file_rows(csv_path)
    if isinstance(unread, str):
        return cases, [(csv_path.name, "", unread)]
    if not_read is not None and (columns := columns_not_read(unread)):
        not_read.append((csv_path.name, tuple(columns)))
    for line, raw in enumerate(unread, start=2):
        page_line = raw.get("_line")  # a Markdown page's rows name their line
        table, name = (
            row_cell(raw, "table_id") or f"line {page_line or line}",
            row_cell(raw, "model"),
        )
        where = f"{name} (line {page_line})".strip() if page_line is not None else name
        try:
            case = _case(raw, table, name, catalogue)
        except PlannerError as exc:
            skipped.append((table, where, f"{exc.field}: {exc.message}"))
            continue
        if isinstance(case, str):
            skipped.append((table, where, case))
        else:
            cases.append(case)
    return cases, skipped


def _case(
    raw: Mapping[str, str | None], table: str, name: str, catalogue: Mapping[str, GPU] | None
) -> Case | str:
    if names_adapters(row_cell(raw, "training")):
        return (
            "a LoRA / adapter fine-tuning run (training column): the planner prices training "
            "every weight (pre-training or full fine-tuning), not adapters on a frozen model"
        )
    inputs = row_inputs(raw, catalogue)
    if isinstance(inputs, str):
        return inputs
    model, layout, device = inputs
    if (mismatch := _params_mismatch(raw, model)) is not None:
        return mismatch
    target = row_target(raw, device)
    if target is None:
        return (
            "no published figure (iteration_time_s, tokens_per_sec_per_gpu, "
            "achieved_tflops_per_gpu, percent_of_peak, aggregate_pflops, hfu_pct, "
            "model_tflops_per_gpu or mfu_pct)"
        )
    split = row_cell(raw, "split").lower()
    if split not in ("", "calibration", "held_out"):
        raise PlannerError("split", f"must be calibration or held_out, got {split!r}")
    metric, published = target
    case = Case(
        table, name, model, layout, device, published, None, metric, split, row_links(raw),
        split_from_model_parallel(raw), attention_flops_cell(raw), heads_assumed(raw),
    )  # fmt: skip
    case.predict()  # a layout the time model rejects is skipped here, with its reason
    return case


_REASONS_SHOWN: Final = 5  # skipped rows named when none could be evaluated
PARAMS_TOLERANCE: Final = 1.5  # how far the shape's parameters may be from params_billion


def _params_mismatch(raw: Mapping[str, str | None], model: Model) -> str | None:
    """Why the row's shape and its stated size cannot both be right, or None."""
    try:
        stated = float(row_cell(raw, "params_billion"))
    except ValueError:
        return None  # not stated (or not a number: the shape alone is read)
    shaped = model.params / 1e9
    if not stated > 0 or 1 / PARAMS_TOLERANCE <= shaped / stated <= PARAMS_TOLERANCE:
        return None
    return (
        f"params_billion: the row says {stated:g}B parameters, and its shape (layers, "
        f"hidden size, heads, vocabulary, ...) gives {shaped:,.1f}B; one of them is wrong"
    )


def evaluate(path: str | Path | None = None, calibration: Calibration = CALIBRATION) -> Evaluation:
    """Predict every usable row of one CSV (default: the shared published_configs.csv) and
    compare with the published figure (with the shipped constants unless `calibration`
    replaces them)."""
    return evaluate_paths([path] if path is not None else [default_csv_path()], calibration)


def evaluate_paths(
    paths: Sequence[str | Path],
    calibration: Calibration = CALIBRATION,
    catalogue: Mapping[str, GPU] | None = None,
) -> Evaluation:
    """`evaluate` over several files, one evaluation (`catalogue`: the GPUs rows may name,
    the built-in ones by default). Raises `PlannerError` when no file has a usable row."""
    cases: list[Case] = []
    skipped: list[tuple[str, str, str]] = []
    not_read: list[tuple[str, tuple[str, ...]]] = []
    for path in paths:
        found, left = load_cases(path, not_read, catalogue)
        cases += found
        skipped += left
    if not cases:
        names = ", ".join(str(p) for p in paths)
        reasons = "".join(f"; {_named(t, m)}: {why}" for t, m, why in skipped[:_REASONS_SHOWN])
        unshown = len(skipped) - _REASONS_SHOWN
        more = f"; and {unshown} more" if unshown > 0 else ""
        unread = "".join(f"; {_not_read_line(name, cols)}" for name, cols in not_read)
        raise PlannerError(
            "path",
            f"{names}: no row could be evaluated ({len(skipped)} skipped){reasons}{more}{unread}",
        )
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
            read_as(case.model, case.layout)
            + _COUNT_LABEL[case.attention_flops if case.metric in _FLOP_METRICS else "full"]
            + (" (split from mp)" if case.split_from_mp else "")
            + (f" (heads assumed: {case.model.heads})" if case.heads_assumed else ""),
            case.split_from_mp,
        )
        for case in cases
    ]
    fitted = {_figure_of(r) for r in rows if r.calibration}
    rows = [
        dataclasses.replace(r, repeats=True) if not r.calibration and _figure_of(r) in fitted else r
        for r in rows
    ]
    errors = [abs(r.error) for r in rows]
    return Evaluation(
        tuple(rows), tuple(skipped), statistics.median(errors), max(errors), tuple(not_read)
    )


def _figure_of(row: Row) -> tuple[str, int, str, float]:
    """What makes two rows the same published figure (module docstring)."""
    return row.model, row.gpus, row.metric, row.published
