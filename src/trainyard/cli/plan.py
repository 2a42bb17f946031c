"""`trainyard plan`: rank the parallel layouts of a model on N GPUs (table or JSON).

Thin shell over `trainyard.planner.search`: resolve the model (a preset name or a YAML file),
the GPU type and the GPU count, print the fastest layouts that fit in memory. Input errors print
one `error: ...` line on stderr and exit with code 2, never a traceback.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from trainyard.planner.errors import PlannerError
from trainyard.planner.hardware import gpu as gpu_named
from trainyard.planner.model import Model, load_model, preset
from trainyard.planner.search import Plan, search


def register(app: typer.Typer) -> None:
    """Add the `plan` command to `app`."""
    app.command("plan")(plan_command)


def _model(spec: str) -> Model:
    if spec.lower().endswith((".yaml", ".yml")) or Path(spec).is_file():
        if not Path(spec).is_file():
            raise PlannerError("model", f"file {spec} not found")
        return load_model(spec)
    return preset(spec)


def plan_command(
    model: Annotated[
        str, typer.Option("--model", "-m", metavar="PRESET|FILE", help="Preset or YAML file.")
    ],
    gpus: Annotated[int, typer.Option("--gpus", "-n", help="Number of GPUs.")],
    gpu_type: Annotated[str, typer.Option("--gpu-type", "-g", help="GPU type, e.g. H100.")],
    nodes_of: Annotated[int, typer.Option("--nodes-of", help="GPUs per node.")] = 8,
    top: Annotated[int, typer.Option("--top", help="Plans to show.")] = 5,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plans as JSON.")] = False,
) -> None:
    """Print the fastest layouts of MODEL on GPUS GPUs that fit in memory."""
    try:
        m = _model(model)
        plans = search(m, gpus, gpu_named(gpu_type), nodes_of=nodes_of, top=top)
    except (PlannerError, OSError) as exc:
        message = f"{exc.field}: {exc.message}" if isinstance(exc, PlannerError) else str(exc)
        typer.echo(f"error: {' '.join(message.split())}", err=True)
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(json.dumps([plan_to_dict(p) for p in plans], indent=2))
    else:
        render(m, gpus, gpu_type, plans, Console(highlight=False))


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    """A plan as plain JSON-able data (layout, memory GB, step time s, throughput)."""
    return {
        "layout": dataclasses.asdict(plan.layout),
        "memory_gb": {**dataclasses.asdict(plan.memory), "total": plan.memory.total},
        "step_time_s": dataclasses.asdict(plan.time),
        "tokens_per_s": plan.tokens_per_s,
        "tflops_per_gpu": plan.tflops_per_gpu,
        "mfu": plan.mfu,
    }


def render(model: Model, gpus: int, gpu_type: str, plans: list[Plan], console: Console) -> None:
    """The plans as a table, fastest first."""
    table = Table(
        title=f"{model.name} on {gpus} x {gpu_type}",
        box=box.SIMPLE,
        pad_edge=False,
        collapse_padding=True,
    )
    for name in ("tp", "pp", "dp", "mb", "v", "zero", "recompute"):
        table.add_column(name, justify="right", no_wrap=True)
    for name in ("mem GB", "step s", "TFLOP/s/GPU", "MFU"):
        table.add_column(name, justify="right", no_wrap=True)
    for p in plans:
        lay = p.layout
        table.add_row(
            str(lay.tp), str(lay.pp), str(lay.dp), str(lay.micro_batch),
            str(lay.virtual_stages), str(lay.zero), lay.recompute, f"{p.memory.total:.1f}",
            f"{p.time.iteration_s:.3f}", f"{p.tflops_per_gpu:.1f}",
            f"{p.mfu:.1%}",
        )  # fmt: skip
    console.print(table)
