"""GEMM efficiency curve of this machine's accelerator, measured with torch (issue 18; JSON
lines on stdout): `python bench/gemm_curve.py [--gpu H100-SXM] [--hidden 1024,2048,...]`.

What the planner assumes and this measures:
- `compute.gemm_efficiency`: a transformer layer's GEMMs of hidden size h reach
  g(h) = gemm_max * h / (h + half) of the dense peak, with `half` growing with the peak
  (calibrated on published runs, not measured on a GPU).
- `hardware.FP8_SPLIT_ACCUMULATOR`: Transformer Engine's fp8 backward GEMMs (split, higher-
  precision accumulator) take 1.15x the time of fast-accumulating ones on Ada and Hopper (a
  published report's middle, not a measurement).

For each hidden size h it times the MLP's up-projection as training runs it, on `--tokens`
tokens: the forward GEMM (tokens x h) @ (h x 4h), the input gradient (tokens x 4h) @ (4h x h)
and the weight gradient (h x tokens) @ (tokens x 4h), in bf16 (`torch.matmul`) and, where
the device has fp8 tensor cores (CUDA capability 8.9 or newer), in fp8 e4m3 through
`torch._scaled_mm` with fast accumulation on and off. One line per (precision, accumulation,
pass, h) with the TFLOP/s and, when the GPU's peak is known (`--gpu`, or the CUDA device name
matched against the planner's catalogue), the fraction of it. A last line fits the bf16
forward-and-backward fractions to g(h) = gemm_max * h / (h + half) (a line through 1/g
against 1/h), sets them beside the planner's g at that peak, and gives the fp8 backward
GEMMs' time with the split accumulator over their time with fast accumulation.

It then times the fused attention core as `planner.attention` prices it: torch's
`scaled_dot_product_attention` with a causal mask (the flash or cuDNN kernel torch picks), 16
heads of dimension 128 on `--attention-tokens` tokens (batch x sequence, 16K by default, the
FlashAttention-3 paper's setup) at each `--seq` length, forward alone and forward with
backward. FLOPs as FlashAttention counts them: the forward 4·b·s²·heads·dim, halved under
the causal mask, the backward 2.5 times that. One line per (pass, length) with the TFLOP/s,
the fraction of the 16-bit peak and the planner's fraction (`attention.CURVE`) beside it.

Without a GPU it runs on the CPU (bf16 only, small sizes advised: `--hidden 256,512
--tokens 512 --seq 64,128 --attention-tokens 256`), which checks the tool, not a GPU. Docs:
docs/benchmarks.md, issue 18.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from trainyard.planner.attention import BACKWARD_WORK, fused_attention_efficiency
from trainyard.planner.cell_names import gpu_name
from trainyard.planner.compute import gemm_efficiency
from trainyard.planner.errors import PlannerError
from trainyard.planner.hardware import CATALOGUE, GPU, gpu

PASSES = ("forward", "input_grad", "weight_grad")
HEADS, HEAD_DIM = 16, 128  # the attention sweep's heads (FlashAttention-3 paper, §4.1)
_FP8_MAX = 448.0  # largest finite float8_e4m3fn


def shapes(hidden: int, tokens: int) -> dict[str, tuple[int, int, int]]:
    """(M, K, N) of each pass of the MLP up-projection: an (M x K) @ (K x N) product."""
    ffn = 4 * hidden
    return {
        "forward": (tokens, hidden, ffn),
        "input_grad": (tokens, ffn, hidden),
        "weight_grad": (hidden, tokens, ffn),
    }


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_it(fn: Callable[[], object], device: torch.device, repeat: int) -> float:
    """Median seconds of `fn` over `repeat` runs after two warm-up runs."""
    for _ in range(2):
        fn()
    _sync(device)
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        _sync(device)
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def fp8_supported(device: torch.device) -> bool:
    """fp8 tensor cores: CUDA capability 8.9 (Ada) or newer, and a torch that has them."""
    if device.type != "cuda" or not hasattr(torch, "float8_e4m3fn"):
        return False
    return torch.cuda.get_device_capability(device) >= (8, 9)


def _bf16_gemm(m: int, k: int, n: int, device: torch.device) -> Callable[[], object]:
    a = torch.randn(m, k, device=device, dtype=torch.bfloat16)
    b = torch.randn(k, n, device=device, dtype=torch.bfloat16)
    return lambda: torch.matmul(a, b)


def _fp8_gemm(m: int, k: int, n: int, device: torch.device, fast: bool) -> Callable[[], object]:
    a = (torch.rand(m, k, device=device) * _FP8_MAX / 4).to(torch.float8_e4m3fn)
    # _scaled_mm wants its second operand column-major: the transpose of a row-major (n x k)
    b = (torch.rand(n, k, device=device) * _FP8_MAX / 4).to(torch.float8_e4m3fn).t()
    one = torch.ones((), device=device, dtype=torch.float32)
    return lambda: torch._scaled_mm(
        a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=fast
    )


def fit_curve(points: list[tuple[float, float]]) -> tuple[float, float] | None:
    """(gemm_max, half) of g(h) = gemm_max * h / (h + half) through (h, g) points: least
    squares of 1/g = 1/gemm_max + (half/gemm_max) / h. None with fewer than two sizes or a
    fit that is not a saturating curve."""
    pts = [(1.0 / h, 1.0 / g) for h, g in points if h > 0 and g > 0]
    if len({x for x, _ in pts}) < 2:
        return None
    mx = statistics.fmean(x for x, _ in pts)
    my = statistics.fmean(y for _, y in pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    slope = sum((x - mx) * (y - my) for x, y in pts) / sxx
    intercept = my - slope * mx
    if intercept <= 0 or slope < 0:
        return None
    return 1.0 / intercept, slope / intercept


def catalogue_gpu(name: str | None, device: torch.device) -> GPU | None:
    """The planner's entry for `name`, else for the CUDA device's name (e.g. "NVIDIA H100 80GB
    HBM3" -> H100-SXM), else None (fractions of peak are then not given)."""
    if name:
        return gpu(name)
    if device.type != "cuda":
        return None
    key = catalogue_name(torch.cuda.get_device_name(device))
    return CATALOGUE[key] if key is not None else None


def catalogue_name(device_name: str) -> str | None:
    """The catalogue's name for a CUDA device name (read as the planner reads a published
    row's `gpu_type`, `cells.gpu_name`), or None when it names no catalogue GPU."""
    try:
        return gpu_name({"gpu_type": device_name})
    except PlannerError:
        return None


def measure(
    hidden: list[int], tokens: int, device: torch.device, repeat: int, peak: GPU | None
) -> list[dict[str, Any]]:
    """One record per (precision, accumulation, pass, h)."""
    cases: list[tuple[str, str, Callable[[int, int, int], Callable[[], object]]]] = [
        ("bf16", "fp32", lambda m, k, n: _bf16_gemm(m, k, n, device))
    ]
    if fp8_supported(device):
        cases.append(("fp8", "fast", lambda m, k, n: _fp8_gemm(m, k, n, device, True)))
        cases.append(("fp8", "split", lambda m, k, n: _fp8_gemm(m, k, n, device, False)))
    out: list[dict[str, Any]] = []
    for precision, accumulate, make in cases:
        for h in hidden:
            for name, (m, k, n) in shapes(h, tokens).items():
                seconds = time_it(make(m, k, n), device, repeat)
                tflops = 2.0 * m * k * n / seconds / 1e12
                record: dict[str, Any] = {
                    "precision": precision, "accumulate": accumulate, "pass": name,
                    "hidden": h, "m": m, "k": k, "n": n, "seconds": seconds,
                    "tflops": float(f"{tflops:.4g}"),
                }  # fmt: skip
                if peak is not None:
                    share = tflops / peak.peak_tflops(precision)
                    record["fraction_of_peak"] = float(f"{share:.4g}")
                out.append(record)
    return out


def attention_flops(batch: int, seq: int) -> float:
    """FLOPs of one causal forward of the sweep's attention, as FlashAttention counts them."""
    return 4.0 * batch * seq * seq * HEADS * HEAD_DIM / 2.0


def _attention(batch: int, seq: int, device: torch.device) -> tuple[Callable[[], object], ...]:
    """(forward, forward and backward) of a causal attention over (batch, heads, seq, dim)."""
    dtype = torch.bfloat16
    q, k, v = (
        torch.randn(batch, HEADS, seq, HEAD_DIM, device=device, dtype=dtype, requires_grad=True)
        for _ in range(3)
    )
    grad = torch.randn(batch, HEADS, seq, HEAD_DIM, device=device, dtype=dtype)
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def forward() -> object:
        with torch.no_grad():
            return sdpa(q, k, v, is_causal=True)

    def both() -> object:
        out = sdpa(q, k, v, is_causal=True)
        out.backward(grad)
        return out

    return forward, both


def measure_attention(
    seqs: list[int], tokens: int, device: torch.device, repeat: int, peak: GPU | None
) -> list[dict[str, Any]]:
    """One record per (pass, sequence length): forward, and backward as the time of forward
    and backward less the forward's."""
    out: list[dict[str, Any]] = []
    for seq in seqs:
        batch = max(1, tokens // seq)
        forward, both = _attention(batch, seq, device)
        fwd_s = time_it(forward, device, repeat)
        bwd_s = max(time_it(both, device, repeat) - fwd_s, 1e-12)
        flops = attention_flops(batch, seq)
        planner = fused_attention_efficiency(seq)
        for i, (name, seconds, work) in enumerate(
            (("forward", fwd_s, flops), ("backward", bwd_s, BACKWARD_WORK * flops))
        ):
            tflops = work / seconds / 1e12
            record: dict[str, Any] = {
                "kernel": "attention", "pass": name, "seq": seq, "batch": batch,
                "seconds": seconds, "tflops": float(f"{tflops:.4g}"),
                "planner_fraction": round(planner[i], 4),
            }  # fmt: skip
            if peak is not None:
                record["fraction_of_peak"] = float(f"{tflops / peak.bf16_tflops:.4g}")
            out.append(record)
    return out


def summarize(records: list[dict[str, Any]], peak: GPU | None) -> dict[str, Any]:
    """The bf16 curve's fit beside the planner's, and the fp8 split-accumulator factor."""
    summary: dict[str, Any] = {"summary": True}
    attention = [r for r in records if r.get("kernel") == "attention"]
    records = [r for r in records if r.get("kernel") != "attention"]
    if peak is not None and attention:
        summary["attention"] = {
            f"{r['pass']}@{r['seq']}": [r["fraction_of_peak"], r["planner_fraction"]]
            for r in attention
        }
    if peak is not None:
        by_h: dict[int, list[float]] = {}
        for r in records:
            if r["precision"] == "bf16":
                by_h.setdefault(r["hidden"], []).append(r["seconds"] / (r["m"] * r["k"] * r["n"]))
        points = []  # the three passes together: their FLOPs over their summed time
        for h, per_flop in sorted(by_h.items()):
            tflops = 2.0 * len(per_flop) / sum(per_flop) / 1e12
            points.append((float(h), tflops / peak.bf16_tflops))
        fitted = fit_curve(points)
        summary["gpu"] = peak.name
        summary["measured"] = {int(h): float(f"{g:.4g}") for h, g in points}
        summary["planner"] = {
            int(h): round(gemm_efficiency(h, peak.bf16_tflops), 4) for h, _ in points
        }
        if fitted is not None:
            summary["fit"] = {"gemm_max": round(fitted[0], 4), "half": round(fitted[1], 1)}
    split = [r["seconds"] for r in records if r["accumulate"] == "split" and r["pass"] != "forward"]
    fast = [r["seconds"] for r in records if r["accumulate"] == "fast" and r["pass"] != "forward"]
    if split and fast:
        summary["fp8_backward_split_over_fast"] = round(sum(split) / sum(fast), 4)
    return summary


def _sizes(parser: argparse.ArgumentParser, option: str, text: str) -> list[int]:
    """Comma-separated positive integers of `option`, or the parser's error naming it."""
    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        parser.error(f"{option}: comma-separated integers, got {text!r}")
    if any(x < 1 for x in sizes):
        parser.error(f"{option}: sizes must be positive, got {text!r}")
    return sizes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", help="the planner's name for this GPU (default: detected)")
    parser.add_argument("--hidden", default="1024,2048,4096,8192,12288,16384")
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--seq",
        default="512,1024,2048,4096,8192,16384",
        help="attention sequence lengths (empty: no attention sweep)",
    )
    parser.add_argument("--attention-tokens", type=int, default=16384)
    args = parser.parse_args(argv)
    hidden, seqs = _sizes(parser, "--hidden", args.hidden), _sizes(parser, "--seq", args.seq)
    if not hidden or args.tokens < 1 or args.repeat < 1 or args.attention_tokens < 1:
        parser.error("--hidden, --tokens, --repeat and --attention-tokens must be positive")
    device = torch.device(args.device)
    try:
        peak = catalogue_gpu(args.gpu, device)
    except PlannerError as exc:
        parser.error(str(exc))
    header = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__, "machine": platform.machine(), "tokens": args.tokens,
        "fp8": fp8_supported(device), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }  # fmt: skip
    print(json.dumps(header), flush=True)
    records = measure(hidden, args.tokens, device, args.repeat, peak)
    records += measure_attention(seqs, args.attention_tokens, device, args.repeat, peak)
    for r in records:
        print(json.dumps(r), flush=True)
    print(json.dumps(summarize(records, peak)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
