"""What a row of a published table means to the planner: the `Model`, `ParallelLayout` and `GPU`
a row of a published-runs CSV describes, the measured network it states, and the published
figure to compare with (`trainyard.planner.evaluate` predicts and compares).

This module owns the columns of those CSVs and the conventions for reading them; how a cell
may be spelled (other column names, units, kernel and sharding names) is
`trainyard.planner.cells`'s. It is pure: it reads cells of one row (a mapping of column to
text) and opens no file. A cell that is not of
its column's form raises `PlannerError` naming the column; a row the planner cannot express is
returned as the reason.

Columns. Required: num_layers, hidden_size, num_attention_heads, seq_len, vocab_size,
global_batch_size, gpu_type, tensor_parallel, pipeline_parallel, and one published figure; a
row whose model cell names a preset may leave out the shape, and one that leaves out only the
heads is read with heads 128 wide (`trainyard.planner.row_model`).
Optional, each with its default: num_kv_heads (= heads), ffn_hidden_size (4·hidden), mlp (gelu;
swiglu, geglu, relu, squared_relu), vocab_multiple (128), tied_embeddings (yes),
network_gbps_per_gpu (the catalogue's), context_parallel (1), num_gpus (num_nodes x
gpus_per_node when both are given, else tp·cp·pp·dp), data_parallel (GPUs/(tp·cp·pp)),
virtual_pipeline (a ``v=N`` in notes, else 1), first_stage_layers / last_stage_layers (even
stages), sharding (none; zero1, zero2, zero3, fsdp, hsdp; a ``ZeRO-3`` in notes means zero3),
shard_group (hsdp's shard group; when not given, the data-parallel ranks of one host, as
PyTorch's HYBRID_SHARD: its GPUs over tp, as far as they divide dp x cp), precision (bf16;
fp16, fp8), micro_batch_size (the global batch over dp x gradient_accumulation_steps when those
are given; else 1, or for a fully sharded run without pipeline stages its local batch or the
largest part of it that fits, `row_split.fsdp_micro_batch`), gpu_peak_tflops (the GPU's),
activation_recompute, cpu_offload_layers (0; the layers whose activations go to host memory,
Megatron-Core's --cpu-offloading-num-layers),
flash_attention (yes/no, or the kernel: FlashAttention-2, SDPA or xFormers, of FlashAttention-2's
generation, cuDNN, FlashAttention-3 or TE, of cuDNN's, eager), tp_comm_overlap,
scatter_gather (yes/no: pipeline sends split over the TP ranks; `row_era.p2p_split`),
sequence_parallel (yes/no, enabled/disabled), split (calibration or held_out), attention_flops
(full; causal, none: how the table counts the attention core in its FLOP figures, read by
`trainyard.planner.evaluate`). Published
figures, in the order of preference: iteration_time_s (or iteration_time_ms),
tokens_per_sec_per_gpu (or the run's tokens_per_sec or samples_per_sec over its GPUs; these are
free of any FLOP-counting convention), achieved_tflops_per_gpu (the executed FLOPs' rate,
recompute counted: SC'21's convention), percent_of_peak (SC'21's "percent of theoretical peak":
that rate over the peak), aggregate_pflops (over num_gpus), hfu_pct, model_tflops_per_gpu (the
model FLOPs' rate, recompute not counted: Megatron-LM's logged TFLOP/s, "Model TFLOP/sec/GPU" in
NeMo's and Megatron-Bridge's tables), mfu_pct. A number may repeat its column's unit ("1.5 s",
"3,200 tok/s", "430 TFLOP/s", "38%"); seq_len and num_gpus may be written in K of 1,024 ("8K",
"16K"); any other suffix, and a cell "-", "n/a" or "?" (unstated), is no number. A percentage of
at most 1 without a % sign is a fraction ("0.38": 38 %). The figures are also read under the
names tables give them (tflop/s/gpu, model_tflop/s/gpu, tokens/sec/gpu, step_time_s, mfu, hfu:
`cells._COLUMN_ALIASES`).

Row conventions (all documented here, none guessed per row). "The pre-2023 tables" are the
shared file's old Megatron-LM tables and any row whose year (`run_year`: a year or date
cell, else the latest year its source and notes cite: arXiv id, date, "(2022)") is before 2023;
a row that leaves degrees out gets its split from `trainyard.planner.row_split`.

* GPU: the catalogue entry whose name appears in `gpu_type` (V100, A100 40/80GB, A800, H100
  SXM/PCIe, H800, H200 (also GH200), B200, GB200 (an NVL72 rack: one NVLink domain of 72),
  B300, GB300 (NVL72 as GB200), L40S), with the dense peak from `gpu_peak_tflops` when given
  (an fp8 row's stated peak within 10 % of the GPU's fp8 peak is that one; both peaks scale
  together); percentages are of the stated peak.
* Uneven stages: `first_stage_layers` / `last_stage_layers`; when neither is given and the
  layers do not split into pp x v chunks, one layer fewer on the first and the last stage if
  counting the embedding and the loss as a layer each makes them split (Megatron-Core's
  --account-for-embedding/loss-in-pipeline-split), else every chunk as full as the split
  allows but the model's first and last, the first up to that and the last the rest
  (Megatron-Bridge's DeepSeek-V3 layouts, `pipeline_split.end_chunk_stages`), else the
  layout's error.
* Interleaving: `virtual_pipeline`, or ``v=N`` in the notes, else none (v = 1). (Choosing the
  fastest factor for rows that do not state one was tried: README_2024_H100's pipelined rows
  then came out 13-20 % too fast, so they evidently ran without it.)
* Model-parallel size (``model_parallel_size``, also ``mp``): a row that gives tp x pp
  without one or both degrees. A stated degree fixes the other; stating neither, tensor
  parallelism takes the GPUs of a node that divide the size (at most 8) and pipeline
  parallelism the rest: SC'21's rule (Narayanan et al. §3.3, takeaway 1) and how its Table 1
  ran (the 2021 Megatron-LM README tables give only this size for the same and earlier
  runs). A size that disagrees with stated degrees is an error naming the column.
* Sharding: the `sharding` cell; else ZeRO-3 when the notes say so, none for the pre-2023
  tables, and for every other table with data parallelism ZeRO-1, the distributed optimizer
  that NeMo (its default optimizer, distributed_fused_adam), Megatron-Bridge and Megatron-Core
  runs use. It costs the time of plain data parallelism here (the same volume moved), so it
  changes only what fits: without it a large run would be read as recomputing to fit
  (Nemotron-4 340B on 1,536 H100s, not among the rows, came out 29 % slow that way).
* A missing micro-batch is taken as 1 (SC21_T1 and the 2020/2021 README tables do not give it).
* Recompute: the `activation_recompute` cell when given (none / selective / full, or op /
  selective_op for torchtitan's per-operator checkpointing); otherwise "full" for the
  pre-2023 Megatron-LM tables of the shared file (SC'21 counts the recomputed forward, Eq. 3
  with 96), "none" for a row that offloads activations (Megatron-Core refuses recompute with
  it) and for README_2024_H100 (Megatron-Core default; its TFLOP/s / peak equals
  the stated MFU). A row of any other table that does not say is read as a run that did
  what a practitioner does (`infer_recompute`): when it gives both hfu_pct and mfu_pct, the
  mode whose executed / model FLOPs ratio is nearest theirs (full recompute runs 4/3 of the
  model's FLOPs); otherwise the lightest mode that fits the GPU's memory (none, then
  selective, then full), since the run did fit.
* Attention: the `flash_attention` cell; else materialised scores for the pre-2023 tables and
  fused (flash) for every other table (Megatron-Core with Transformer Engine, PyTorch's SDPA
  and every stack since 2023 fuse it).
* TP overlap: the `tp_comm_overlap` cell, or ``--tp-comm-overlap`` in the notes; it implies
  sequence parallelism, as in Megatron-Core. Sequence parallelism: the `sequence_parallel`
  cell; else on with TP overlap, when the recompute cell says so, and for every table but the
  pre-2023 ones (Megatron-Core, NeMo and torchtitan run tensor parallelism with it).
* HFU and MFU percentages become TFLOP/s per GPU over the row's peak.
* Mixture of experts: ``num_experts`` (above 1), ``moe_topk`` (2), ``moe_ffn_hidden_size``
  (ffn_hidden_size), ``moe_shared_ffn_hidden_size`` (none) and ``expert_parallel`` (1);
  ``head_dim`` when the heads' width is not hidden / heads (Qwen3, GPT-OSS); sliding-window
  attention: ``window_size`` (tokens) and ``full_attention_every`` (every N-th layer attends
  to the whole sequence; GPT-OSS: 128 and 2); latent attention (DeepSeek): ``kv_lora_rank``,
  ``q_lora_rank``, ``rope_dim``, ``v_head_dim`` with ``head_dim`` the query-key head width
  without its rotary part; ``dense_layers``, the first layers of an MoE model that are dense
  MLPs of ffn_hidden_size. Each of these columns is also read under its
  Megatron-LM or Hugging Face name (``moe_router_topk``, ``num_experts_per_tok``,
  ``expert_model_parallel_size``, ``kv_channels``, ``sliding_window``, ...;
  `cells._COLUMN_ALIASES`).
* Not expressible (returned as the reason): rows without the model's shape or the TP/PP split
  (nor a model-parallel size that gives it), the 2021 ZeRO-3 baseline without model
  parallelism, GPU counts that do not match the split, and published figures that cannot be
  (not above 0, or TFLOP/s above the GPU's peak: `row_target`).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Final

from trainyard.planner.cell_names import (
    SHARDING_NAMES,
    attention_kernel_cell,
    flash_cell,
    fsdp_cell,
    gpu_name,
    precision_cell,
    sharding_cell,
)
from trainyard.planner.cells import (
    FALSE,
    TRUE,
    count,
    first_named,
    flag,
    integer,
    number,
    percent,
    row_cell,
)
from trainyard.planner.collectives import LinkSet, ib_link
from trainyard.planner.compute import step_time
from trainyard.planner.errors import PlannerError
from trainyard.planner.hardware import CATALOGUE, GPU
from trainyard.planner.layout import ParallelLayout, Recompute
from trainyard.planner.memory import memory_per_gpu
from trainyard.planner.model import Model
from trainyard.planner.pipeline_split import end_chunk_stages, uneven_stages
from trainyard.planner.row_era import legacy, p2p_split, run_year
from trainyard.planner.row_model import row_model
from trainyard.planner.row_split import (
    accumulated_micro_batch,
    fsdp_micro_batch,
    missing_split,
    split_from_model_parallel,
    stated_gpu_count,
)
from trainyard.planner.search import budgets, fewest_offload_layers
from trainyard.planner.work import flops_executed

__all__ = [
    "DEFAULT_PEAKS",
    "SHARDING_NAMES",
    "infer_recompute",
    "row_cell",
    "row_inputs",
    "row_links",
    "row_target",
    "run_year",
    "split_from_model_parallel",
]

# Dense 16-bit peak TFLOP/s by GPU family (a row's GPU peak itself comes from the catalogue or
# its `gpu_peak_tflops` cell).
DEFAULT_PEAKS: Final[dict[str, float]] = {"A100": 312.0, "H100": 989.0, "V100": 125.0}
_NO_RECOMPUTE_TABLES: Final = ("README_2024_H100",)
_SAME_PEAK: Final = 0.10  # a stated peak this close to a catalogue peak names that peak


def _gpu(row: Mapping[str, str | None], catalogue: Mapping[str, GPU] | None = None) -> GPU:
    """The row's GPU from the catalogue (`catalogue`: the built-in one with a user's GPUs),
    its peaks scaled to the stated `gpu_peak_tflops`: the dense 16-bit peak, or for an fp8 row
    whose stated peak is the GPU's fp8 one (an MFU taken against the fp8 peak, 1,979 on an
    H100) the fp8 peak, the other following in proportion."""
    known = CATALOGUE if catalogue is None else catalogue
    device = known[gpu_name(row, known)]
    peak = _stated_peak(row)
    if peak is None:
        return device
    bf16, fp8 = device.bf16_tflops, device.fp8_tflops
    scale = peak / bf16
    if precision_cell(row) == "fp8" and fp8 > 0 and abs(peak / fp8 - 1) <= _SAME_PEAK:
        scale = peak / fp8
    return dataclasses.replace(device, bf16_tflops=bf16 * scale, fp8_tflops=fp8 * scale)


def _stated_peak(row: Mapping[str, str | None]) -> float | None:
    """The `gpu_peak_tflops` cell: the peak a table's percentages are of (None when empty)."""
    peak = number(row, "gpu_peak_tflops")
    if peak is not None and peak <= 0:
        raise PlannerError("gpu_peak_tflops", f"must be > 0, got {peak}")
    return peak


