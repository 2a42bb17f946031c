"""A training job's parallel layout (`ParallelLayout`) and its validity against a `Model`.

This module owns what a layout is and which layouts are legal for a model; the memory and time
models take a `ParallelLayout` that `ParallelLayout.check(model)` has accepted. It is frozen.
(Not the core's `topology.Layout`, the static index of a cluster: hence the longer name.)

Nomenclature: tp = tensor-parallel size, pp = pipeline stages, dp = data-parallel size,
micro_batch = sequences per micro-batch, virtual_stages = model chunks per GPU (interleaved
1F1B, Narayanan et al. SC'21 §2.2.2), zero = ZeRO stage over dp (Rajbhandari et al. 2020).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from trainyard.planner.errors import PlannerError
from trainyard.planner.model import Model

__all__ = ["RECOMPUTE_MODES", "ParallelLayout", "Recompute"]

Recompute = Literal["none", "selective", "full"]
RECOMPUTE_MODES: tuple[str, ...] = ("none", "selective", "full")


@dataclass(frozen=True)
class ParallelLayout:
    """How a job is split over GPUs and which memory-saving options it uses.

    `fp32_grads` keeps fp32 gradient buffers (Megatron's default "main grads"; with ZeRO 0 this
    gives its 18 bytes/param); otherwise gradients take 2 bytes per parameter.
    `flash_attention` runs the attention core as one fused kernel (FlashAttention, Dao et al.
    arXiv:2205.14135, or cuDNN's fused attention) that never stores the s x s score matrix;
    without it the scores, softmax and dropout go through memory (Megatron before 2022).
    """

    tp: int = 1
    pp: int = 1
    dp: int = 1
    micro_batch: int = 1
    zero: int = 0
    recompute: Recompute = "none"
    sequence_parallel: bool = False
    virtual_stages: int = 1
    fp32_grads: bool = False
    flash_attention: bool = False

    def __post_init__(self) -> None:
        for field in ("tp", "pp", "dp", "micro_batch", "virtual_stages"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise PlannerError(field, f"must be an integer >= 1, got {value!r}")
        if self.zero not in (0, 1, 2, 3) or isinstance(self.zero, bool):
            raise PlannerError("zero", f"ZeRO stage must be 0, 1, 2 or 3, got {self.zero!r}")
        if self.recompute not in RECOMPUTE_MODES:
            raise PlannerError(
                "recompute", f"must be one of {', '.join(RECOMPUTE_MODES)}, got {self.recompute!r}"
            )
        for flag in ("sequence_parallel", "fp32_grads", "flash_attention"):
            if not isinstance(getattr(self, flag), bool):
                raise PlannerError(flag, "must be true or false")
        if self.virtual_stages > 1 and self.pp == 1:
            raise PlannerError(
                "virtual_stages", "interleaving needs pipeline parallelism: set pp > 1 or v = 1"
            )

    @property
    def gpus(self) -> int:
        """GPUs the layout occupies (tp·pp·dp)."""
        return self.tp * self.pp * self.dp

    def microbatches(self, model: Model) -> int:
        """Micro-batches per pipeline per iteration: global_batch / (dp·micro_batch)."""
        return model.global_batch // (self.dp * self.micro_batch)

    def check(self, model: Model) -> None:
        """Raise `PlannerError` naming the field if this layout cannot run `model`."""
        t = self.tp
        for name, size in (
            ("heads", model.heads),
            ("kv_heads", model.kv_heads),
            ("hidden", model.hidden),
            ("ffn_hidden", model.ffn_hidden),
        ):
            if size % t:
                raise PlannerError(
                    "tp", f"tp ({t}) must divide the model's {name} ({size}); pick a divisor"
                )
        chunks = self.pp * self.virtual_stages
        if model.layers % chunks:
            raise PlannerError(
                "pp",
                f"layers ({model.layers}) must split evenly into pp x virtual_stages "
                f"({self.pp} x {self.virtual_stages}) chunks; pick a divisor of the layer count",
            )
        per_step = self.dp * self.micro_batch
        if model.global_batch % per_step:
            raise PlannerError(
                "micro_batch",
                f"global_batch ({model.global_batch}) must be a multiple of dp x micro_batch "
                f"({self.dp} x {self.micro_batch}); change micro_batch or dp",
            )
