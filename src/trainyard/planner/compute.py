"""Time per training iteration of a layout: compute, tensor-parallel communication, pipeline
bubble and the exposed part of the data-parallel gradient reduction.

This module owns the planner's time model (`step_time` and its `StepTime` breakdown). It is pure
arithmetic over `Model`, `ParallelLayout` and `GPU`, with collective times from
`trainyard.planner.collectives`. Times are seconds.

Terms (n = GPUs, p = pp, t = tp, d = dp, m = micro-batches per pipeline, v = virtual stages,
b = micro_batch, s = seq_len, h = hidden, l = layers):

* FLOPs per iteration F: Narayanan et al. SC'21 (arXiv:2104.04473) Eq. 3 through
  `Model.flops_per_iteration`, factor 96 with full recompute and 72 without. Selective recompute
  (Korthikanti et al. arXiv:2205.05198 §5) re-runs only the attention core, i.e. the
  s/(6h) term of Eq. 3: F_sel = F_72 + (F_96 - F_72)·(s/(6h)) / (1 + s/(6h) + V/(16lh)).
* compute, a roofline of two parts: the layer GEMMs run F / (n · peak · g) and the memory-bound
  kernels (norms, dropout, residual adds, GeLU, softmax, the fp32 cross-entropy) move bytes at
  the GPU's memory bandwidth. `efficiency` reports the combined fraction of peak
  F / (n · peak · compute).
  - g = gemm_max · h/(h + gemm_half · (peak/REFERENCE_TFLOPS)^γ), γ = 1 (`gemm_efficiency`,
    constants in `Calibration`): GEMMs of a
    small hidden size do not fill the GPU, and a faster GPU needs larger GEMMs to fill it
    (more SMs, faster tensor cores per SM), so the half-efficiency size grows with the peak.
  - bytes (`memory_bound_bytes`): per layer and micro-batch, the activation bytes a layer
    stores when nothing is recomputed (Korthikanti et al. Table 2, through
    `memory.layer_activation_bytes`: 34·s·b·h + 5·a·s²·b, split by tp and sequence parallelism,
    without the s² term under flash attention) are touched `traffic` times in each of 3 passes
    (forward; backward, twice the forward) and in a 4th when the forward is recomputed (only
    the attention term under selective recompute), for the l/p layers of each micro-batch; plus
    the fp32 logits, 4·s·b·V/t bytes (Korthikanti §4.3), in 3 passes. The logits are charged to
    every pipeline stage: the last stage runs them and sets the pipeline's pace.
* tensor parallel (Shoeybi et al. arXiv:1909.08053 §3, Fig. 4): per layer and micro-batch two
  all-reduces of b·s·h·2 bytes forward and two backward (two more when the forward is recomputed
  in full; selective recompute re-runs no communication). Sequence parallelism replaces each by a
  reduce-scatter plus all-gather of the same volume, so it is costed the same. Each all-reduce
  is timed with `collectives.best` over the t ranks (NVLink inside one node). A GPU runs
  l/p layers for each of its m micro-batches.
* pipeline bubble, SC'21 §2.2: (p-1)/m of the ideal (compute + TP) time with 1F1B, divided by v
  when interleaved. Point-to-point activation sends between stages are not modelled.
* data parallel: an all-reduce of the stage's gradients (params/(t·p) per GPU, 2 bytes each or
  4 with `fp32_grads`) over the d ranks of a data-parallel group, which sit on different nodes
  once t·p fills a node. ZeRO-3 moves 1.5x that volume (Rajbhandari et al. arXiv:1910.02054
  §7.2.2: reduce-scatter of gradients plus an all-gather of parameters in forward and
  backward). A fraction DP_OVERLAP of it is hidden behind the backward pass (Megatron's
  overlapped gradient reduction; Li et al. "PyTorch Distributed", VLDB'20, §3.2.3 buckets);
  the rest adds to the iteration. With `tp_overlap` (Megatron-Core --tp-comm-overlap) the same
  applies to the tensor-parallel all-reduces.

Not modelled: optimizer step, data loading, kernel-launch gaps (they live in the fitted
constants), pipeline p2p, the causal mask's skipped work in flash attention.

Calibration (`trainyard.planner.calibrate`; `bench/planner_calibrate.py` prints the fit as
JSON): gemm_max, gemm_half, traffic and γ (`peak_exponent`, in {0, 0.5, 1, 1.5, 2}) by a grid
search minimising median + 0.2·max of the relative error of TFLOP/s over the 16 rows of
``<shared>/planner/published_configs.csv`` named in `CALIBRATION_ROWS`: the ten SC21_T1 rows and
the four README_2020_A100_MP rows (A100), plus the smallest configuration of each other GPU,
README_2020_V100 1.16B on one V100 and README_2024_H100 1.7B on 48 H100 (without them the GPU
dependence of the GEMM term cannot be fitted; γ = 1 won). The other 22 rows are held out and
only evaluated (`trainyard.planner.evaluate`). DP_OVERLAP (0.5) comes from an earlier fit on the
A100 rows (0.3-0.8 fit within 1 point). Earlier forms, for the record: one GPU-independent η =
0.62·h/(h + 700), fitted on the 14 A100 rows, was 21 % low on the V100 row (`trainyard plan
--evaluate` at commit 7881203); scaling gemm_half by the GPU's peak/bandwidth balance instead of
its peak was tried in an ad-hoc script, not kept, and fitted the 16 rows worse. This form was
chosen after seeing the held-out errors of the earlier ones, so the held-out rows are not a
fully blind test.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Final

from trainyard.planner.collectives import Link, Topology, best, ib_link
from trainyard.planner.errors import PlannerError
from trainyard.planner.hardware import GPU
from trainyard.planner.layout import ParallelLayout
from trainyard.planner.memory import layer_activation_bytes
from trainyard.planner.model import Model

__all__ = [
    "CALIBRATION",
    "CALIBRATION_ROWS",
    "DP_OVERLAP",
    "NVLINK_EFFICIENCY",
    "REFERENCE_TFLOPS",
    "TP_COMM_OVERLAP",
    "Calibration",
    "StepTime",
    "flops_executed",
    "gemm_efficiency",
    "memory_bound_bytes",
    "step_time",
]

# The peak at which `Calibration.gemm_half` is stated (A100, 16-bit dense).
REFERENCE_TFLOPS: Final = 312.0
# (table_id, model) of the published rows the constants were fitted on (see the docstring).
CALIBRATION_ROWS: Final[frozenset[tuple[str, str]]] = frozenset(
    [("SC21_T1", f"GPT-{size}B") for size in
     ("1.7", "3.6", "7.5", "18.4", "39.1", "76.1", "145.6", "310.1", "529.6", "1008.0")]
    + [("README_2020_A100_MP", f"GPT2-{size}B") for size in ("1.16", "2.03", "4.24", "8.67")]
    + [("README_2020_V100", "GPT2-1.16B"), ("README_2024_H100", "1.7B")]
)  # fmt: skip
# Share of the gradient reduction hidden behind backward (Megatron overlap_grad_reduce).
DP_OVERLAP: Final = 0.5
# Share of tensor-parallel all-reduces hidden when --tp-comm-overlap is on; set equal to
# DP_OVERLAP a priori (not fitted: no calibration row uses it).
TP_COMM_OVERLAP: Final = 0.5
# NCCL's modelled NVLink bandwidth over the datasheet rate: 240/300 GB/s on A100
# (collectives.A100_NVLINK); applied to `GPU.nvlink_gb_s` for every GPU.
NVLINK_EFFICIENCY: Final = 0.8


@dataclass(frozen=True)
class Calibration:
    """The fitted constants of the compute term (see the module docstring for the fit).

    `gemm_max`: fraction of the dense peak that large layer GEMMs reach. `gemm_half`: hidden
    size at which they reach half of it on a GPU of REFERENCE_TFLOPS, scaled by
    (peak/REFERENCE_TFLOPS)^`peak_exponent` for other GPUs. `traffic`: memory traffic of the
    memory-bound kernels per stored activation byte and pass.
    """

    gemm_max: float = 0.65
    gemm_half: float = 225.0
    traffic: float = 1.7
    peak_exponent: float = 1.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.gemm_max) and 0 < self.gemm_max <= 1):
            raise PlannerError("gemm_max", f"must be in (0, 1], got {self.gemm_max}")
        for name in ("gemm_half", "traffic", "peak_exponent"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise PlannerError(name, f"must be >= 0, got {value}")


CALIBRATION: Final = Calibration()


@dataclass(frozen=True)
class StepTime:
    """One iteration's time and its parts (seconds), with throughput and MFU.

    `iteration_s` = `compute_s` + `tp_comm_s` + `bubble_s` + `dp_exposed_s` (`tp_comm_s` is the
    exposed tensor-parallel time); `memory_bound_s` is the part of `compute_s` spent in
    memory-bound kernels and `efficiency` the fraction of peak the whole of `compute_s`
    reaches. `dp_comm_s` is the whole gradient reduction, of which `dp_exposed_s` is not
    hidden. `flops` counts what is
    executed (recompute included), `model_flops` the 72-factor model FLOPs.
    `tflops_per_gpu` = model_flops / iteration / GPUs; `hardware_tflops_per_gpu` uses `flops`
    (the SC'21 convention, Eq. 3 with 96 under full recompute); `mfu` = tflops_per_gpu / peak.
    """

    iteration_s: float
    compute_s: float
    tp_comm_s: float
    bubble_s: float
    dp_comm_s: float
    dp_exposed_s: float
    efficiency: float
    flops: float
    model_flops: float
    tflops_per_gpu: float
    hardware_tflops_per_gpu: float
    mfu: float
    memory_bound_s: float = 0.0


def gemm_efficiency(
    hidden: float, peak_tflops: float, calibration: Calibration = CALIBRATION
) -> float:
    """g = gemm_max · h/(h + gemm_half · (peak/REFERENCE_TFLOPS)^peak_exponent): the fraction of
    the dense peak the layer GEMMs of hidden size `hidden` reach on a GPU of `peak_tflops`."""
    if not math.isfinite(hidden) or hidden <= 0:
        raise PlannerError("hidden", f"must be > 0, got {hidden}")
    if not math.isfinite(peak_tflops) or peak_tflops <= 0:
        raise PlannerError("peak_tflops", f"must be > 0, got {peak_tflops}")
    scale: float = (peak_tflops / REFERENCE_TFLOPS) ** calibration.peak_exponent
    half = calibration.gemm_half * scale
    return calibration.gemm_max * hidden / (hidden + half)


def memory_bound_bytes(model: Model, layout: ParallelLayout) -> float:
    """Stored-activation bytes the memory-bound kernels of one GPU touch per iteration, summed
    over passes (before the `Calibration.traffic` factor; see the module docstring)."""
    stored = layer_activation_bytes(model, dataclasses.replace(layout, recompute="none"))
    if layout.recompute == "full":
        per_layer = 4 * stored
    elif layout.recompute == "selective":
        lean = layer_activation_bytes(model, layout)
        per_layer = 3 * stored + (stored - lean)
    else:
        per_layer = 3 * stored
    s, b, t = model.seq_len, layout.micro_batch, layout.tp
    logits = 3 * 4 * s * b * model.vocab / t
    return (per_layer * model.layers / layout.pp + logits) * layout.microbatches(model)


def flops_executed(model: Model, recompute: str) -> float:
    """FLOPs one iteration executes under `recompute` ("none", "selective" or "full")."""
    f72 = model.flops_per_iteration(recompute=False)
    f96 = model.flops_per_iteration(recompute=True)
    if recompute == "none":
        return f72
    if recompute == "full":
        return f96
    if recompute == "selective":
        s, h, v, n = model.seq_len, model.hidden, model.vocab, model.layers
        attn = s / (6 * h)
        return f72 + (f96 - f72) * attn / (1 + attn + v / (16 * n * h))
    raise PlannerError("recompute", f"must be none, selective or full, got {recompute!r}")


def _intra(gpu: GPU) -> Link:
    # Per-step latencies of collectives.nvlink (hwLatency NVLink,Ring: Simple 3.4, LL 0.6 us).
    return Link(NVLINK_EFFICIENCY * gpu.nvlink_gb_s, latency_us=3.4, ll_latency_us=0.6)


def _inter(gpu: GPU) -> Link:
    if gpu.network_gb_s <= 0:
        raise PlannerError("network_gb_s", f"GPU {gpu.name!r} needs a network for multi-node")
    return ib_link(gpu.network_gb_s * 8)


def _topology(ranks: int, ranks_per_node: int, gpu: GPU) -> Topology:
    """`ranks` GPUs, `ranks_per_node` of them (a divisor of ranks) sharing a node."""
    nodes = ranks // ranks_per_node
    inter = _inter(gpu) if nodes > 1 else None
    return Topology(ranks_per_node, nodes=nodes, intra=_intra(gpu), inter=inter)


def _all_reduce_s(nbytes: float, topo: Topology) -> float:
    if topo.ranks == 1:
        return 0.0
    return best("all_reduce", int(nbytes), topo).time_us * 1e-6


def step_time(
    model: Model,
    layout: ParallelLayout,
    gpu: GPU,
    nodes_of: int = 8,
    *,
    dp_overlap: float = DP_OVERLAP,
    tp_overlap: float = 0.0,
    efficiency: float | None = None,
    calibration: Calibration = CALIBRATION,
    tp_topology: Topology | None = None,
    dp_topology: Topology | None = None,
) -> StepTime:
    """Predicted time of one training iteration of `model` on `layout` with `gpu`s.

    `nodes_of` is GPUs per node (tensor-parallel groups up to that size stay on NVLink);
    `efficiency` overrides the whole compute term's fraction of peak (then `memory_bound_s` is 0);
    `calibration` replaces the fitted constants; `dp_overlap` is the share of the gradient
    reduction hidden behind backward and `tp_overlap` that of the tensor-parallel all-reduces
    (0 unless the job overlaps them, e.g. TP_COMM_OVERLAP with --tp-comm-overlap).

    `tp_topology` and `dp_topology`, when given, replace the uniform placement that `nodes_of`
    implies for a tensor-parallel and a data-parallel group (see
    `trainyard.planner.allocation`). For a group spread unevenly over nodes pass the number of
    nodes it spans and the rank count of its most loaded node: a ring is bounded by its slowest
    hop. (Inter-node bandwidth here grows with ranks per node, one NIC each, so
    `allocation.placement_step_time` also tries the least loaded node's count and keeps the
    slower time.)
    Raises `PlannerError` naming the field for bad input.
    """
    if isinstance(nodes_of, bool) or not isinstance(nodes_of, int) or nodes_of < 1:
        raise PlannerError("nodes_of", f"must be an integer >= 1, got {nodes_of!r}")
    for name, value in (("dp_overlap", dp_overlap), ("tp_overlap", tp_overlap)):
        if not (math.isfinite(value) and 0 <= value <= 1):
            raise PlannerError(name, f"must be in [0, 1], got {value}")
    if efficiency is not None and not (math.isfinite(efficiency) and 0 < efficiency <= 1):
        raise PlannerError("efficiency", f"must be in (0, 1], got {efficiency}")
    layout.check(model)
    t, p, d, b = layout.tp, layout.pp, layout.dp, layout.micro_batch
    n = layout.gpus
    peak = gpu.peak_tflops(model.precision) * 1e12
    flops = flops_executed(model, layout.recompute)
    memory_s = 0.0
    if efficiency is None:
        g = gemm_efficiency(model.hidden, peak / 1e12, calibration)
        traffic = calibration.traffic * memory_bound_bytes(model, layout)
        memory_s = traffic / (gpu.memory_bw_tbs * 1e12)
        compute = flops / (n * peak * g) + memory_s
        eta = flops / (n * peak * compute)
    else:
        eta = efficiency
        compute = flops / (n * peak * eta)

    m = layout.microbatches(model)
    tp_comm = 0.0
    if t > 1:
        topo = tp_topology
        if topo is None:
            topo = _topology(t, math.gcd(t, nodes_of), gpu)
        per_layer = 6 if layout.recompute == "full" else 4
        msg = b * model.seq_len * model.hidden * 2
        per_iteration = (model.layers / p) * m * per_layer * _all_reduce_s(msg, topo)
        tp_comm = (1 - tp_overlap) * per_iteration

    bubble = (p - 1) / (m * layout.virtual_stages) * (compute + tp_comm)

    dp_comm = 0.0
    if d > 1:
        per_node = math.gcd(d, max(1, nodes_of // (t * p)))
        grad_bytes = 4 if layout.fp32_grads else 2
        volume = model.params / (t * p) * grad_bytes * (1.5 if layout.zero == 3 else 1.0)
        topo = dp_topology if dp_topology is not None else _topology(d, per_node, gpu)
        dp_comm = _all_reduce_s(volume, topo)
    dp_exposed = (1 - dp_overlap) * dp_comm

    total = compute + tp_comm + bubble + dp_exposed
    model_flops = model.flops_per_iteration(recompute=False)
    tflops = model_flops / total / n / 1e12
    return StepTime(
        iteration_s=total,
        compute_s=compute,
        tp_comm_s=tp_comm,
        bubble_s=bubble,
        dp_comm_s=dp_comm,
        dp_exposed_s=dp_exposed,
        efficiency=eta,
        flops=flops,
        model_flops=model_flops,
        tflops_per_gpu=tflops,
        hardware_tflops_per_gpu=flops / total / n / 1e12,
        mfu=tflops * 1e12 / peak,
        memory_bound_s=memory_s,
    )