# Words that name a recompute mode inside a longer cell; a cell naming one mode reads as it.
_RECOMPUTE_WORDS: Final[tuple[tuple[tuple[str, ...], Recompute], ...]] = (
    (("layernorm", "norms", "moe_act"), "norms"),
    (("selective",), "selective"),
    (("full", "uniform", "block"), "full"),
    (("none",), "none"),
)


def _recompute(row: Mapping[str, str | None]) -> Recompute | None:
    """The row's recompute mode, or None when it does not say and `infer_recompute` decides."""
    cell = row_cell(row, "activation_recompute").lower()
    if cell.replace("-", "_").replace(" ", "_") in ("op", "selective_op", "sac_op"):
        return "op"  # torchtitan's per-operator selective checkpointing
    if cell.startswith(("norms", "layernorm", "moe_act")):  # Megatron-Core's modules
        return "norms"
    if cell.startswith(("selective", "sel")):
        return "selective"
    if cell.startswith(("full", "block", "uniform")) or cell in TRUE:
        return "full"  # Megatron's full-recompute methods; a bare "yes" checkpoints layers
    if cell.startswith(("none", "no")) or cell in FALSE:
        return "none"
    named = first_named(cell, _RECOMPUTE_WORDS)  # "activation checkpointing: full"
    if len(named) == 1:
        return named[0]
    if cell:
        raise PlannerError(
            "activation_recompute",
            f"must be none, norms (the layernorm / moe_act modules), selective, full or op, "
            f"got {cell!r}",
        )
    if row_cell(row, "table_id") in _NO_RECOMPUTE_TABLES:
        return "none"
    return "full" if legacy(row) else None


