"""The names a published table may give a GPU, a sharding, an MLP, a precision, an attention
kernel, a count of attention FLOPs or a kind of training, read from one cell of one row.

This module owns those vocabularies; `trainyard.planner.cells` owns how a cell is found and
read as text, a number or yes / no. A longer cell ("ZeRO-1 (distributed optimizer)", "SwiGLU
FFN") is read by the names it contains (`cells.first_named`); a cell that names none raises
`PlannerError` naming its column.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from trainyard.planner.cells import FALSE, TRUE, Row, count, first_named, flag, folded, row_cell
from trainyard.planner.errors import PlannerError
from trainyard.planner.hardware import CATALOGUE
from trainyard.planner.layout import AttentionKernel
from trainyard.planner.model import AttentionCount, Precision

__all__ = [
    "SHARDING_NAMES",
    "attention_flops_cell",
    "flash_cell",
    "fsdp_cell",
    "gpu_name",
    "mlp_cell",
    "names_adapters",
    "precision_cell",
    "sharding_cell",
]

# Training that the planner does not price: adapters (LoRA, PEFT) on a frozen model.
_ADAPTERS: Final = re.compile(r"\b(lora|qlora|peft|adapters?)\b", re.IGNORECASE)


def names_adapters(text: str) -> bool:
    """Whether `text` (a `training` cell, a heading) names adapter training: LoRA, PEFT."""
    return bool(_ADAPTERS.search(text))


# What a `flash_attention` cell may name instead of yes / no: a fused attention kernel
# (FlashAttention 1-3, cuDNN's or Transformer Engine's fused attention, PyTorch's SDPA,
# xFormers' memory-efficient attention), or the unfused one that stores the scores.
_FUSED_ATTENTION: Final = ("flash", "fa1", "fa2", "fa3", "cudnn", "fused", "sdpa", "xformers",
                           "memeff", "memoryefficient", "te")  # fmt: skip
_UNFUSED_ATTENTION: Final = ("eager", "math", "unfused", "naive", "standard", "none")


def flash_cell(row: Row) -> bool | None:
    """The `flash_attention` cell: yes / no, or the kernel it names ("FlashAttention-2",
    "cuDNN fused", "SDPA": fused; "eager": the scores are stored)."""
    text = row_cell(row, "flash_attention").lower()
    if not text or text in TRUE or text in FALSE:
        return flag(row, "flash_attention")
    name = folded(text)
    if name.startswith(_UNFUSED_ATTENTION):
        return False
    if any(kernel in name for kernel in _FUSED_ATTENTION):
        return True
    raise PlannerError(
        "flash_attention",
        f"must be yes or no (or the kernel: flash, cudnn, sdpa, eager), got {text!r}",
    )


# Kernels of FlashAttention-2's generation (`layout.AttentionKernel` "fa2"): FlashAttention 1
# and 2, PyTorch's SDPA (its flash backend, unless the cell names cuDNN), xFormers'
# memory-efficient attention. Any other fused kernel is of cuDNN's (FlashAttention-3, TE).
_FA2_GENERATION: Final = ("fa1", "fa2", "flashattention1", "flashattention2", "flashattn1",
                          "flashattn2", "flashattentionv2", "sdpa", "xformers", "memeff",
                          "memoryefficient")  # fmt: skip


def attention_kernel_cell(row: Row) -> AttentionKernel:
    """The generation of the fused kernel a `flash_attention` cell names: "fa2" for
    FlashAttention-2's ("FlashAttention-2", "SDPA", "xFormers"), else "cudnn" (yes, cuDNN,
    FlashAttention-3, Transformer Engine, or nothing said)."""
    name = folded(row_cell(row, "flash_attention")).replace(".", "")
    if "cudnn" in name or "fa3" in name or "attention3" in name:
        return "cudnn"
    return "fa2" if any(kernel in name for kernel in _FA2_GENERATION) else "cudnn"


# How a table counted the attention core in its FLOP figures: the whole score matrix (SC'21,
# the Megatron-LM README tables), its causal lower triangle (Megatron-LM's logged TFLOP/s
# since 8873b55d6a, 2025-03-06), or not at all (an MFU of 6 x parameters x tokens); under its
# `causal_flops` name the cell may hold yes / no.
_FULL_COUNT: Final = ("full", "whole", "square", "noncausal")
_NO_COUNT: Final = ("none", "6n", "6nd", "excluded", "notcounted", "noattention", "without")
_CAUSAL_COUNT: Final = ("causal", "half", "triangle", "masked")


def attention_flops_cell(row: Row) -> AttentionCount:
    """How the row's FLOP figures count the attention core (the `attention_flops` cell):
    "full" (also when unstated), "causal" or "none"."""
    text = row_cell(row, "attention_flops")
    name = folded(text)
    if not name or text.lower() in FALSE:
        return "full"
    if text.lower() in TRUE:
        return "causal"
    if name.startswith(_FULL_COUNT):
        return "full"
    if name.startswith(_NO_COUNT):
        return "none"
    if any(word in name for word in _CAUSAL_COUNT):
        return "causal"
    raise PlannerError(
        "attention_flops",
        f"must be full (the whole score matrix, SC'21's count), causal (its lower half, "
        f"Megatron-LM's count since 2025) or none (6 x parameters x tokens), got {text!r}",
    )


# Substrings of `gpu_type`, most specific first, and the catalogue entry each means.
_GPU_NAMES: Final[tuple[tuple[str, str], ...]] = (
    ("H100-PCIE", "H100-PCIe"),
    ("H100 PCIE", "H100-PCIe"),
    ("H100", "H100-SXM"),
    ("H800", "H800"),
    ("A800", "A800-80GB"),
    ("H200", "H200"),
    ("GB200", "GB200"),
    ("B200", "B200"),
    ("GB300", "GB300"),
    ("B300", "B300"),
    ("A100-SXM4-40GB", "A100-40GB"),
    ("A100 40GB", "A100-40GB"),
    ("A100-40GB", "A100-40GB"),
    ("A100", "A100-80GB"),
    ("V100", "V100-32GB"),
    ("L40S", "L40S"),
)


# GPUs whose name contains a catalogue entry's but that differ from it in what the time model
# prices: refused rather than read as that one. (GH200's Hopper GPU is read as the H200, whose
# peaks and bandwidth it shares within 20 %.)
_NOT_IN_CATALOGUE: Final = (
    ("H100 NVL", "a PCIe card pair (94 GB, 835 TFLOP/s bf16), not the SXM part"),
)


def gpu_name(row: Row, catalogue: Mapping[str, object] | None = None) -> str:
    """The catalogue name of the row's `gpu_type` (the first known name it contains; an A100
    that says 40GB anywhere is the 40 GB one). A GPU the catalogue does not hold, or one whose
    name contains another's (`_NOT_IN_CATALOGUE`), is an error naming the ones it holds.
    `catalogue`: the built-in one with a user's GPUs (`--gpu-file`); a GPU it adds is found by
    its own name, the longest first, before the built-in names are tried."""
    names = list(catalogue if catalogue is not None else CATALOGUE)
    text = row_cell(row, "gpu_type").upper()
    if not text:
        raise PlannerError("gpu_type", f"no GPU named; give the run's: {', '.join(names)}")
    added = sorted((n for n in names if n not in CATALOGUE), key=len, reverse=True)
    if (own := next((n for n in added if n.upper() in text), None)) is not None:
        return own
    for key, what in _NOT_IN_CATALOGUE:
        if key in text:
            raise PlannerError(
                "gpu_type",
                f"{row_cell(row, 'gpu_type')!r} is {what}, which the catalogue does not hold; "
                f"name one of {', '.join(names)}",
            )
    name = next((entry for key, entry in _GPU_NAMES if key in text), None)
    if name == "A100-80GB" and re.search(r"\b40\s?GB\b", text):
        name = "A100-40GB"  # "A100 PCIe 40GB", "A100 (40 GB)"
    if name is None:
        raise PlannerError(
            "gpu_type",
            f"unknown GPU {row_cell(row, 'gpu_type')!r}; name one of {', '.join(names)} "
            "(or describe it in a --gpu-file)",
        )
    return name


# `sharding` cell -> (ZeRO stage, hybrid).
SHARDING_NAMES: Final[dict[str, tuple[int, bool]]] = {
    "none": (0, False),
    "ddp": (0, False),
    "zero0": (0, False),
    "zero1": (1, False),
    "distributed_optimizer": (1, False),
    "zero2": (2, False),
    "zero3": (3, False),
    "fsdp": (3, False),
    "hsdp": (3, True),
}
_SHARDING_FOLDED: Final = {folded(name): name for name in SHARDING_NAMES}
# Words that name a sharding (ZeRO's stages, PyTorch FSDP's strategies, FSDP2, Megatron's
# distributed optimizer), most specific first: the first family a cell names decides.
_SHARDING_WORDS: Final[tuple[tuple[tuple[str, ...], str], ...]] = (
    (("hsdp", "hybridshard"), "hsdp"),
    (("fsdp", "fullshard"), "fsdp"),
    (("zero3", "zerostage3"), "zero3"),
    (("zero2", "zerostage2", "shardgradop"), "zero2"),
    (("zero1", "zerostage1", "distributedoptimizer", "distopt"), "zero1"),
    (("zero0", "ddp", "noshard"), "none"),
)


def sharding_cell(row: Row) -> tuple[int, bool] | None:
    """(ZeRO stage, hybrid) the `sharding` cell names; None when it is empty. A bare "ZeRO"
    is stage 1."""
    cell = folded(row_cell(row, "sharding"))
    if not cell:
        return None
    if cell in ("0", "1", "2", "3"):  # a ZeRO stage column's number
        return int(cell), False
    name = _SHARDING_FOLDED.get("zero1" if cell == "zero" else cell)
    named = [name] if name else first_named(cell, _SHARDING_WORDS)
    if not named:
        raise PlannerError(
            "sharding",
            f"unknown sharding {row_cell(row, 'sharding')!r}; use one of "
            f"{', '.join(SHARDING_NAMES)}",
        )
    return SHARDING_NAMES[named[0]]


def fsdp_cell(row: Row) -> int | None:
    """An `fsdp` column, as Megatron-Bridge's performance tables have: the ranks the states
    are sharded over (a number; 1 or yes: all the data-parallel ranks, returned as 0), or None
    when no, 0 or empty."""
    text = row_cell(row, "fsdp").lower()
    if not text or text in FALSE:
        return None
    if text in TRUE or text == "-1":  # torchtitan's data_parallel_shard_degree -1: the rest
        return 0
    size = count(row, "fsdp")
    return None if size is None else (0 if size == 1 else size)


# Words that name an MLP (`Model.mlp`), most specific first: a gated GELU before GELU, the
# squared ReLUs before ReLU.
_MLP_WORDS: Final[tuple[tuple[tuple[str, ...], str], ...]] = (
    (("swiglu", "gatedsilu", "silu", "swish"), "swiglu"),
    (("geglu", "gatedgelu"), "geglu"),
    (("squaredrelu", "sqrelu", "relu2", "relu²"), "squared_relu"),
    (("gelu",), "gelu"),
    (("relu",), "relu"),
)


def mlp_cell(row: Row) -> str:
    """The MLP the `mlp` cell names ("" when empty): the first of `_MLP_WORDS` it contains,
    else the cell as written (for `Model` to refuse, naming the ones it knows)."""
    cell = row_cell(row, "mlp")
    named = first_named(folded(cell), _MLP_WORDS)
    return named[0] if named else cell.lower()


# Other spellings of the precisions: PyTorch's dtype names, and Transformer Engine's fp8
# formats and scaling recipes (Megatron-LM's --fp8-format / --fp8-recipe values).
_PRECISION_WORDS: Final[tuple[tuple[str, Precision], ...]] = (
    ("float16", "fp16"), ("half", "fp16"), ("float8", "fp8"), ("e4m3", "fp8"),
    ("e5m2", "fp8"), ("tensorwise", "fp8"), ("delayed", "fp8"),
)  # fmt: skip


def precision_cell(row: Row) -> Precision:
    """bf16, fp16 or fp8: the one of them the cell names ("bf16-mixed", "FP8 (hybrid)",
    "bfloat16", "MXFP8", "e4m3"); fp4 and fp32 training are not modelled (an error saying so)."""
    cell = row_cell(row, "precision").lower().replace("bfloat16", "bf16") or "bf16"
    names: tuple[Precision, ...] = ("bf16", "fp16", "fp8")
    named = [name for name in names if name in cell]
    if not named:
        named = sorted({name for word, name in _PRECISION_WORDS if word in cell})
    if len(named) == 1:
        return named[0]
    if "fp8" in named:  # fp8 training keeps 16-bit weights and attention: the cell says both
        return "fp8"
    other = any(word in cell for word in ("fp4", "fp32", "tf32", "float32"))
    unmodelled = "; the planner models no fp4 or fp32 training" if other else ""
    raise PlannerError("precision", f"must be bf16, fp16 or fp8, got {cell!r}{unmodelled}")
