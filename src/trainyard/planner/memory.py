"""Memory per GPU of a training layout: model states (weights, gradients, optimizer) and
activations, for the pipeline stage that needs the most.

This module owns the memory model; it is pure arithmetic over `Model` and `ParallelLayout`.
Units: bytes internally, GB = 1e9 bytes in `MemoryBreakdown` (the unit `GPU.memory_gb` uses).

Model states, mixed-precision Adam (Rajbhandari et al., ZeRO, arXiv:1910.02054 §5): per
parameter 2 bytes of weights, 2 bytes of gradients (4 with `fp32_grads`) and K = 12 bytes of fp32
master weights, momentum and variance. ZeRO-1 shards the optimizer over dp, ZeRO-2 also the
gradients, ZeRO-3 also the weights. fp8 training is assumed to keep bf16 weights (2 bytes).

Parameters per GPU: a stage holds layers/pp transformer layers split over tp. The first stage
also holds the (vocab-parallel) word embedding V·h/tp and any learned position embedding; the
last stage holds the output layer (its own matrix if untied, else Megatron's copy of the word
embedding) and the final norm. With pp = 1 one stage holds all of it. Norm and bias parameters
are counted as if split over tp (a slight underestimate).

Activations per transformer layer and micro-batch (Korthikanti et al., arXiv:2205.05198,
Table 2; s = seq_len, b = micro_batch, h = hidden, a = heads, t = tp), in bytes:

* tensor parallel: s·b·h·(10 + 24/t + 5·a·s/(h·t)) (t = 1 gives s·b·h·(34 + 5·a·s/h));
* with sequence parallel: s·b·h/t·(34 + 5·a·s/h);
* selective recompute drops the 5·a·s/h attention term, and so does fused (flash) attention,
  which keeps only the output and the softmax statistics (Dao et al. arXiv:2205.14135 §3.1);
* full recompute keeps only the layer input, 2·s·b·h (divided by t with sequence parallel).

These assume the GPT shape (f = 4h, k = a, 16-bit activations); for other shapes they are an
estimate. Under 1F1B the first stage holds min(pp, m) micro-batches of its layers/pp layers
(m = micro-batches per iteration); the interleaved schedule multiplies that by
1 + (pp-1)/(pp·v) (Korthikanti §4.2.3). The last stage holds one micro-batch of its layers.
Outside the layers (Korthikanti §4.3): the first stage keeps the embedding dropout mask,
s·b·h·p/t bytes for p micro-batches in flight (/t only with sequence parallel); the last stage
keeps the final norm and output-projection inputs and the fp32 logits, 4·s·b·h + 4·s·b·V/t
(4·s·b·h/t with sequence parallel). Temporary buffers, fragmentation and the CUDA context are
not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainyard.planner.layout import ParallelLayout
from trainyard.planner.model import Model

__all__ = ["GB", "MemoryBreakdown", "layer_activation_bytes", "memory_per_gpu", "stage_memory"]

GB = 1e9


@dataclass(frozen=True)
class MemoryBreakdown:
    """Memory of the most loaded GPU, in GB; `stage` says which stage that is."""

    weights: float
    grads: float
    optimizer: float
    activations: float
    stage: str

    @property
    def total(self) -> float:
        """Sum of all parts, GB."""
        return self.weights + self.grads + self.optimizer + self.activations


def layer_activation_bytes(model: Model, layout: ParallelLayout) -> float:
    """Bytes of activations one transformer layer keeps for one micro-batch (Korthikanti T2)."""
    s, b, h, a, t = model.seq_len, layout.micro_batch, model.hidden, model.heads, layout.tp
    sbh = s * b * h
    if layout.recompute == "full":
        return 2 * sbh / (t if layout.sequence_parallel else 1)
    stores_scores = layout.recompute != "selective" and not layout.flash_attention
    attention = 5 * a * s / h if stores_scores else 0.0
    if layout.sequence_parallel:
        return sbh / t * (34 + attention)
    return sbh * (10 + 24 / t + attention / t)


def _state_bytes(params: float, layout: ParallelLayout) -> tuple[float, float, float]:
    grad_bytes = 4 if layout.fp32_grads else 2
    dp = layout.dp
    weights = 2 * params / (dp if layout.zero >= 3 else 1)
    grads = grad_bytes * params / (dp if layout.zero >= 2 else 1)
    optimizer = 12 * params / (dp if layout.zero >= 1 else 1)
    return weights, grads, optimizer


def _stage(model: Model, layout: ParallelLayout, first: bool, last: bool) -> tuple[float, ...]:
    t, p, h = layout.tp, layout.pp, model.hidden
    s, b = model.seq_len, layout.micro_batch
    layers = model.layers // p
    params = layers * model.layer_params
    if first:
        params += model.vocab * h + (model.seq_len * h if model.learned_positions else 0)
    if last:
        params += (2 if model.bias else 1) * h
        if not first or not model.tied_embeddings:
            params += model.vocab * h
    per_layer = layer_activation_bytes(model, layout)
    sp_div = t if layout.sequence_parallel else 1
    if first:
        in_flight = min(p, layout.microbatches(model))
        factor = 1 + (p - 1) / (p * layout.virtual_stages) if layout.virtual_stages > 1 else 1
        acts = per_layer * layers * in_flight * factor + s * b * h * in_flight / sp_div
    else:
        acts = per_layer * layers
    if last:
        acts += 4 * s * b * h / sp_div + 4 * s * b * model.vocab / t
    return (*_state_bytes(params / t, layout), acts)


def stage_memory(model: Model, layout: ParallelLayout) -> list[MemoryBreakdown]:
    """Memory of the GPUs of the first and the last pipeline stage (one entry when pp = 1).

    Raises `PlannerError` (naming the field) if the layout does not fit the model's shape.
    """
    layout.check(model)
    if layout.pp == 1:
        candidates = [("only", _stage(model, layout, first=True, last=True))]
    else:
        candidates = [
            ("first", _stage(model, layout, first=True, last=False)),
            ("last", _stage(model, layout, first=False, last=True)),
        ]
    out = []
    for stage, parts in candidates:
        weights, grads, optimizer, acts = (x / GB for x in parts)
        out.append(MemoryBreakdown(weights, grads, optimizer, acts, stage))
    return out


def memory_per_gpu(model: Model, layout: ParallelLayout) -> MemoryBreakdown:
    """Memory of the most loaded GPU (first or last pipeline stage) for `model` under `layout`.

    Raises `PlannerError` (naming the field) if the layout does not fit the model's shape.
    """
    return max(stage_memory(model, layout), key=lambda m: m.total)