def infer_recompute(
    row: Mapping[str, str | None], model: Model, layout: ParallelLayout, gpu: GPU
) -> Recompute:
    """The recompute mode of a row that does not state one (see the module docstring): from
    its HFU / MFU ratio when it gives both, else the lightest mode that fits `gpu`."""
    hfu, mfu = percent(row, "hfu_pct"), percent(row, "mfu_pct")
    modes: tuple[Recompute, ...] = ("none", "norms", "selective", "full")
    if hfu is not None and mfu is not None and hfu > 0 and mfu > 0:
        base = model.flops_per_iteration(recompute=False)
        return min(modes, key=lambda mode: abs(flops_executed(model, mode) / base - hfu / mfu))
    budget = budgets(gpu)[0]
    for mode in modes:
        if memory_per_gpu(model, dataclasses.replace(layout, recompute=mode)).total <= budget:
            return mode
    return "full"


def _sharding(row: Mapping[str, str | None]) -> tuple[int, bool]:
    """The `sharding` cell's (ZeRO stage, hybrid); without one, ZeRO-3 when an `fsdp` column
    gives a size (hybrid when `_shard_group` finds it smaller than the data-parallel ranks) or
    the notes say so (the 2021 tables), else none."""
    stated = sharding_cell(row)
    if stated is not None:
        return stated
    if fsdp_cell(row) is not None:
        return 3, False
    return (3, False) if "zero-3" in row_cell(row, "notes").lower() else (0, False)


