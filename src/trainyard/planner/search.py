"""Layout search: every valid parallel layout (`ParallelLayout`) of a model on N GPUs, filtered
by memory and ranked by predicted throughput (`search`, `best`).

This module owns the enumeration; memory comes from `trainyard.planner.memory`, time from
`trainyard.planner.compute`. It is pure and deterministic.

Search space (each layout is then checked with `ParallelLayout.check`):

* tp: divisors of min(nodes_of, heads) that divide heads, kv_heads, hidden and ffn_hidden (a
  tensor-parallel group stays inside one node);
* pp: divisors of the layer count (even stages), the counts that split the layers plus
  the embedding and the loss evenly, the first and last stage then holding one layer fewer
  (`uneven_stages`, e.g. 126 layers on 16 stages as 7 + 14 x 8 + 7), and the powers of two
  neither gives, every chunk as full as the split allows but the model's first and last
  (`end_chunk_stages`, e.g. DeepSeek-V3's 61 layers on 16 stages as 4 + 14 x 4 + 1);
  dp·cp = num_gpus / (tp·pp), an integer;
* cp (context parallelism): 1, and for sequences of 8,192 tokens or more every divisor of dp·cp
  that leaves each rank at least 4,096 tokens (and s a multiple of 2·cp); dp = the rest, with
  global_batch a multiple of dp·micro_batch;
* micro_batch in 1, 2, 4, 8; ZeRO stage 0-3 without pipeline parallelism, 0-1 with it (no
  launcher runs ZeRO-2/3 with pipeline stages: DeepSpeed's pipeline engine stops at ZeRO-1,
  PyTorch FSDP and Megatron-FSDP are emitted without pipelines); recompute none / norms /
  selective (without flash attention) / full;
* virtual_stages (interleaving) 1 to 4 when pp > 1, the layers divide into pp·v chunks and the
  micro-batches per pipeline are a multiple of pp (Megatron's interleaved schedule requires
  it). The point-to-point traffic that grows with v is not modelled, so v stops at 4, the
  largest factor the Megatron papers report using (SC'21 §5; Korthikanti et al. Table 3 uses 3);
* sequence parallelism is on whenever tp > 1: the time model costs its communication like
  plain tensor parallelism and it lowers activation memory and traffic, so it is never worse;
  so is the overlap of tensor-parallel communication with the GEMMs (Megatron-Core
  --tp-comm-overlap), which needs it;
* ep (expert parallelism, mixture-of-experts models only): every divisor of the expert count
  that divides tp·cp·dp (`ParallelLayout.ep`); dense models keep 1;
* attention is fused (flash) unless `flash_attention=False` is passed (a stack that stores
  the score matrix). With flash attention selective recompute saves no memory (the scores it
  drops are never stored) and only adds FLOPs, so it is not tried.

Memory filter: a layout fits when its most loaded GPU needs at most HEADROOM (95 %) of the GPU's
memory; the 5 % covers what `memory` does not model (CUDA context, NCCL buffers, temporary
buffers, fragmentation).

Activation offloading (`trainyard.planner.offload`): a layout without pipeline stages or
recompute that does not fit is also tried with the fewest layers offloaded to host memory that
make it fit, when the GPU's host link and host memory are known and the offloaded activations
take at most HEADROOM of the host memory per GPU. It competes with recompute on time, and with
the higher ZeRO stages that fit without it only where it is OFFLOAD_MIN_GAIN (2 %) faster than
the lowest of them: it moves a layer's activations over the host link and back for every
micro-batch and pins host memory, which a gain within the model's error does not repay. Over
NVLink-C2C (Grace Blackwell) the copies hide behind the compute, over PCIe they mostly do not.

Pruning: memory is evaluated before time, and time only for layouts that fit. More sharding
never makes a step faster in the model (ZeRO 0 and 1 cost the same; 2 and 3 add
communication per micro-batch), so for each other choice only the lowest stage that fits is
kept. With dp·cp = 1 ZeRO changes nothing and only stage 0 is tried. Step times are cached on
what they depend on (ZeRO 0 and 1 alike).

Ranking: iteration time ascending (throughput descending, the model and GPU count being fixed),
ties broken by lower memory, then by the layout's fields.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from trainyard.planner.collectives import LinkSet
from trainyard.planner.compute import StepTime, step_time
from trainyard.planner.errors import PlannerError
from trainyard.planner.hardware import GPU, has_fused_attention
from trainyard.planner.layout import RECOMPUTE_MODES, ParallelLayout, Recompute
from trainyard.planner.memory import GB, MemoryBreakdown, layer_activation_bytes, memory_per_gpu
from trainyard.planner.model import Model
from trainyard.planner.pipeline_split import pipeline_options, stage_ends

__all__ = [
    "HEADROOM",
    "MICRO_BATCHES",
    "OFFLOAD_MIN_GAIN",
    "VIRTUAL_STAGES",
    "Plan",
    "best",
    "budgets",
    "context_parallel_options",
    "fewest_offload_layers",
    "ranked",
    "search",
]

HEADROOM: Final = 0.95  # share of GPU memory a plan may use (see the module docstring)
# How much faster an offloading plan must be than sharding further without it (docstring).
OFFLOAD_MIN_GAIN: Final = 0.02
MICRO_BATCHES: Final = (1, 2, 4, 8)
VIRTUAL_STAGES: Final = (1, 2, 3, 4)
# What a step time depends on: tp, cp, pp, dp, micro_batch, virtual_stages, recompute, ZeRO
# (0 and 1 alike), first and last stage layers, ep, offloaded layers.
_Key = tuple[int, int, int, int, int, int, str, int, int, int, int, int]
# Context parallelism: only for sequences this long, and never below this many tokens a rank.
CP_MIN_SEQ: Final = 8192
CP_MIN_TOKENS: Final = 4096
_RECOMPUTES: Final[tuple[Recompute, ...]] = ("none", "norms", "selective", "full")
# Times one layout (`compute.step_time` with the topology of the placement at hand).
Timer = Callable[[ParallelLayout], StepTime]


@dataclass(frozen=True)
class Plan:
    """One fitting layout with its predicted memory (GB, most loaded GPU) and step time.

    `tokens_per_s` is global_batch·seq_len / iteration; `tflops_per_gpu` and `mfu` count model
    FLOPs (72-factor, no recompute), as `StepTime` does.
    """

    layout: ParallelLayout
    memory: MemoryBreakdown
    time: StepTime
    tokens_per_s: float
    tflops_per_gpu: float
    mfu: float


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _check_inputs(model: Model, num_gpus: int, gpu: GPU, nodes_of: int, top: int) -> None:
    for name, value in (("num_gpus", num_gpus), ("nodes_of", nodes_of), ("top", top)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise PlannerError(name, f"must be a positive integer, got {value!r}")
    if not isinstance(model, Model):
        raise PlannerError("model", f"must be a Model, got {type(model).__name__}")
    if not isinstance(gpu, GPU):
        raise PlannerError("gpu", f"must be a GPU, got {type(gpu).__name__}")


def _tp_options(model: Model, nodes_of: int) -> list[int]:
    sizes = (model.heads, model.kv_heads, model.hidden, model.ffn_hidden)
    return [t for t in _divisors(min(nodes_of, model.heads)) if all(s % t == 0 for s in sizes)]


def context_parallel_options(model: Model, ranks: int) -> list[int]:
    """cp sizes tried for `ranks` = dp·cp GPUs (see the module docstring)."""
    out = [1]
    if model.seq_len >= CP_MIN_SEQ:
        for cp in _divisors(ranks)[1:]:
            if model.seq_len % (2 * cp) == 0 and model.seq_len // cp >= CP_MIN_TOKENS:
                out.append(cp)
    return out


def _shapes(model: Model, num_gpus: int, nodes_of: int) -> list[tuple[int, int, int]]:
    """(tp, pp, dp·cp) triples with tp·pp·dp·cp = num_gpus and some split of dp·cp whose dp
    divides the batch. (pp may be a count with uneven stages: see
    `pipeline_split.pipeline_options`.)"""
    out = []
    pps = sorted({pp for pp, _ in pipeline_options(model.layers)})
    for tp in _tp_options(model, nodes_of):
        for pp in pps:
            if num_gpus % (tp * pp):
                continue
            ranks = num_gpus // (tp * pp)
            cps = context_parallel_options(model, ranks)
            if any(model.global_batch % (ranks // cp) == 0 for cp in cps):
                out.append((tp, pp, ranks))
    return out


def _expert_options(model: Model, ranks: int) -> list[int]:
    """ep sizes tried for a stage of `ranks` = tp·cp·dp GPUs: [1] for a dense model."""
    if not model.is_moe:
        return [1]
    return _divisors(math.gcd(model.experts, ranks))


def _fits(model: Model, layout: ParallelLayout, budget: float) -> MemoryBreakdown | None:
    mem = memory_per_gpu(model, layout)
    return mem if mem.total <= budget else None


def fewest_offload_layers(
    model: Model,
    layout: ParallelLayout,
    budget: float,
    host_budget: float,
    memory: MemoryBreakdown | None = None,
) -> tuple[ParallelLayout, MemoryBreakdown] | None:
    """`layout` with the fewest layers' activations offloaded to host memory that bring its most
    loaded GPU within `budget` GB, and its memory; None when offloading is not allowed (pipeline
    stages, recompute, no host memory budget) or no count below the layer count fits, in GPU
    memory and in `host_budget` GB of host memory per GPU (see the module docstring). `memory`
    is the layout's own, when the caller has it."""
    if host_budget <= 0 or layout.pp > 1 or layout.recompute != "none":
        return None
    mem = memory if memory is not None else memory_per_gpu(model, layout)
    if mem.total <= budget:
        return None
    per_layer = layer_activation_bytes(model, layout) / GB
    # the offloaded layers but one leave the GPU (`offload.resident_layers`)
    k = max(2, math.ceil((mem.total - budget) / per_layer) + 1) if per_layer > 0 else model.layers
    for count in (k, k + 1):  # the rounding of the bound
        if count >= model.layers:
            return None
        offloaded = dataclasses.replace(layout, offload_layers=count)
        mem = memory_per_gpu(model, offloaded)
        if mem.total <= budget:
            return (offloaded, mem) if mem.offloaded <= host_budget else None
    return None


