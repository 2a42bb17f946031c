"""Time per training iteration of a layout: compute, tensor-parallel communication, pipeline
bubble and the exposed part of the data-parallel gradient reduction.

This module owns the planner's time model (`step_time` and its `StepTime` breakdown). It is pure
arithmetic over `Model`, `Layout` and `GPU`, with collective times from
`trainyard.planner.collectives`. Times are seconds.

Terms (n = GPUs, p = pp, t = tp, d = dp, m = micro-batches per pipeline, v = virtual stages,
b = micro_batch, s = seq_len, h = hidden, l = layers):

* FLOPs per iteration F: Narayanan et al. SC'21 (arXiv:2104.04473) Eq. 3 through
  `Model.flops_per_iteration`, factor 96 with full recompute and 72 without. Selective recompute
  (Korthikanti et al. arXiv:2205.05198 §5) re-runs only the attention core, i.e. the
  s/(6h) term of Eq. 3: F_sel = F_72 + (F_96 - F_72)·(s/(6h)) / (1 + s/(6h) + V/(16lh)).
* compute: F / (n · peak · η). η is the achievable fraction of the dense peak for the precision,
  a saturating function of the GEMM size (see `achievable_fraction`): η = ETA_MAX · h/(h + W_HALF).
  Small hidden sizes lose more time to the memory-bound element-wise, softmax and norm kernels
  (cost ∝ b·s·h against the GEMMs' b·s·h²), hence the saturation in h.
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

Not modelled: optimizer step, data loading, kernel-launch gaps (they live in η), pipeline p2p.

Calibration of ETA_MAX, W_HALF and DP_OVERLAP: a grid search minimising median + 0.2·max of
the relative error of TFLOP/s over a *subset* of ``<shared>/planner/published_configs.csv``:
the ten SC21_T1 rows and the four README_2020_A100_MP rows (14 rows, A100 only). All other rows
(SC21_T2, README_2020_V100, README_2020_A100_DP, README_2024_H100) are held out and only
evaluated (`trainyard.planner.evaluate`). Two richer forms were tried on the same subset and fit
worse or no better: the width h/t instead of h (tensor parallelism's cost is then counted twice,
once in η and once in the all-reduces), and an extra micro-batch-token factor k/(k + K_HALF),
k = b·s, whose fitted K_HALF was 0 (these tables do not give the micro-batch), so it is left out.
The grid put DP_OVERLAP at 0.3-0.8 with under 1 point of difference; 0.5 is used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from trainyard.planner.collectives import Link, Topology, best, ib_link
from trainyard.planner.errors import PlannerError
from trainyard.planner.hardware import GPU
from trainyard.planner.layout import Layout
from trainyard.planner.model import Model

__all__ = [
    "DP_OVERLAP",
    "ETA_MAX",
    "NVLINK_EFFICIENCY",
    "TP_COMM_OVERLAP",
    "W_HALF",
    "StepTime",
    "achievable_fraction",
    "flops_executed",
    "step_time",
]

# Achievable fraction of peak (calibrated on SC21_T1 + README_2020_A100_MP, see the docstring).
ETA_MAX: Final = 0.62
W_HALF: Final = 700.0  # hidden size at which η is half of ETA_MAX
# Share of the gradient reduction hidden behind backward (Megatron overlap_grad_reduce).
DP_OVERLAP: Final = 0.5
# Share of tensor-parallel all-reduces hidden when --tp-comm-overlap is on; set equal to
# DP_OVERLAP a priori (not fitted: no calibration row uses it).
TP_COMM_OVERLAP: Final = 0.5
# NCCL's modelled NVLink bandwidth over the datasheet rate: 240/300 GB/s on A100
# (collectives.A100_NVLINK); applied to `GPU.nvlink_gb_s` for every GPU.
NVLINK_EFFICIENCY: Final = 0.8


@dataclass(frozen=True)
class StepTime:
    """One iteration's time and its parts (seconds), with throughput and MFU.

    `iteration_s` = `compute_s` + `tp_comm_s` + `bubble_s` + `dp_exposed_s` (`tp_comm_s` is the
    exposed tensor-parallel time). `dp_comm_s` is the
    whole gradient reduction, of which `dp_exposed_s` is not hidden. `flops` counts what is
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


def achievable_fraction(hidden: float) -> float:
    """η = ETA_MAX · h/(h + W_HALF): the fraction of the dense peak the layer GEMMs reach."""
    if not math.isfinite(hidden) or hidden <= 0:
        raise PlannerError("hidden", f"must be > 0, got {hidden}")
    return ETA_MAX * hidden / (hidden + W_HALF)


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
    layout: Layout,
    gpu: GPU,
    nodes_of: int = 8,
    *,
    dp_overlap: float = DP_OVERLAP,
    tp_overlap: float = 0.0,
    efficiency: float | None = None,
    tp_topology: Topology | None = None,
    dp_topology: Topology | None = None,
) -> StepTime:
    """Predicted time of one training iteration of `model` on `layout` with `gpu`s.

    `nodes_of` is GPUs per node (tensor-parallel groups up to that size stay on NVLink);
    `efficiency` overrides the achievable fraction η; `dp_overlap` is the share of the gradient
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
    eta = efficiency
    if eta is None:
        eta = achievable_fraction(model.hidden)
    flops = flops_executed(model, layout.recompute)
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
    )
