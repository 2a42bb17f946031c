"""Memory per GPU of a training layout: model states (weights, gradients, optimizer) and
activations, for the pipeline stage that needs the most.

This module owns the memory model; it is pure arithmetic over `Model` and `ParallelLayout`.
Units: bytes internally, GB = 1e9 bytes in `MemoryBreakdown` (the unit `GPU.memory_gb` uses).

Model states, mixed-precision Adam (Rajbhandari et al., ZeRO, arXiv:1910.02054 §5): per
parameter 2 bytes of weights, 2 bytes of gradients (4 with `fp32_grads`) and K = 12 bytes of fp32
master weights, momentum and variance. ZeRO-1 shards the optimizer over dp, ZeRO-2 also the
gradients, ZeRO-3 also the weights. fp8 training is assumed to keep bf16 weights (2 bytes).

Parameters per GPU: a stage holds its layers (`ParallelLayout.stage_layers`: even, or the
first/last stage counts given) split over tp. The first stage also holds the (vocab-parallel)
word embedding V'·h/tp (V' the vocabulary padded as Megatron pads it, `Model.padded_vocab`)
and any learned position embedding; the last stage holds the output layer (its own matrix if
untied, else Megatron's copy of the word embedding) and the final norm. With pp = 1 one stage
holds all of it. Norm and bias parameters are counted as if split over tp (a slight
underestimate). Sharded states (ZeRO) are split over `ParallelLayout.shard_size` ranks (dp·cp,
or the hybrid-sharding group). A mixture of experts' routed experts are split over ep instead
of tp (`ParallelLayout.ep`) and their sharded states over the expert-data-parallel group
(tp·cp·dp/ep ranks, Megatron's distributed optimizer for expert parameters). Under ZeRO-3 /
FSDP a GPU also holds the gathered weights of two layers (the one computing and the one
prefetched) and the full gradients of one.

Activations per transformer layer and micro-batch (Korthikanti et al., arXiv:2205.05198,
Table 2, generalised to the model's shapes; s = seq_len, b = micro_batch, h = hidden, a =
heads, k = kv_heads, f = ffn_hidden, t = tp), in bytes, 16-bit:

* outside the tensor-parallel region, 10·s·b·h: the two norm inputs (4), the inputs of the QKV
  projection and of the MLP (4), two dropout masks (2);
* inside it, split over t: Q, K and V (2 + 4k/a), the output projection's input (2) (with a
  `head_dim` d other than h/a, 2·a·d/h for each of Q and that input, 4·k·d/h for K and V), the MLP's
  activation input and output (4f/h; a gated MLP stores both halves of its first projection and
  their product, 6f/h): 24 for the GPT shape;
* the attention scores, softmax and dropout, 5·a·s/h, unless the attention is fused (flash) or
  selectively recomputed (Dao et al. arXiv:2205.14135 §3.1);
* sequence parallelism splits the first part over t too; full recompute keeps only the layer
  input, 2·s·b·h (divided by t with sequence parallelism);
* recomputing the norms ("norms") drops their outputs, the QKV projection's and the MLP's
  inputs (4 of the 10 outside the tensor-parallel region, 2 of 8 under fp8), an MoE
  layer's activation products (2 bytes per routed expert width, 1 under fp8), and under
  latent attention the up-projected Q, K and V (2q + 4kv), keeping their latents;
* torchtitan's per-operator checkpointing ("op") keeps the layer input and the outputs of the
  matrix multiplies it does not recompute and of the fused attention: the query (2), the
  value (2k/a), the attention output (2), the MLP's first projection (2f/h: a gated MLP's
  gate, a plain one's only up-projection) and its output (2), with the input 2 outside the
  tensor-parallel region, 8 + 2k/a + 2f/h in all (15.5 for the GPT shape; the element-wise
  operators' outputs are recomputed, the attention's log-sum-exp is negligible);
* an MoE layer: the MLP terms for the widths one token goes through (`Model.mlp_width`: its
  top-k experts and the shared MLP), plus the token copies sent to the experts and received
  back (4·topk: the dispatched input and the expert output of each copy; 3·topk under fp8,
  whose expert GEMMs keep their inputs in 8 bits);
* context parallelism splits all of it over cp (each rank holds s/cp of every sequence);
* fp8 (Transformer Engine) keeps the inputs of the four GEMMs in 8 bits: one byte less per
  element for the QKV and MLP inputs, the output projection's and the second MLP GEMM's.

For the GPT shape (f = 4h, k = a) this is Korthikanti's 34·s·b·h + 5·a·s²·b. Under 1F1B stage i
(from 0) holds min(pp - i, m) micro-batches of its layers (m = micro-batches per iteration).
Under the interleaved schedule with v chunks a stage holds its warm-up chunks and one more,
each a v-th of its layers: min(m·v, 2·(pp - i - 1) + (v - 1)·pp + 1) / v stage-equivalents
(Megatron-Core's `forward_backward_pipelining_with_interleaving`: warm-up (pp - i - 1)·2 +
(v - 1)·pp). For the first stage that is pp + (pp - 1)/v, Korthikanti's pp·(1 + (pp-1)/(pp·v))
(§4.2.3); later stages hold only 2/v fewer each, not one micro-batch fewer as under 1F1B, so
the last holds pp - (pp - 1)/v where 1F1B's holds one. The first stage, the second (which may
hold more layers than a lighter first stage) and the last are compared. Outside the layers
(Korthikanti §4.3): the first stage keeps the embedding dropout mask, s·b·h·p/t bytes for
p = min(pp, m) micro-batches (/t only with sequence parallel); the last
stage keeps the final norm and output-projection inputs and the fp32 logits, 4·s·b·h +
4·s·b·V'/t (4·s·b·h/t with sequence parallel), both /cp. Temporary buffers, fragmentation and
the CUDA context are not modelled.

Activation offloading (`ParallelLayout.offload_layers`, `trainyard.planner.offload`): a stage
keeps the activations of `offload.resident_layers` of its layers; the offloaded ones are in
host memory (`MemoryBreakdown.offloaded`, not part of `total`).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainyard.planner.layout import ParallelLayout
from trainyard.planner.model import Model
from trainyard.planner.offload import resident_layers

__all__ = [
    "GB",
    "MemoryBreakdown",
    "layer_activation_bytes",
    "memory_per_gpu",
    "stage_in_flight",
    "stage_memory",
]

GB = 1e9


@dataclass(frozen=True)
class MemoryBreakdown:
    """Memory of the most loaded GPU, in GB; `stage` says which stage that is. `offloaded` is
    the activations it keeps in host memory (activation offloading), not in `total`."""

    weights: float
    grads: float
    optimizer: float
    activations: float
    stage: str
    offloaded: float = 0.0

    @property
    def total(self) -> float:
        """Sum of all parts, GB."""
        return self.weights + self.grads + self.optimizer + self.activations


def layer_activation_bytes(model: Model, layout: ParallelLayout) -> float:
    """Bytes of activations one transformer layer keeps for one micro-batch on one GPU (see the
    module docstring; Korthikanti Table 2 for the GPT shape)."""
    s, b, h, a, t = model.seq_len, layout.micro_batch, model.hidden, model.heads, layout.tp
    sbh = s * b * h / layout.cp
    if layout.recompute == "full":
        return 2 * sbh / (t if layout.sequence_parallel else 1)
    f_h = model.mlp_width / h
    fp8 = model.precision == "fp8"
    # the top-k copies' expert inputs (2 bytes, 1 as fp8 GEMM inputs) and outputs (2)
    copies = (4.0 - (1.0 if fp8 else 0.0)) * model.moe_topk if model.is_moe else 0.0
    q, kv = model.attention_width / h, model.kv_heads * model.head_dim / h
    if layout.recompute == "op":
        kept = 2.0 + 4.0 * q + 2.0 * kv + 2.0 * f_h + copies
        if layout.sequence_parallel:
            return sbh / t * (2.0 + kept)
        return sbh * (2.0 + kept / t)
    outside = 10.0 - (2.0 if fp8 else 0.0)
    mlp = (6.0 if model.gated_mlp else 4.0) * f_h - (f_h if fp8 else 0.0)
    if layout.recompute == "norms":  # the norms' outputs and the experts' activation products
        outside = 6.0
        routed = model.moe_share * model.moe_topk * model.moe_ffn_hidden / h
        mlp -= (1.0 if fp8 else 2.0) * routed
    inside = 4.0 * q + 4.0 * kv + mlp + copies - (1.0 if fp8 else 0.0)
    if layout.recompute == "norms" and model.is_mla:  # Q, K and V again from their latents
        latents = model.q_lora_rank + model.kv_lora_rank + model.rope_dim
        inside -= 2.0 * q + 4.0 * kv - 2.0 * latents / h
    stores_scores = layout.recompute != "selective" and not layout.flash_attention
    attention = 5 * a * s / h if stores_scores else 0.0
    if layout.sequence_parallel:
        return sbh / t * (outside + inside + attention)
    return sbh * (outside + (inside + attention) / t)


def _state_bytes(
    params: float, layout: ParallelLayout, ranks: int = 0
) -> tuple[float, float, float]:
    """Weights, gradients and optimizer bytes of `params` sharded over `ranks` (default the
    layout's shard size)."""
    grad_bytes = 4 if layout.fp32_grads else 2
    n = ranks or layout.shard_size
    weights = 2 * params / (n if layout.zero >= 3 else 1)
    grads = grad_bytes * params / (n if layout.zero >= 2 else 1)
    optimizer = 12 * params / (n if layout.zero >= 1 else 1)
    return weights, grads, optimizer


def stage_in_flight(pp: int, index: int, virtual: int, microbatches: int) -> float:
    """Micro-batches' worth of its layers' activations pipeline stage `index` (from 0) holds
    at its peak (see the module docstring): min(pp - index, m) under 1F1B, min(m·v, 2·(pp -
    index - 1) + (v - 1)·pp + 1) / v chunks of a v-th each under the interleaved schedule."""
    if virtual <= 1:
        return float(min(pp - index, microbatches))
    chunks = 2 * (pp - index - 1) + (virtual - 1) * pp + 1
    return min(microbatches * virtual, chunks) / virtual


def _stage(
    model: Model, layout: ParallelLayout, index: int, layers: int, last: bool
) -> tuple[float, ...]:
    t, p, h = layout.tp, layout.pp, model.hidden
    first = index == 0
    s, b = model.seq_len / layout.cp, layout.micro_batch
    vocab = model.padded_vocab(t)
    experts = model.expert_params
    params = layers * (model.layer_params - experts)
    if first:
        params += vocab * h + (model.seq_len * h if model.learned_positions else 0)
    if last:
        params += (2 if model.bias else 1) * h
        if not first or not model.tied_embeddings:
            params += vocab * h
    per_layer = layer_activation_bytes(model, layout)
    sp_div = t if layout.sequence_parallel else 1
    m = layout.microbatches(model)
    in_flight = stage_in_flight(p, index, layout.virtual_stages, m)
    resident = resident_layers(layers, layout.offload_layers)
    acts = per_layer * resident * in_flight
    host = per_layer * min(layout.offload_layers, layers) * in_flight
    if first:
        acts += s * b * h * min(p, m) / sp_div  # Korthikanti §4.3
    if last:
        acts += 4 * s * b * h / sp_div + 4 * s * b * vocab / t
    weights, grads, optimizer = _state_bytes(params / t, layout)
    if experts:
        parts = _state_bytes(layers * experts / layout.ep, layout, layout.expert_data_parallel)
        weights, grads, optimizer = (
            x + y for x, y in zip((weights, grads, optimizer), parts, strict=True)
        )
    if layout.zero >= 3 and layers:
        gathered = (model.layer_params - experts) / t + experts / layout.ep
        weights += 2 * 2 * gathered
        grads += (4 if layout.fp32_grads else 2) * gathered
    return weights, grads, optimizer, acts, host


def stage_memory(model: Model, layout: ParallelLayout) -> list[MemoryBreakdown]:
    """Memory of the GPUs of the first, the second (with uneven stages) and the last pipeline
    stage (one entry when pp = 1).

    Raises `PlannerError` (naming the field) if the layout does not fit the model's shape.
    """
    layout.check(model)
    counts = layout.stage_layers(model)
    p = layout.pp
    if p == 1:
        candidates = [("only", _stage(model, layout, 0, counts[0], last=True))]
    else:
        candidates = [("first", _stage(model, layout, 0, counts[0], last=False))]
        if p > 2 and layout.uneven:
            candidates.append(("second", _stage(model, layout, 1, counts[1], last=False)))
        candidates.append(("last", _stage(model, layout, p - 1, counts[-1], last=True)))
    out = []
    for stage, parts in candidates:
        weights, grads, optimizer, acts, host = (x / GB for x in parts)
        out.append(MemoryBreakdown(weights, grads, optimizer, acts, stage, host))
    return out


def memory_per_gpu(model: Model, layout: ParallelLayout) -> MemoryBreakdown:
    """Memory of the most loaded GPU (first or last pipeline stage) for `model` under `layout`.

    Raises `PlannerError` (naming the field) if the layout does not fit the model's shape.
    """
    return max(stage_memory(model, layout), key=lambda m: m.total)