def _shard_group(row: Mapping[str, str | None], hybrid: bool, ranks: int, per_host: int) -> int:
    """The ranks a hybrid-sharded row shards over, or the `fsdp` column's size when it is below
    the `ranks` the states could shard over; 0: not hybrid. A hybrid row that gives no
    `shard_group` shards within a host and replicates across hosts, as PyTorch's HYBRID_SHARD
    does by default: over the `per_host` data-parallel ranks one host holds (its GPUs over
    the tensor-parallel degree), as far as they divide `ranks`."""
    if hybrid:
        return count(row, "shard_group") or math.gcd(ranks, per_host)
    size = fsdp_cell(row)
    return size if size and size < ranks else 0


def row_inputs(
    row: Mapping[str, str | None], catalogue: Mapping[str, GPU] | None = None
) -> tuple[Model, ParallelLayout, GPU] | str:
    """The `Model`, `ParallelLayout` and `GPU` a CSV row describes, or why it cannot be
    evaluated (`catalogue`: GPUs to find its GPU among, the built-in ones by default). Raises
    `PlannerError` for a cell that is not of its column's form."""
    model = row_model(row)
    if isinstance(model, str):
        return model
    if "zero-3 (no model parallelism)" in row_cell(row, "notes").lower():
        return (
            "DeepSpeed ZeRO-3 baseline of 2021 (SC21_T2): ~66 s per iteration for 175B at 768 "
            "and 1536 GPUs alike, bound by that version's parameter gathering, an order of "
            "magnitude below NCCL's all-gather rate; not a property of the layout"
        )
    tp = count(row, "tensor_parallel")
    pp = count(row, "pipeline_parallel")
    cp = count(row, "context_parallel") or 1
    stated_dp = count(row, "data_parallel")
    stated_gpus = stated_gpu_count(row)
    gpu = _gpu(row, catalogue)
    zero, hybrid = _sharding(row)
    if tp is None or pp is None:
        node = gpu.gpus_per_node
        split = missing_split(row, tp, pp, cp, stated_dp, stated_gpus, node, zero >= 2)
        if split is None:
            return "no tensor_parallel / pipeline_parallel split"
        tp, pp, stated_dp = split
    mp = count(row, "model_parallel_size")
    if mp is not None and tp * pp != mp:
        raise PlannerError(
            "model_parallel_size",
            f"must be tensor_parallel x pipeline_parallel ({tp * pp}), got {mp}",
        )
    gpus = stated_gpus or tp * pp * cp * (stated_dp or 1)
    dp = stated_dp or gpus // (tp * pp * cp)
    if tp * pp * cp * dp != gpus:
        return f"tp x cp x pp x dp = {tp * cp * pp * dp} but num_gpus = {gpus}"
    notes = row_cell(row, "notes")
    found = re.search(r"\bv=(\d+)", notes)
    v = integer(row, "virtual_pipeline")
    if v is not None and v < 0:
        raise PlannerError(
            "virtual_pipeline", f"must be a whole number >= 0 (0 or 1: none), got {v}"
        )
    v = v or (int(found.group(1)) if found and pp > 1 else 0)
    if sharding_cell(row) is None and zero == 0 and dp * cp > 1 and not legacy(row):
        zero = 1  # Megatron-Core's distributed optimizer (module docstring)
    overlap = flag(row, "tp_comm_overlap")
    if overlap is None:
        overlap = "--tp-comm-overlap" in notes
    overlap = overlap and tp > 1
    flash = flash_cell(row)
    if flash is None:
        flash = not legacy(row)
    recompute_cell = row_cell(row, "activation_recompute")
    stated = _recompute(row)
    first, last = _end_stages(row, model, pp, v or 1)
    stated_mb = count(row, "micro_batch_size") or accumulated_micro_batch(row, model, dp)
    if stated_mb is None and model.global_batch % dp:  # (the advice would name a micro-batch)
        return (
            f"global_batch_size: {model.global_batch} sequences do not split over the run's "
            f"{dp} data-parallel replicas ({gpus} GPUs over tp x cp x pp = {tp * cp * pp}); "
            "one of the row's figures is not the run's"
        )
    layout = ParallelLayout(
        tp=tp,
        pp=pp,
        dp=dp,
        cp=cp,
        micro_batch=stated_mb or 1,
        zero=zero,
        shard_group=_shard_group(row, hybrid, dp * cp, max(1, gpu.host_gpus // tp)),
        recompute=stated or "none",
        virtual_stages=v or 1,
        sequence_parallel=tp > 1 and _sequence_parallel(row, overlap, recompute_cell),
        flash_attention=flash,
        attention_kernel=attention_kernel_cell(row),
        tp_comm_overlap=overlap,
        first_stage_layers=first,
        last_stage_layers=last,
        ep=count(row, "expert_parallel") or 1,
        offload_layers=_offload_layers(row),
        p2p_split=p2p_split(row),
    )
    layout.check(model)
    if stated_mb is None and layout.zero == 3 and pp == 1:
        layout = dataclasses.replace(layout, micro_batch=fsdp_micro_batch(model, layout, gpu))
    if stated is None and not layout.offload_layers:
        layout = dataclasses.replace(layout, recompute=infer_recompute(row, model, layout, gpu))
        layout = _offload_if_faster(model, layout, gpu)
    return model, layout, gpu


def _offload_if_faster(model: Model, layout: ParallelLayout, gpu: GPU) -> ParallelLayout:
    """`layout`, or, when it had to recompute layers to fit, the same without recompute and
    with the fewest layers' activations offloaded to host memory that fit, if that is faster
    (`search.fewest_offload_layers`: no pipeline stages, a GPU whose host link is known).
    Megatron-Bridge's Llama 3 70B runs on GB200 and GB300 offload 40 and 20 layers rather
    than recompute; a row that does not say is read with the faster of the two."""
    if layout.recompute not in ("selective", "full"):
        return layout
    found = fewest_offload_layers(
        model, dataclasses.replace(layout, recompute="none"), *budgets(gpu)
    )
    if found is None:
        return layout
    offloaded = found[0]
    nodes = gpu.gpus_per_node
    faster = step_time(model, offloaded, gpu, nodes).iteration_s
    return offloaded if faster < step_time(model, layout, gpu, nodes).iteration_s else layout


def _end_stages(row: Mapping[str, str | None], model: Model, pp: int, v: int) -> tuple[int, int]:
    """The first and last pipeline stages' layers: as stated, else (0, 0) (even stages) when
    the layers split into pp x v chunks, else one layer fewer on each end stage when the
    embedding and the loss counted as a layer each make them split (`pipeline_split.uneven_stages`:
    Megatron's --account-for-embedding/loss-in-pipeline-split, as Megatron-Bridge runs Llama
    3.1 405B's 126 layers on 8 x 8 chunks), else every chunk but the model's first and last
    as full as the split allows, the first up to it and the last the rest
    (`pipeline_split.end_chunk_stages`, as Megatron-Bridge lays out DeepSeek-V3's 61 layers)."""
    first = integer(row, "first_stage_layers") or 0
    last = integer(row, "last_stage_layers") or 0
    if first or last or model.layers % (pp * v) == 0:
        return first, last
    ends = uneven_stages(model.layers, pp) if (model.layers + 2) % (pp * v) == 0 else None
    if ends:
        return ends[0], ends[0]
    return end_chunk_stages(model.layers, pp, v) or (0, 0)


def _offload_layers(row: Mapping[str, str | None]) -> int:
    """The `cpu_offload_layers` cell (0 when empty)."""
    layers = integer(row, "cpu_offload_layers") or 0
    if layers < 0:
        raise PlannerError("cpu_offload_layers", f"must be a whole number >= 0, got {layers}")
    return layers


def _sequence_parallel(row: Mapping[str, str | None], overlap: bool, recompute: str) -> bool:
    """The `sequence_parallel` cell; else on with TP overlap (which needs it) or when the
    recompute cell names it, and by default for every table but the pre-2023 ones
    (Megatron-Core, NeMo and torchtitan run tensor parallelism with it)."""
    stated = flag(row, "sequence_parallel")
    if stated is not None:
        return stated
    return overlap or "sequence parallel" in recompute or not legacy(row)


def row_links(row: Mapping[str, str | None]) -> LinkSet | None:
    """The network a row states (`network_gbps_per_gpu`), or None for the catalogue's."""
    gbps = number(row, "network_gbps_per_gpu")
    if gbps is None:
        return None
    if gbps <= 0:
        raise PlannerError("network_gbps_per_gpu", f"must be > 0, got {gbps}")
    return LinkSet(inter=ib_link(gbps), source="network_gbps_per_gpu")


def row_target(row: Mapping[str, str | None], gpu: GPU) -> tuple[str, float] | None:
    """The published figure to compare with: (metric, value), or None."""
    seconds, time_column = number(row, "iteration_time_s"), "iteration_time_s"
    if seconds is None:
        ms, time_column = number(row, "iteration_time_ms"), "iteration_time_ms"
        seconds = ms / 1000 if ms is not None else None
    peak = _stated_peak(row) or gpu.bf16_tflops  # the peak the table's percentages are of
    share, tokens = percent(row, "percent_of_peak"), number(row, "tokens_per_sec_per_gpu")
    gpus, aggregate = stated_gpu_count(row), number(row, "aggregate_pflops")
    if tokens is None and gpus:  # the whole run's tokens, or sequences, per second
        total, samples = number(row, "tokens_per_sec"), number(row, "samples_per_sec")
        seq = count(row, "seq_len")
        if total is None and samples is not None and seq:
            total = samples * seq
        tokens = total / gpus if total is not None else None
    pooled = aggregate * 1000 / gpus if aggregate is not None and gpus else None
    options: list[tuple[str, str, float | None]] = [  # (column read, metric, value)
        (time_column, "iteration_time_s", seconds),
        ("tokens_per_sec_per_gpu", "tokens_per_sec_per_gpu", tokens),
        ("achieved_tflops_per_gpu", "tflops_per_gpu", number(row, "achieved_tflops_per_gpu")),
        ("percent_of_peak", "tflops_per_gpu", share / 100 * peak if share is not None else None),
        ("aggregate_pflops", "tflops_per_gpu", pooled),
    ]
    for column, metric in (("hfu_pct", "hfu_tflops"), ("mfu_pct", "mfu_tflops")):
        pct = percent(row, column)
        options.append((column, metric, pct / 100 * peak if pct is not None else None))
        if column == "hfu_pct":  # a model-FLOP rate reads as an MFU does, before one
            model_rate = number(row, "model_tflops_per_gpu")
            options.append(("model_tflops_per_gpu", "mfu_tflops", model_rate))
    top = max(peak, gpu.bf16_tflops, gpu.fp8_tflops)  # no GPU computes faster than its peak
    for column, metric, value in options:
        if value is None:
            continue
        cell = row_cell(row, column)  # quoted as written (an outside review: not a derived one)
        if value <= 0:
            raise PlannerError(column, f"must be > 0, got {cell!r}")
        if "tflops" in metric and value > top:  # (an MFU of 143 % was scored)
            which = "fp8" if top == gpu.fp8_tflops > max(peak, gpu.bf16_tflops) else ""
            above = (
                f"{value:,.1f} TFLOP/s per GPU, above the GPU's highest peak ({top:,.0f}"
                f"{f', its {which} peak' if which else ''})"
            )
            raise PlannerError(column, f"{cell!r} is {above}; check it and gpu_peak_tflops")
        return metric, value
    return None