def _smallest_fitting_count(model: Model, num_gpus: int, gpu: GPU, nodes_of: int) -> int | None:
    """The smallest GPU count above num_gpus with a layout that fits (leanest options: ZeRO-3
    or -1 and full recompute, or without pipeline stages offloading activations)."""
    budget, host = budgets(gpu)
    counts = set()
    # the pipeline depths the search tries, uneven stages included (40 layers on 3 stages)
    for pp, option in pipeline_options(model.layers):
        ends = stage_ends(model.layers, pp, 1, option)
        if ends is None:
            continue
        for tp in _tp_options(model, nodes_of):
            for dp in _divisors(model.global_batch):
                if tp * pp * dp > num_gpus:
                    counts.add((tp * pp * dp, tp, pp, dp, ends))
    for n, tp, pp, dp, (first, last) in sorted(counts):
        zero = (3 if pp == 1 else 1) if dp > 1 else 0
        ep = max(_expert_options(model, tp * dp))
        lean = ParallelLayout(
            tp=tp, pp=pp, dp=dp, zero=zero, recompute="full", sequence_parallel=tp > 1, ep=ep,
            first_stage_layers=first, last_stage_layers=last,
        )  # fmt: skip
        if _fits(model, lean, budget) is not None:
            return n
        if fewest_offload_layers(model, dataclasses.replace(lean, recompute="none"), budget, host):
            return n
    return None


