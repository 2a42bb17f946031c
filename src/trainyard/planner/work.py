"""What one layer of a layout executes, before any time is put on it: its FLOPs under each
activation recompute (`recompute_passes`, `flops_executed`) and the bytes its memory-bound
kernels move (`layer_memory_bytes`, `memory_bound_bytes`). `planner.compute` turns these into
time; the terms and their sources are in its module docstring.
"""

from __future__ import annotations

import dataclasses

from trainyard.planner.errors import PlannerError
from trainyard.planner.layout import RECOMPUTE_MODES, ParallelLayout
from trainyard.planner.memory import layer_activation_bytes
from trainyard.planner.model import AttentionCount, Model

__all__ = [
    "flops_executed",
    "layer_memory_bytes",
    "logit_bytes",
    "memory_bound_bytes",
    "recompute_passes",
]


def layer_memory_bytes(model: Model, layout: ParallelLayout) -> float:
    """Stored-activation bytes the memory-bound kernels of one GPU touch for one layer and one
    micro-batch, summed over passes (before the `Calibration.traffic` factor)."""
    stored = layer_activation_bytes(model, dataclasses.replace(layout, recompute="none"))
    if layout.recompute in ("full", "op"):
        return 4 * stored
    if layout.recompute in ("selective", "norms"):  # what was dropped is made again
        lean = layer_activation_bytes(model, layout)
        return 3 * stored + (stored - lean)
    return 3 * stored


def logit_bytes(model: Model, layout: ParallelLayout) -> float:
    """The fp32 logits' bytes over 3 passes for one micro-batch on one GPU of the last stage."""
    tokens = model.seq_len * layout.micro_batch / layout.cp
    return 3 * 4 * tokens * model.padded_vocab(layout.tp) / layout.tp


def memory_bound_bytes(model: Model, layout: ParallelLayout) -> float:
    """Stored-activation bytes the memory-bound kernels of one GPU touch per iteration, summed
    over passes (before the `Calibration.traffic` factor), for an average stage that also runs
    the logits (the last stage sets the pace)."""
    per_layer = layer_memory_bytes(model, layout)
    logits = logit_bytes(model, layout)
    return (per_layer * model.layers / layout.pp + logits) * layout.microbatches(model)


def flops_executed(model: Model, recompute: str, attention: AttentionCount = "full") -> float:
    """FLOPs one iteration executes under `recompute` (a `RECOMPUTE_MODES` name),
    the attention core counted as `attention` says (`Model.layer_forward_flops`)."""
    if recompute not in RECOMPUTE_MODES:
        raise PlannerError(
            "recompute", f"must be one of {', '.join(RECOMPUTE_MODES)}, got {recompute!r}"
        )
    tokens = float(model.tokens_per_iteration)
    gemm, attn = model.layer_forward_flops(tokens, attention=attention)
    _passes, gemm_passes, attn_passes = recompute_passes(model, recompute)
    logits = 3 * 2.0 * model.hidden * model.padded_vocab() * tokens
    return model.layers * (gemm_passes * gemm + attn_passes * attn) + logits


def recompute_passes(model: Model, recompute: str) -> tuple[float, float, float]:
    """Forward passes a layer runs under `recompute`: of the whole layer, of its GEMMs and of
    its attention core (3 without recompute; "op" reruns a share of the GEMMs, "norms" latent
    attention's up-projections)."""
    passes = 4.0 if recompute == "full" else 3.0
    again = 0  # the weights whose GEMMs run once more
    if recompute == "op":
        again = model.op_recomputed_matmul_params
    elif recompute == "norms":
        again = model.mla_up_params
    gemm = passes + again / model.layer_matmul_params
    return passes, gemm, passes + (1.0 if recompute == "selective" else 0.0)
