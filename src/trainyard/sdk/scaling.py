"""Batch and learning-rate arithmetic for a job whose world size changes between attempts.

This module owns the rules that keep training the same when trainyard restarts a job at
another size: the global batch stays fixed (each rank's share, and gradient accumulation when
that share does not fit in memory, follow from the world size), or the learning rate is
scaled with the world size (``linear`` or ``sqrt``) when the per-rank batch is kept instead.
Pure arithmetic, no torch.
"""

from __future__ import annotations

import math
from typing import Literal

Rule = Literal["linear", "sqrt"]


def _positive(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: expected an integer >= 1, got {value!r}")


def local_batch(global_batch: int, world: int) -> int:
    """Each rank's batch when `world` ranks share `global_batch`; `ValueError` when it does
    not divide evenly."""
    _positive("global_batch", global_batch)
    _positive("world", world)
    if global_batch % world:
        raise ValueError(
            f"global batch {global_batch} is not divisible by world size {world} "
            f"({global_batch} = {global_batch // world} x {world} + {global_batch % world})"
        )
    return global_batch // world


def accumulation(global_batch: int, world: int, max_local: int) -> tuple[int, int]:
    """(local batch, accumulation steps) with ``local x steps x world == global_batch`` and
    ``local <= max_local``: the fewest accumulation steps (largest local batch) that fit."""
    per_rank = local_batch(global_batch, world)
    _positive("max_local", max_local)
    steps = math.ceil(per_rank / max_local)
    while per_rank % steps:  # ends at steps == per_rank (local batch 1) at the latest
        steps += 1
    return per_rank // steps, steps


def scale_lr(base_lr: float, base_world: int, world: int, rule: Rule = "linear") -> float:
    """The learning rate for `world` ranks given `base_lr` tuned at `base_world` ranks (with
    the same per-rank batch): ``linear`` multiplies it by ``world / base_world`` (Goyal et al.,
    for SGD), ``sqrt`` by the square root of that (often better for Adam)."""
    _positive("base_world", base_world)
    _positive("world", world)
    if not math.isfinite(base_lr) or base_lr < 0:
        raise ValueError(f"base_lr: expected a finite number >= 0, got {base_lr!r}")
    ratio = world / base_world
    if rule == "linear":
        return base_lr * ratio
    if rule == "sqrt":
        return base_lr * math.sqrt(ratio)
    raise ValueError(f"rule: expected 'linear' or 'sqrt', got {rule!r}")