def budgets(gpu: GPU) -> tuple[float, float]:
    """(GPU memory, host memory per GPU for offloading) a plan may use, GB: HEADROOM of each;
    no host budget when the GPU's host link is unknown."""
    return HEADROOM * gpu.memory_gb, HEADROOM * gpu.host_memory_gb * (gpu.host_link_gb_s > 0)


def search(
    model: Model,
    num_gpus: int,
    gpu: GPU,
    nodes_of: int = 8,
    top: int = 10,
    *,
    flash_attention: bool = True,
    links: LinkSet | None = None,
) -> list[Plan]:
    """The `top` fastest layouts of `model` on `num_gpus` `gpu`s that fit in memory, best first.

    `nodes_of` is GPUs per node (tensor parallelism stays inside a node); `flash_attention`
    says whether the job's attention is fused (see the module docstring); `links` are measured
    links to time collectives on (`trainyard.planner.links`). Raises `PlannerError`
    naming the field for bad input, or when no layout is valid or fits (saying what limits and,
    when one exists, the smallest GPU count that would fit).
    """
    _check_inputs(model, num_gpus, gpu, nodes_of, top)
    shapes = _shapes(model, num_gpus, nodes_of)
    if not shapes:
        tps = _tp_options(model, nodes_of)
        raise PlannerError(
            "num_gpus",
            f"{num_gpus} GPUs cannot be split as tp x pp x dp for {model.name!r}: tp must be one "
            f"of {tps}, pp a divisor of layers ({model.layers}) or a count with lighter first "
            f"and last stages, and dp a divisor of global_batch ({model.global_batch}); pick a "
            "GPU count of that form",
        )
    plans = _uniform_plans(model, gpu, shapes, nodes_of, flash_attention, links)
    if not plans:
        smallest = _smallest_fitting_count(model, num_gpus, gpu, nodes_of)
        offload = ", or offloading activations to the host" if budgets(gpu)[1] else ""
        hint = (
            f"the smallest GPU count that fits is {smallest}"
            if smallest is not None
            else "no GPU count fits: use a GPU with more memory or a smaller model/batch"
        )
        raise PlannerError(
            "num_gpus",
            f"no layout of {model.name!r} on {num_gpus} x {gpu.name} fits in "
            f"{HEADROOM:.0%} of {gpu.memory_gb:g} GB per GPU (even with ZeRO-3 and full "
            f"recompute{offload}); {hint}",
        )
    return ranked(plans)[:top]


