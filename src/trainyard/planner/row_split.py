"""A row's stated GPU count and data-parallel degree (`stated_gpu_count`,
`stated_data_parallel`), and how a row of a published table gives its tensor / pipeline /
data-parallel split when it leaves degrees out: the GPU count over the degrees it states, a
sharded (ZeRO-2, ZeRO-3, FSDP) run's data parallelism, an `fsdp` size, or a model-parallel
size split as SC'21 prescribes (`missing_split`, `split_from_model_parallel`); and its
micro-batch when it does not state one: from its gradient accumulation steps, or for a fully
sharded run the local batch at once or the largest part of it that fits
(`accumulated_micro_batch`, `fsdp_micro_batch`).

This module owns those readings; `trainyard.planner.rows` owns the rest of a row's meaning and
calls it. Pure: it reads the cells of one row (and prices memory for `fsdp_micro_batch`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Final

from trainyard.planner.cell_names import fsdp_cell
from trainyard.planner.cells import count
from trainyard.planner.errors import PlannerError
from trainyard.planner.hardware import GPU
from trainyard.planner.layout import ParallelLayout
from trainyard.planner.memory import memory_per_gpu
from trainyard.planner.model import Model
from trainyard.planner.search import budgets

__all__ = [
    "accumulated_micro_batch",
    "fsdp_micro_batch",
    "missing_split",
    "split_from_model_parallel",
    "stated_data_parallel",
    "stated_gpu_count",
]

_TP_PER_NODE: Final = 8  # the tensor-parallel degree a model-parallel size fills first


def stated_gpu_count(row: Mapping[str, str | None]) -> int | None:
    """The row's GPU count: num_gpus, else num_nodes x gpus_per_node when both are given."""
    nodes, per_node = count(row, "num_nodes"), count(row, "gpus_per_node")
    return count(row, "num_gpus") or (nodes * per_node if nodes and per_node else None)


def stated_data_parallel(row: Mapping[str, str | None]) -> int | None:
    """The data-parallel degree the row states: data_parallel, else an `fsdp` size that stands
    for it ("FSDP 8, TP 8" on 64 GPUs); None when neither is given."""
    return count(row, "data_parallel") or fsdp_cell(row) or None


def missing_split(
    row: Mapping[str, str | None],
    tp: int | None,
    pp: int | None,
    cp: int,
    dp: int | None,
    gpus: int | None,
    gpus_per_node: int,
    sharded: bool,
) -> tuple[int, int, int | None] | None:
    """(tp, pp, dp) of a row that leaves tp or pp out, when the rest leaves one reading: the
    GPU count over the degrees it states ("TP 8, DP 64" on 512 GPUs: pp 1), or a `sharded`
    run (ZeRO-2, or ZeRO-3 / FSDP: sharding over the data-parallel ranks, which a table
    states beside its tensor or pipeline degree when it has one) that states neither, all data
    parallel (PyTorch FSDP's SHARD_GRAD_OP tables, DeepSpeed ZeRO-2 runs). An `fsdp` size stands
    for the data-parallel degree the row does not state ("FSDP 8, TP 8" on 64 GPUs: pp 1).
    None: ambiguous."""
    mp = count(row, "model_parallel_size")
    if mp is not None:
        return _split_of_model_parallel(mp, (tp, pp), cp, dp, gpus, gpus_per_node)
    dp = dp or stated_data_parallel(row)
    if gpus is None:
        return None
    if tp is None and pp is None:
        if dp is None and sharded:
            dp = gpus // cp
        if dp is not None and dp * cp == gpus:
            return 1, 1, dp
        return None
    if dp is None:
        return None
    known = (tp or pp or 1) * cp * dp
    if gpus % known:
        return None
    other = gpus // known
    return (tp, other, dp) if tp is not None else (other, pp or 1, dp)


def split_from_model_parallel(row: Mapping[str, str | None]) -> bool:
    """Whether the row's tensor / pipeline split is read from its `model_parallel_size`
    (`_split_of_model_parallel`) rather than stated."""
    degrees = (count(row, "tensor_parallel"), count(row, "pipeline_parallel"))
    return None in degrees and count(row, "model_parallel_size") is not None


def _split_of_model_parallel(
    mp: int, degrees: tuple[int | None, int | None], cp: int, dp: int | None,
    gpus: int | None, gpus_per_node: int,
) -> tuple[int, int, int | None]:  # fmt: skip
    """(tp, pp, dp) of a row that states the model-parallel size tp x pp but not both
    degrees: the one it states fixes the other; stating neither, tensor parallelism takes
    the GPUs of a node (at most 8) that divide it and pipeline parallelism the rest, as
    Narayanan et al. (SC'21, section 3.3, takeaway 1) prescribe and their Table 1 ran (the
    Megatron-LM README of 2021 lists only the model-parallel size of those same runs)."""
    tp, pp = degrees
    given = tp or pp
    if given is not None and mp % given:
        raise PlannerError(
            "model_parallel_size",
            f"must be a multiple of the stated {'tensor' if tp else 'pipeline'}_parallel "
            f"({given}), got {mp}",
        )
    if tp is not None:
        pp = mp // tp
    elif pp is not None:
        tp = mp // pp
    else:
        tp = math.gcd(mp, min(gpus_per_node, _TP_PER_NODE))
        pp = mp // tp
    if dp is None and gpus is not None:
        if gpus % (mp * cp):
            raise PlannerError(
                "model_parallel_size",
                f"{mp} x context_parallel {cp} must divide num_gpus ({gpus})",
            )
        dp = gpus // (mp * cp)
    return tp, pp, dp


def accumulated_micro_batch(row: Mapping[str, str | None], model: Model, dp: int) -> int | None:
    """The micro-batch a row's gradient accumulation steps give (global batch over dp x
    steps, Megatron-Bridge's GA), or None when it states none."""
    steps = count(row, "gradient_accumulation_steps")
    if steps is None:
        return None
    if model.global_batch % (dp * steps):
        raise PlannerError(
            "gradient_accumulation_steps",
            f"global batch {model.global_batch} is not dp ({dp}) x {steps} steps x a whole "
            "micro-batch; give micro_batch_size",
        )
    return model.global_batch // (dp * steps)


def fsdp_micro_batch(model: Model, layout: ParallelLayout, gpu: GPU) -> int:
    """The micro-batch of a fully sharded run that does not state one: its whole local batch
    (global batch / dp), or the largest divisor of it that fits `gpu` with whole layers
    recomputed (the recompute itself is inferred after). PyTorch FSDP gathers every layer's
    weights again for each micro-batch, so its runs accumulate gradients only where memory
    makes them (torchtitan's default runs the local batch at once); read as 1, a 64-rank
    run of a 175B model spends most of its time gathering."""
    local = model.global_batch // layout.dp
    budget = budgets(gpu)[0]
    for mb in sorted((d for d in range(1, local + 1) if local % d == 0), reverse=True):
        lean = dataclasses.replace(layout, micro_batch=mb, recompute="full")
        if memory_per_gpu(model, lean).total <= budget:
            return mb
    return 1
