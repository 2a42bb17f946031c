"""One pipeline stage's time per micro-batch, by part, and its once-per-iteration gradient
reduction: the per-stage half of `trainyard.planner.compute.step_time`.

This module owns how a stage's parameters turn into sharded-state traffic (ZeRO-2/3, FSDP,
HSDP) and into the data-parallel reduction (ZeRO-0/1), for dense layers (over the dp·cp
ranks, or the shard group) and for the routed experts of a mixture of experts (split over
ep; gathered, scattered and reduced over the tp·cp·dp/ep ranks of their expert-data-parallel
group, as Megatron's distributed optimizer and Megatron-FSDP shard them).
`compute` owns the per-layer times it adds up; the terms and their sources are in its module
docstring. Pure arithmetic; seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainyard.planner.collectives import LinkSet, Topology
from trainyard.planner.comm import collective_s, per_node, topology
from trainyard.planner.hardware import GPU
from trainyard.planner.layout import ParallelLayout
from trainyard.planner.model import Model

__all__ = ["Stage", "StageTimes", "stage_time"]


@dataclass(frozen=True)
class Stage:
    """One pipeline stage's time per micro-batch, by part (seconds)."""

    compute: float
    memory: float
    tp: float
    cp: float
    shard: float
    p2p: float
    ep: float = 0.0
    offload: float = 0.0

    @property
    def total(self) -> float:
        return self.compute + self.tp + self.cp + self.shard + self.p2p + self.ep + self.offload


@dataclass(frozen=True)
class StageTimes:
    """Per-layer and per-micro-batch times every stage shares (seconds): a layer's compute and
    its memory-bound part, the output layer's, a layer's exposed tensor-, context- and
    expert-parallel communication, the point-to-point sends, the forward passes run, and the
    exposed activation-offload copies of a micro-batch (`trainyard.planner.offload`; only
    without pipeline stages, so on the one stage)."""

    layer: float
    layer_memory: float
    logit: float
    logit_memory: float
    tp_layer: float
    cp_layer: float
    ep_layer: float
    p2p: float
    passes: float
    offload: float = 0.0


def stage_time(
    model: Model,
    layout: ParallelLayout,
    layers: int,
    first: bool,
    last: bool,
    first_params: float,
    times: StageTimes,
    groups: tuple[Topology, Topology | None, int, int],
    gpu: GPU,
    links: LinkSet | None,
) -> tuple[Stage, float]:
    """One stage's time per micro-batch and its once-per-iteration reduction (seconds)."""
    shard_topo, dp_topology, group_per_node, grad_bytes = groups
    d, c = layout.dp, layout.cp
    shard_ranks = layout.shard_size
    experts = layers * model.expert_params / layout.ep
    params = layers * (model.layer_params - model.expert_params) / layout.tp
    if first:
        params += first_params
    if last and (not first or not model.tied_embeddings):
        params += first_params
    compute = layers * times.layer + (times.logit if last else 0.0)
    memory = layers * times.layer_memory + (times.logit_memory if last else 0.0)
    # the experts' states are sharded over their expert-data-parallel group, packed on nodes
    edp = layout.expert_data_parallel
    edp_topo = None
    if experts and edp > 1:
        on_node = max(1, group_per_node * layout.tp // layout.ep)
        edp_topo = topology(edp, per_node(edp, on_node), gpu, links)

    def sharded(collective: str, per_param: float) -> float:
        """One `collective` of the stage's dense and expert states (bytes per parameter)."""
        dense = collective_s(collective, per_param * params, shard_topo) if shard_ranks > 1 else 0
        own = collective_s(collective, per_param * experts, edp_topo) if edp_topo else 0.0
        return dense + own

    shard = 0.0
    if layout.zero == 3 and (shard_ranks > 1 or edp_topo):
        comm = 2 * sharded("all_gather", 2) + sharded("reduce_scatter", grad_bytes)
        shard = max(0.0, comm - compute) + comm / max(1, layers)
    elif layout.zero == 2 and (shard_ranks > 1 or edp_topo):
        scatter = sharded("reduce_scatter", grad_bytes)
        backward = compute * 2.0 / times.passes
        shard = max(0.0, scatter - backward) + scatter / max(1, layers)
    stage = Stage(
        compute, memory, layers * times.tp_layer, layers * times.cp_layer, shard, times.p2p,
        layers * times.ep_layer, times.offload,
    )  # fmt: skip
    # Once per iteration: the reduction (ZeRO 0/1), the gather after the step (ZeRO-2), the
    # all-reduce across replicas (HSDP); the experts' over their expert-data-parallel group.
    reduce = 0.0
    replicas = (d * c) // shard_ranks
    if layout.zero <= 1:
        if d * c > 1:
            topo = dp_topology
            if topo is None:
                topo = topology(d * c, per_node(d * c, group_per_node), gpu, links)
            reduce = collective_s("all_reduce", grad_bytes * params, topo)
        if edp_topo is not None:
            reduce += collective_s("all_reduce", grad_bytes * experts, edp_topo)
    elif layout.zero == 2:
        reduce = sharded("all_gather", 2)
    elif layout.zero == 3 and replicas > 1:
        topo = topology(replicas, 1, gpu, links)
        reduce = collective_s("all_reduce", grad_bytes * params / shard_ranks, topo)
    return stage, reduce
