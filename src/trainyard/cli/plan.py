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
from trainyard.planner.evaluate import evaluate
from trainyard.planner.hardware import gpu as gpu_named
from trainyard.planner.model import Model, load_model, preset
from trainyard.planner.search import Plan, search


def register(app: typer.Typer) -> None:
    """Add the `plan` command to `app`."""
    app.command("plan")(plan_command)


def _evaluate(path: Path, as_json: bool) -> None:
    """Print predicted vs published TFLOP/s per GPU for every row of `path`."""
    if not path.is_file():
        typer.echo(f"error: --evaluate: file {path} not found", err=True)
        raise typer.Exit(2)
    try:
        result = evaluate(path)
    except (PlannerError, OSError, ValueError, KeyError) as exc:
        typer.echo(f"error: --evaluate: {path}: {exc}", err=True)
        raise typer.Exit(2) from None
    if as_json:
        rows = [dataclasses.asdict(r) for r in result.rows]
        out = {
            "rows": rows,
            "skipped": [list(s) for s in result.skipped],
            "median_abs_error": result.median_abs_error,
            "max_abs_error": result.max_abs_error,
        }
        typer.echo(json.dumps(out, indent=2))
    else:
        typer.echo(result.table())


def _model(spec: str) -> Model:
    if spec.lower().endswith((".yaml", ".yml")) or Path(spec).is_file():
        if not Path(spec).is_file():
            raise PlannerError("model", f"file {spec} not found")
        return load_model(spec)
    return preset(spec)


def plan_command(
    model: Annotated[
        str | None,
        typer.Option("--model", "-m", metavar="PRESET|FILE", help="Preset or YAML file."),
    ] = None,
    gpus: Annotated[int | None, typer.Option("--gpus", "-n", help="Number of GPUs.")] = None,
    gpu_type: Annotated[
        str | None, typer.Option("--gpu-type", "-g", help="GPU type, e.g. H100.")
    ] = None,
    nodes_of: Annotated[int, typer.Option("--nodes-of", help="GPUs per node.")] = 8,
    top: Annotated[int, typer.Option("--top", help="Plans to show.")] = 5,
    evaluate_csv: Annotated[
        Path | None,
        typer.Option(
            "--evaluate",
            metavar="FILE.csv",
            help="Compare predictions with published configurations (published_configs.csv).",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plans as JSON.")] = False,
) -> None:
    """Print the fastest layouts of MODEL on GPUS GPUs that fit in memory, or with
    --evaluate, predicted vs published throughput for each row of a CSV."""
    if evaluate_csv is not None:
        _evaluate(evaluate_csv, as_json)
        return
    missing = [
        name
        for name, v in (("--model", model), ("--gpus", gpus), ("--gpu-type", gpu_type))
        if v is None
    ]
    if missing:
        typer.echo(f"error: {', '.join(missing)} required (or use --evaluate FILE.csv)", err=True)
        raise typer.Exit(2)
    assert model is not None and gpus is not None and gpu_type is not None
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