def ranked(plans: list[Plan]) -> list[Plan]:
    """`plans` fastest first (`_rank`), without those a faster one repeats but for its
    recompute mode: a lighter mode that fits is faster, and the heavier one's lower memory
    ranks nothing here (a plan with another ZeRO stage or offloading is another layout and
    stays)."""
    seen: set[ParallelLayout] = set()
    out = []
    for plan in sorted(plans, key=_rank):
        key = dataclasses.replace(plan.layout, recompute="none")
        if key not in seen:
            seen.add(key)
            out.append(plan)
    return out


def _rank(plan: Plan) -> tuple[float, float, int, int, int, int, int, int, int, int, int]:
    lay = plan.layout
    return (
        plan.time.iteration_s,
        plan.memory.total,
        lay.tp,
        lay.cp,
        lay.pp,
        lay.micro_batch,
        lay.zero,
        RECOMPUTE_MODES.index(lay.recompute),
        lay.virtual_stages,
        lay.ep,
        lay.offload_layers,
    )


def _uniform_plans(
    model: Model,
    gpu: GPU,
    shapes: Sequence[tuple[int, int, int]],
    nodes_of: int,
    flash_attention: bool,
    links: LinkSet | None = None,
) -> list[Plan]:
    """`_enumerate` timed on uniform nodes of `nodes_of` GPUs (what `search` ranks)."""

    def timer(layout: ParallelLayout) -> StepTime:
        return step_time(model, layout, gpu, nodes_of, links=links)

    return _enumerate(model, gpu, shapes, timer, flash_attention=flash_attention)


def _enumerate(
    model: Model,
    gpu: GPU,
    shapes: Sequence[tuple[int, int, int]],
    timer: Timer,
    *,
    flash_attention: bool = True,
    context_parallel: bool = True,
) -> list[Plan]:
    """Every fitting plan over `shapes` (tp, pp, dp·cp), unsorted; `timer` times a layout.

    Shared by `search` (uniform nodes) and `trainyard.planner.allocation` (actual placement,
    `context_parallel=False`: its group topologies know tp, dp and pp only). `timer` must depend
    on a layout only through the fields of `_Key` (results are cached on those).
    """
    flash_attention = flash_attention and has_fused_attention(gpu)  # (Volta has none)
    budget = budgets(gpu)
    times: dict[_Key, StepTime] = {}
    plans: list[Plan] = []
    recomputes = tuple(r for r in _RECOMPUTES if not (flash_attention and r == "selective"))
    stage_options: dict[int, list[int]] = {}
    for pp, first in pipeline_options(model.layers):
        stage_options.setdefault(pp, []).append(first)
    for tp, pp, ranks in shapes:
        cps = context_parallel_options(model, ranks) if context_parallel else [1]
        for cp in cps:
            dp = ranks // cp
            for first in stage_options.get(pp, [0]):
                _enumerate_shape(
                    model, timer, budget, times, plans, recomputes, flash_attention,
                    (tp, cp, pp, dp, first),
                )  # fmt: skip
    return plans


