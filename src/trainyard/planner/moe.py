"""Mixture-of-experts layers in the time model: the experts' GEMMs and the all-to-all that
carries tokens to their experts and back (expert parallelism, Megatron-Core's
--expert-model-parallel-size).

This module owns the MoE terms `trainyard.planner.compute.step_time` adds to a layer; a dense
model gets zeros and the dense efficiency. Pure arithmetic; seconds.

* Expert GEMMs. A token's routed share of an MoE layer's FLOPs (2 x the matrices x h x f_e
  for each of its top-k experts) runs as grouped GEMMs of M_e tokens per expert by h by f_e.
  With every expert receiving its share of tokens (Megatron-Bridge's published MoE runs
  force-balance the routing), M_e = top-k x (tokens of the GPU) x ep / experts. Such GEMMs
  are thin: their efficiency is the calibrated dense curve (`compute.gemm_efficiency`) read at
  the hidden size x whose dense MLP GEMMs have the same arithmetic intensity, from
  1/x + 1/(4x) = 1/M_e + 1/h + 1/f_e (a GEMM of m x k by k x n moves m·k + k·n + m·n
  elements for m·k·n multiply-adds), at most h. Qwen3-30B-A3B (h 2048, f_e 768, 4,096 tokens
  an expert) reads the curve at 614 instead of 2,048. No constant is fitted to MoE rows.
* All-to-all. Each MoE layer sends every token's top-k copies to the GPUs holding their
  experts and brings the outputs back: forward 2 all-to-alls, backward 2, and 2 more under
  full recompute, each of top-k x (tokens of the GPU) x h x 2 bytes from every GPU (the
  tokens of a GPU are b·s/(cp·tp): Megatron-Core runs MoE under tensor parallelism with
  sequence parallelism). Of those bytes (ep - 1)/ep leave the GPU: the (r - 1)/ep bound for
  the r - 1 other group members in its node go over NVLink, the (ep - r)/ep for other nodes
  over its NIC, at the same time; the EP group is packed onto nodes (r = min(ep, GPUs per
  node)), and nothing hides it: the model prices Megatron-Core's plain all-to-all
  dispatcher. Not modelled: deduplicating dispatchers (DeepEP, HybridEP: a token crosses
  the network once per node holding any of its experts) and the 1F1B overlap of
  expert-parallel communication (--overlap-moe-expert-parallel-comm). Both were tried in
  their ideal form (each node's copy sent once at the link's rate; the whole all-to-all
  hidden behind the layer's compute) on Megatron-Bridge's Qwen3 runs that use them: the
  H100 rows went from -10 % and -16 % to +49 % and +27 %, so what they save in practice is
  far from their ideal and is left out until a measurement says how much.
* The token copies' memory traffic (permute, unpermute) is in the layer's stored
  activations (`memory.layer_activation_bytes`), priced with the other memory-bound kernels.
"""

from __future__ import annotations

from trainyard.planner.collectives import LinkSet
from trainyard.planner.comm import inter_link, intra_link
from trainyard.planner.hardware import GPU
from trainyard.planner.layout import ParallelLayout
from trainyard.planner.model import Model

__all__ = [
    "all_to_all_s",
    "expert_forward_flops",
    "expert_gemm_size",
    "layer_all_to_all_s",
]


def expert_forward_flops(model: Model, tokens: float) -> float:
    """Forward FLOPs of the routed experts for `tokens` tokens (0 for a dense model)."""
    if not model.is_moe:
        return 0.0
    per_token = model.mlp_matrices * model.hidden * model.moe_topk * model.moe_ffn_hidden
    return 2.0 * per_token * tokens * model.moe_share  # the mean over dense and MoE layers


def expert_gemm_size(model: Model, layout: ParallelLayout, tokens: float) -> float:
    """The dense hidden size whose GEMMs have the experts' arithmetic intensity (module
    docstring); `tokens` are one micro-batch's on one GPU before tensor parallelism."""
    h = float(model.hidden)
    if not model.is_moe:
        return h
    local = tokens / layout.tp
    per_expert = model.moe_topk * local * layout.ep / model.experts
    inverse = 1.0 / max(per_expert, 1.0) + 1.0 / h + 1.0 / model.moe_ffn_hidden
    return min(h, 1.25 / inverse)


def all_to_all_s(
    nbytes: float,
    ranks: int,
    per_node: int,
    gpu: GPU,
    links: LinkSet | None = None,
) -> float:
    """One all-to-all in which each of `ranks` GPUs (`per_node` of them in a node) sends
    `nbytes` spread evenly over the group, itself included."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    r = max(1, min(per_node, ranks))
    local, remote = nbytes * (r - 1) / ranks, nbytes * (ranks - r) / ranks
    seconds = 0.0
    if r > 1:
        link = intra_link(gpu, links)
        seconds = link.latency_us * 1e-6 + local / (link.bandwidth_gbps * 1e9)
    if ranks > r:
        link = inter_link(gpu, links)
        seconds = max(seconds, link.latency_us * 1e-6 + remote / (link.bandwidth_gbps * 1e9))
    return seconds


def layer_all_to_all_s(
    model: Model,
    layout: ParallelLayout,
    gpu: GPU,
    nodes_of: int,
    tokens: float,
    passes: float,
    links: LinkSet | None = None,
) -> float:
    """The all-to-all time of one MoE layer for one micro-batch on one GPU (module
    docstring)."""
    if not model.is_moe or layout.ep <= 1:
        return 0.0
    nbytes = model.moe_topk * tokens / layout.tp * model.hidden * 2.0
    calls = 2.0 * (passes - 1.0) * model.moe_share  # the mean over dense and MoE layers
    return calls * all_to_all_s(nbytes, layout.ep, nodes_of, gpu, links)
