"""Time of the fused (flash) attention core: what fraction of the 16-bit peak its kernels reach.

This module owns `fused_attention_times`, the seconds the attention core of one layer takes
per micro-batch, forward and backward, when it runs as one fused kernel (FlashAttention, or
the cuDNN fused attention that Transformer Engine and so Megatron-Core call by default). The
layer's GEMMs run at an efficiency that grows with the hidden size
(`compute.gemm_efficiency`); a fused attention kernel does not see the hidden size at all.
Its tiles are one head's queries against one head's keys, so its speed depends on the head
dimension and on how many keys each query block sweeps, and it is slower than a large GEMM
because it interleaves a softmax, a running rescale and (backward) a recomputation of the
scores with its matrix multiplies.

Two published facts set it:

* **Backward work.** The backward kernel recomputes the scores Q·Kᵀ from the saved softmax
  statistics and runs five matrix multiplies to the forward's two, 2.5 times the forward's
  FLOPs (Dao, FlashAttention-2, arXiv:2307.08691, §3.1.2 and its benchmarks' FLOP count, which
  the FlashAttention-3 paper's figures use too). The planner's FLOP counts keep Megatron's
  convention (backward twice the forward, as the published figures are computed): only the
  time carries the 2.5.
* **Kernel throughput.** Shah et al., FlashAttention-3 (arXiv:2407.08608), Figures 5 and 6:
  the cuDNN fused attention on an H100 SXM5 in BF16 at head dimension 128 (batch x sequence =
  16K tokens, 2,048-wide heads), forward with a causal mask and backward without one, in
  TFLOP/s at sequence lengths 512 to 16K. `CURVE` holds them as fractions of the H100's
  989.4 TFLOP/s dense peak. The two columns nearly coincide (the causal forward pays for its
  masked diagonal tiles what the backward pays for its extra work); the paper has no causal
  backward figure, so the causal backward is priced as the non-causal one (an upper bound on
  its speed). Other GPUs are priced at the same fractions of their own 16-bit peak: no
  comparable published sweep exists for them (A100's FlashAttention-2 sweep in
  arXiv:2307.08691 is of a different kernel); `bench/gemm_curve.py` times the same sweep on
  a lent GPU to check them.

**Kernel generation.** The curve is of cuDNN's fused attention, the kernel Transformer Engine
(and so Megatron-Core) calls, of FlashAttention-3's generation on Hopper. FlashAttention-2 and
the kernels of its generation (PyTorch SDPA's flash backend, xFormers), written for Ampere's
synchronous tensor cores, reach "only 35 % utilization on the H100" (the FlashAttention-3
paper's abstract, arXiv:2407.08608) where the curve's longest kernels reach 54 %: on Hopper and
later GPUs they run at `FA2_ON_HOPPER` of the curve's speed (`kernel_speed`). On Ampere they
are that GPU's native kernels and keep the curve.

The sequence length a kernel sees is the number of keys a query block sweeps in one call: the
sequence over the context-parallel ranks (ring attention passes blocks of s/c keys), or the
window of a sliding-window layer. Below 512 tokens the curve's first point is kept (an upper
bound: shorter kernels are slower still), above 16K its last.
"""

from __future__ import annotations

import bisect
import math
from typing import Final

__all__ = [
    "BACKWARD_WORK", "CURVE", "FA2_ON_HOPPER", "fused_attention_efficiency",
    "fused_attention_times", "kernel_speed",
]  # fmt: skip

BACKWARD_WORK: Final = 2.5  # backward FLOPs of a fused attention over its forward's

H100_DENSE_BF16: Final = 989.4  # TFLOP/s, the peak the figures are fractions of
# (sequence length, forward TFLOP/s with a causal mask, backward TFLOP/s), cuDNN, H100 SXM5,
# BF16, head dimension 128: arXiv:2407.08608 Fig. 5 (causal, hdim 128) and Fig. 6 (hdim 128)
_MEASURED: Final = (
    (512, 315.0, 305.0),
    (1024, 410.0, 408.0),
    (2048, 484.0, 465.0),
    (4096, 518.0, 499.0),
    (8192, 529.0, 518.0),
    (16384, 539.0, 516.0),
)
CURVE: Final = tuple((n, fwd / H100_DENSE_BF16, bwd / H100_DENSE_BF16) for n, fwd, bwd in _MEASURED)
_LOG_N: Final = tuple(math.log2(n) for n, _f, _b in CURVE)


# FlashAttention-2's 35 % of an H100's peak over the curve's best forward (539 TFLOP/s)
FA2_ON_HOPPER: Final = 0.35 * H100_DENSE_BF16 / max(fwd for _n, fwd, _b in _MEASURED)


def kernel_speed(kernel: str, compute_capability: float) -> float:
    """How fast a fused kernel of `kernel`'s generation ("cudnn" or "fa2") runs against the
    curve on a GPU of `compute_capability` (module docstring): 1, or `FA2_ON_HOPPER` for
    FlashAttention-2's generation on Hopper (9.0) and later."""
    return FA2_ON_HOPPER if kernel == "fa2" and compute_capability >= 9.0 else 1.0


def fused_attention_efficiency(keys: float) -> tuple[float, float]:
    """(forward, backward) fraction of the 16-bit peak a fused attention kernel reaches when
    its query blocks sweep `keys` keys: `CURVE` interpolated in log2(keys), its end points
    kept beyond it."""
    if math.isnan(keys) or keys <= CURVE[0][0]:
        return CURVE[0][1], CURVE[0][2]
    if keys >= CURVE[-1][0]:
        return CURVE[-1][1], CURVE[-1][2]
    x = math.log2(keys)
    i = bisect.bisect_right(_LOG_N, x)
    lo, hi = CURVE[i - 1], CURVE[i]
    w = (x - _LOG_N[i - 1]) / (_LOG_N[i] - _LOG_N[i - 1])
    return lo[1] + w * (hi[1] - lo[1]), lo[2] + w * (hi[2] - lo[2])


def fused_attention_times(
    forward_flops: float, keys: float, peak16: float, speed: float = 1.0
) -> tuple[float, float]:
    """(forward, backward) seconds of a fused attention core whose forward computes
    `forward_flops` (the whole core, before any causal saving): the backward does
    `BACKWARD_WORK` times the forward's work, each at its efficiency of
    `fused_attention_efficiency(keys)` on a GPU of `peak16` FLOP/s, times `speed`
    (`kernel_speed`)."""
    fwd, bwd = fused_attention_efficiency(keys)
    rate = peak16 * speed
    return forward_flops / (rate * fwd), BACKWARD_WORK * forward_flops / (rate * bwd)