def _enumerate_shape(
    model: Model,
    timer: Timer,
    budget: tuple[float, float],
    times: dict[_Key, StepTime],
    plans: list[Plan],
    recomputes: tuple[Recompute, ...],
    flash_attention: bool,
    shape: tuple[int, int, int, int, int],
) -> None:
    tp, cp, pp, dp, first = shape
    experts = _expert_options(model, tp * cp * dp)
    # the end stages' layers at each interleaving factor that fits (the same for every mb)
    ends_at = {v: stage_ends(model.layers, pp, v, first) for v in VIRTUAL_STAGES}
    for mb in MICRO_BATCHES:
        if model.global_batch % (dp * mb):
            continue
        m = model.global_batch // (dp * mb)
        for v in VIRTUAL_STAGES:
            ends = ends_at[v]
            if ends is None or (v > 1 and (pp == 1 or m % pp)):
                continue
            for recompute, ep in itertools.product(recomputes, experts):
                base = ParallelLayout(
                    tp=tp,
                    cp=cp,
                    pp=pp,
                    dp=dp,
                    micro_batch=mb,
                    recompute=recompute,
                    virtual_stages=v,
                    sequence_parallel=tp > 1,
                    tp_comm_overlap=tp > 1,
                    flash_attention=flash_attention,
                    first_stage_layers=ends[0],
                    last_stage_layers=ends[1],
                    ep=ep,
                )
                plans += _best_zero(model, timer, budget, times, base)


def _best_zero(
    model: Model,
    timer: Timer,
    budget: tuple[float, float],
    times: dict[_Key, StepTime],
    base: ParallelLayout,
) -> list[Plan]:
    """`base` with the lowest ZeRO stage that fits, and with the lowest that fits offloading
    activations when that is lower (see the module docstring); `budget` is (GPU memory, host
    memory per GPU) in GB."""
    if base.dp * base.cp == 1:
        stages: tuple[int, ...] = (0,)
    else:
        stages = (0, 1, 2, 3) if base.pp == 1 else (0, 1)
    offloading: Plan | None = None
    for zero in stages:
        layout = dataclasses.replace(base, zero=zero)
        mem = memory_per_gpu(model, layout)
        if mem.total > budget[0]:
            if offloading is None:
                offloaded = fewest_offload_layers(model, layout, *budget, memory=mem)
                if offloaded is not None:
                    offloading = _timed(model, timer, times, *offloaded)
            continue
        plain = _timed(model, timer, times, layout, mem)
        if offloading is None:
            return [plain]
        gain = 1.0 - offloading.time.iteration_s / plain.time.iteration_s
        return [offloading, plain] if gain >= OFFLOAD_MIN_GAIN else [plain]
    return [offloading] if offloading is not None else []


def _timed(
    model: Model,
    timer: Timer,
    times: dict[_Key, StepTime],
    layout: ParallelLayout,
    mem: MemoryBreakdown,
) -> Plan:
    """`layout` as a plan, its step time from `times` or `timer` (cached on `_Key`)."""
    key: _Key = (
        layout.tp, layout.cp, layout.pp, layout.dp, layout.micro_batch, layout.virtual_stages,
        layout.recompute, max(layout.zero, 1) if layout.zero else 0,
        layout.first_stage_layers, layout.last_stage_layers, layout.ep, layout.offload_layers,
    )  # fmt: skip
    if key not in times:
        times[key] = timer(layout)
    t = times[key]
    tokens = model.tokens_per_iteration / t.iteration_s
    return Plan(layout, mem, t, tokens, t.tflops_per_gpu, t.mfu)


def best(
    model: Model,
    num_gpus: int,
    gpu: GPU,
    nodes_of: int = 8,
    *,
    flash_attention: bool = True,
    links: LinkSet | None = None,
) -> Plan:
    """The fastest fitting layout (`search(...)[0]`); raises `PlannerError` like `search`."""
    found = search(
        model, num_gpus, gpu, nodes_of, top=1, flash_attention=flash_attention, links=links
    )
    return found[0]
