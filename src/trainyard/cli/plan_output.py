"""How `trainyard plan` shows its results: the plans and sizing options as a table or as
JSON, the fitted links, and the notes on what the figures count (the fused attention's kernel,
the attention FLOPs Megatron-LM would log). Split from `cli/plan.py`, which reads the input
and runs the planner."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Final

from rich import box
from rich.console import Console
from rich.table import Table

from trainyard.planner.links import LinkFit
from trainyard.planner.model import Model
from trainyard.planner.search import Plan
from trainyard.planner.sizing import SizingOption


def fit_dict(fit: LinkFit) -> dict[str, Any]:
    return {
        "collective": fit.run.collective,
        "ranks": fit.run.ranks,
        "nodes": fit.run.nodes,
        "level": fit.level,
        "latency_us": fit.alpha_us,
        "busbw_gbps": fit.busbw_gbps,
        "link_gbps": fit.link.bandwidth_gbps,
        "step_latency_us": fit.link.latency_us,
        "fit_median_error": fit.median_error,
        "fit_max_error": fit.max_error,
        "latency_measured": fit.latency_measured,
    }


def option_to_dict(option: SizingOption, model: Model) -> dict[str, Any]:
    """A sizing option as JSON-able data (the plan's layout and predictions included)."""
    return {
        "gpus": option.gpus,
        "hours": option.hours,
        "gpu_hours": option.gpu_hours,
        "cost": option.cost,
        "plan": plan_to_dict(option.plan, model),
    }


def render_options(options: Sequence[SizingOption], console: Console) -> None:
    """GPU-count options for a training goal, best first."""
    table = Table(title="GPU counts, best first", box=box.SIMPLE, pad_edge=False)
    # context and expert parallelism are shown when some option uses them
    cp = any(o.plan.layout.cp > 1 for o in options)
    experts = any(o.plan.layout.ep > 1 for o in options)
    columns = ("GPUs", "tp", *(("cp",) if cp else ()), "pp", "dp", *(("ep",) if experts else ()))
    for name in (*columns, "hours", "GPU-hours", "cost", "MFU"):
        table.add_column(name, justify="right", no_wrap=True)
    for o in options:
        lay = o.plan.layout
        cost = f"{o.cost:,.0f}" if o.cost is not None else "-"
        split = [str(o.gpus), str(lay.tp), *((str(lay.cp),) if cp else ()), str(lay.pp)]
        split += [str(lay.dp), *((str(lay.ep),) if experts else ())]
        table.add_row(*split, f"{o.hours:,.1f}", f"{o.gpu_hours:,.0f}", cost, f"{o.plan.mfu:.1%}")
    console.print(table)


def plan_to_dict(plan: Plan, model: Model) -> dict[str, Any]:
    """A plan of `model` as plain JSON-able data (layout, memory GB, step time s, throughput,
    and the rate as Megatron-LM logs it: `causal_count_share`)."""
    share = causal_count_share(model)
    return {
        "layout": dataclasses.asdict(plan.layout),
        "memory_gb": {**dataclasses.asdict(plan.memory), "total": plan.memory.total},
        "step_time_s": dataclasses.asdict(plan.time),
        "tokens_per_s": plan.tokens_per_s,
        "tflops_per_gpu": plan.tflops_per_gpu,
        "mfu": plan.mfu,
        "tflops_per_gpu_causal": plan.tflops_per_gpu * share,
        "mfu_causal": plan.mfu * share,
    }


# What the fused attention is priced as (`planner.attention`), and what that means for a stack
# that runs another kernel (MosaicML's Triton FlashAttention on H100 reached about a third of
# it: docs/benchmarks.md, the llm-foundry blind check; FlashAttention-2 reaches 35 % of an
# H100's peak, FlashAttention-3 arXiv:2407.08608).
FUSED_ATTENTION_NOTE: Final = (
    ". The attention core is priced as cuDNN's fused kernel (Transformer Engine, "
    "Megatron-Core); FlashAttention-2 or Triton kernels may run it slower (on an H100, "
    "Triton's reached about a third of it)"
)


def causal_count_share(model: Model) -> float:
    """The model's FLOPs with the attention core counted as its causal half (as Megatron-LM
    has logged TFLOP/s since 2025), over the whole count the planner reports."""
    return model.flops_per_iteration(
        recompute=False, attention="causal"
    ) / model.flops_per_iteration(recompute=False)


def render(
    model: Model,
    gpus: int,
    gpu_type: str,
    plans: list[Plan],
    console: Console,
    where: str | None = None,
) -> None:
    """The plans as a table, fastest first; the title says which attention they assume."""
    notes = [where] if where else []
    if plans:
        notes.append("flash attention" if plans[0].layout.flash_attention else "stored scores")
    if model.precision == "fp8":
        notes.append("fp8 GEMMs; MFU over the 16-bit peak")
    share = causal_count_share(model)
    table = Table(
        title=f"{model.name} on {gpus} x {gpu_type}" + (f" ({', '.join(notes)})" if notes else ""),
        caption=(
            "TFLOP/s and MFU count the whole attention score matrix (SC'21); Megatron-LM logs "
            f"its causal half, {1 - share:.1%} lower here"
            + (FUSED_ATTENTION_NOTE if plans and plans[0].layout.flash_attention else "")
        ),
        box=box.SIMPLE,
        pad_edge=False,
        collapse_padding=True,
    )
    moe = model.is_moe
    for name in ("tp", "cp", "pp", "dp", *(("ep",) if moe else ()), "mb", "v", "zero", "recompute"):
        table.add_column(name, justify="right", no_wrap=True)
    for name in ("mem GB", "step s", "TFLOP/s/GPU", "MFU"):
        table.add_column(name, justify="right", no_wrap=True)
    for p in plans:
        lay = p.layout
        pp = str(lay.pp)
        if lay.uneven:
            counts = lay.stage_layers(model)
            # first / middle / last stage's layers (two stages: first / last)
            pp += f" ({'/'.join(str(n) for n in (counts[0], *counts[1:-1][:1], counts[-1]))})"
        zero = "hsdp" if lay.sharding == "hsdp" else str(lay.zero)
        ep = (str(lay.ep),) if moe else ()
        # layers whose activations go to host memory (activation offloading)
        recompute = lay.recompute + (f" +cpu{lay.offload_layers}" if lay.offload_layers else "")
        table.add_row(
            str(lay.tp), str(lay.cp), pp, str(lay.dp), *ep, str(lay.micro_batch),
            str(lay.virtual_stages), zero, recompute, f"{p.memory.total:.1f}",
            f"{p.time.iteration_s:.3f}", f"{p.tflops_per_gpu:.1f}",
            f"{p.mfu:.1%}",
        )  # fmt: skip
    console.print(table)
