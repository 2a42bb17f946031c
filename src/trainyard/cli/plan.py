"""`trainyard plan`: rank the parallel layouts of a model on N GPUs (table or JSON).

Thin shell over `trainyard.planner`: resolve the model (a preset name or a YAML file), the GPU
type and the GPU count (or an actual allocation, or a goal to size for), print the fastest
layouts that fit in memory and the launcher settings of the best; or plan a job spec
(`--job`), or evaluate the time model against published figures (`--evaluate`). Input errors print
one `error: ...` line on stderr and exit with code 2, never a traceback.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Final

import typer
from rich.console import Console

from trainyard import yamlio
from trainyard.cli.plan_output import (
    fit_dict,
    option_to_dict,
    plan_to_dict,
    render,
    render_options,
)
from trainyard.datafiles import DataFileNotFoundError, locate_data_file, shared_root
from trainyard.planner.allocation import search_allocation
from trainyard.planner.compute import runnable_precision
from trainyard.planner.errors import PlannerError
from trainyard.planner.evaluate import evaluate_paths, package_csv_path
from trainyard.planner.hardware import gpu as gpu_named
from trainyard.planner.hardware import load_catalogue
from trainyard.planner.jobplan import plan_job_spec
from trainyard.planner.launch import launch_settings
from trainyard.planner.links import load_links
from trainyard.planner.model import Model
from trainyard.planner.presets import load_model, preset
from trainyard.planner.search import search
from trainyard.planner.sizing import size_for_tokens
from trainyard.textfile import TextFileError, read_text


def register(app: typer.Typer) -> None:
    """Add the `plan` command to `app`."""
    app.command("plan")(plan_command)


def _evaluate(given: Sequence[Path], as_json: bool, gpu_file: Path | None = None) -> None:
    """Print predicted vs published figures for every row of the `given` files (each as given
    when it exists, else a relative path under $TRAINYARD_SHARED, as `simulate` does; the name
    `builtin` is the published runs shipped with the planner), rows naming a `gpu_file`'s GPUs
    too."""
    paths = []
    for one in given:
        if str(one) == "builtin":
            paths.append(package_csv_path())
            continue
        try:
            paths.append(locate_data_file(one, shared_root()))
        except DataFileNotFoundError as exc:
            tried = ", ".join(str(p) for p in exc.tried)
            typer.echo(f"error: --evaluate: file {one} not found (tried {tried})", err=True)
            raise typer.Exit(2) from None
    try:
        if gpu_file is not None and not gpu_file.is_file():
            raise PlannerError("--gpu-file", f"{gpu_file} not found (a YAML file of GPUs)")
        catalogue = load_catalogue(gpu_file) if gpu_file is not None else None
        result = evaluate_paths(paths, catalogue=catalogue)
    except (PlannerError, OSError, ValueError, KeyError, UnicodeDecodeError) as exc:
        if isinstance(exc, PlannerError):
            message = exc.message if exc.field == "path" else f"{exc.field}: {exc.message}"
        else:
            message = str(exc)
        typer.echo(f"error: --evaluate: {message}", err=True)
        raise typer.Exit(2) from None
    if as_json:
        rows = [dataclasses.asdict(r) for r in result.rows]
        out = {
            "rows": rows,
            "skipped": [list(s) for s in result.skipped],
            "median_abs_error": result.median_abs_error,
            "max_abs_error": result.max_abs_error,
            "columns_not_read": {name: list(cols) for name, cols in result.not_read},
        }
        held = result.held_out()
        if held is not None:
            out["held_out"] = held
        fitted = result.calibration_rows()
        if fitted is not None:
            out["calibration"] = fitted
        repeats = result.repeats()
        if repeats is not None:
            out["repeating_calibration"] = repeats
        from_mp = result.split_from_mp()
        if from_mp is not None:
            out["split_from_mp"] = from_mp
        typer.echo(json.dumps(out, indent=2))
    else:
        typer.echo(result.table())


def _console() -> Console:
    """Rich's console; 120 columns when not on a terminal (a pipe's 80 would cut the table)."""
    return Console(highlight=False, width=None if sys.stdout.isatty() else 120)


def _model(spec: str) -> Model:
    if spec.lower().endswith((".yaml", ".yml")) or Path(spec).is_file():
        if not Path(spec).is_file():
            raise PlannerError("model", f"file {spec} not found")
        return load_model(spec)
    return preset(spec)


# the planner's own field names that stand for a flag of this command
_FLAGS: Final = {
    "num_gpus": "--gpus",
    "gpu": "--gpu-type",
    "gpu_type": "--gpu-type",
    "links": "--links",
    "tokens": "--tokens",
    "price_per_gpu_hour": "--price",
    "deadline_hours": "--deadline",
    "objective": "--objective",
    "max_gpus": "--max-gpus",
}


def _fail(exc: Exception, *, flags: bool = True) -> typer.Exit:
    """One `error:` line and exit code 2; `flags`: name a field by its flag where it has one
    (not for a job spec's own fields)."""
    if isinstance(exc, PlannerError):
        field = _FLAGS.get(exc.field, exc.field) if flags else exc.field
        message = f"{field}: {exc.message}"
    else:
        message = str(exc)
    typer.echo(f"error: {' '.join(message.split())}", err=True)
    return typer.Exit(2)


def _allocation(text: str) -> list[int]:
    try:  # an empty part (8,,8) is a typo for a node, not nothing
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise PlannerError(
            "--allocation", f"write GPUs per node separated by commas, e.g. 8,4,4; got {text!r}"
        ) from None
    for k, count in enumerate(counts):
        if count < 1:  # said here, with the flag's name (the planner names its own field)
            raise PlannerError(
                "--allocation", f"node {k} has {count} GPUs; give each node's count, >= 1 "
                "(leave out a node with none), e.g. 8,4,4",
            )  # fmt: skip
    return counts


def _job(path: Path, as_json: bool) -> None:
    if not path.is_file():
        typer.echo(f"error: --job: file {path} not found", err=True)
        raise typer.Exit(2)
    try:
        spec = yamlio.load_yaml(read_text(path))
    except TextFileError as exc:
        typer.echo(f"error: --job: {path} {exc}", err=True)
        raise typer.Exit(2) from None
    except yamlio.YamlError as exc:
        typer.echo(f"error: --job: {path} is not valid YAML: {exc}", err=True)
        raise typer.Exit(2) from None
    if not isinstance(spec, dict):
        typer.echo(f"error: --job: {path} must be a mapping (a job spec)", err=True)
        raise typer.Exit(2)
    try:
        result = plan_job_spec(spec, base_dir=path.parent)
    except (PlannerError, OSError) as exc:
        raise _fail(exc, flags=False) from None
    if as_json:
        typer.echo(result.to_json())
        return
    console = _console()
    render(result.model, result.gpus, result.gpu.name, [result.plan], console)
    if result.options:
        render_options(result.options, console)
    typer.echo(result.launch.shell())


def plan_command(
    model: Annotated[
        str | None,
        typer.Option("--model", "-m", metavar="PRESET|FILE", help="Preset or YAML file."),
    ] = None,
    gpus: Annotated[int | None, typer.Option("--gpus", "-n", help="Number of GPUs.")] = None,
    gpu_type: Annotated[
        str | None, typer.Option("--gpu-type", "-g", help="GPU type, e.g. H100.")
    ] = None,
    nodes_of: Annotated[
        int | None,
        typer.Option(
            "--nodes-of",
            help="GPUs per node (NVLink domain); default: the GPU type's (8; 72 for GB200 "
            "NVL72, whose hosts of 4 the launcher starts).",
        ),
    ] = None,
    top: Annotated[int, typer.Option("--top", help="Plans to show.")] = 5,
    allocation: Annotated[
        str | None,
        typer.Option(
            "--allocation",
            metavar="G,G,...",
            help="Re-plan for an actual placement: GPUs on each node, e.g. 8,4,4.",
        ),
    ] = None,
    max_gpus: Annotated[
        int | None,
        typer.Option("--max-gpus", help="Choose the GPU count (up to this) for --objective."),
    ] = None,
    tokens: Annotated[
        float | None, typer.Option("--tokens", help="Training goal in tokens, e.g. 3e11.")
    ] = None,
    objective: Annotated[
        str, typer.Option("--objective", help="With --max-gpus: time or cost.")
    ] = "time",
    price: Annotated[
        float | None, typer.Option("--price", help="Price per GPU-hour (for cost).")
    ] = None,
    deadline: Annotated[
        float | None, typer.Option("--deadline", help="With --max-gpus: hours at most.")
    ] = None,
    launch: Annotated[
        bool, typer.Option("--launch", help="Print launcher settings for the best plan.")
    ] = False,
    job: Annotated[
        Path | None,
        typer.Option("--job", metavar="FILE.yaml", help="Plan a job spec that carries model:."),
    ] = None,
    evaluate_csv: Annotated[
        list[Path] | None,
        typer.Option(
            "--evaluate",
            metavar="FILE",
            help="Compare predictions with published training runs, a CSV or a Markdown page "
            "of tables (repeatable; e.g. planner/published_configs.csv, a relative path not "
            "found as given being tried under $TRAINYARD_SHARED; 'builtin' for the runs "
            "shipped with the planner).",
        ),
    ] = None,
    flash_attention: Annotated[
        bool,
        typer.Option(
            "--flash-attention/--no-flash-attention",
            help="Fused attention (the default); --no-flash-attention for a stack that stores "
            "the attention scores.",
        ),
    ] = True,
    links_file: Annotated[
        Path | None,
        typer.Option(
            "--links",
            metavar="FILE",
            help="Measured links: nccl-tests output (all_reduce_perf ...) or a `trainyard probe "
            "links` result; collectives are timed and chosen on them.",
        ),
    ] = None,
    links_collective: Annotated[
        str | None,
        typer.Option(
            "--links-collective",
            metavar="NAME",
            help="The collective a --links file measured when neither its text nor its name "
            "says (all_reduce, all_gather, reduce_scatter, broadcast).",
        ),
    ] = None,
    precision: Annotated[
        str | None,
        typer.Option(
            "--precision",
            help="bf16, fp16 or fp8 (Transformer Engine's fp8 GEMMs); overrides the model's.",
        ),
    ] = None,
    gpu_file: Annotated[
        Path | None,
        typer.Option(
            "--gpu-file",
            metavar="FILE.yaml",
            help="GPUs to add to the catalogue or fields to change in it, by name, e.g. "
            "'MI300X: {bf16_tflops: 1307, ...}' or 'H100-SXM: {fp8_backward_slowdown: 1}'; "
            "--gpu-type is then looked up there too.",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plans as JSON.")] = False,
) -> None:
    """Plan a model's training: the fastest layouts on GPUS GPUs that fit in memory (or on an
    --allocation, or the GPU count for a goal with --max-gpus), with launcher settings; --job
    plans a job spec; --evaluate compares predictions with published throughput."""
    if evaluate_csv:
        _evaluate(evaluate_csv, as_json, gpu_file)
        return
    if job is not None:
        _job(job, as_json)
        return
    sizes = [v is not None for v in (gpus, allocation, max_gpus)]
    if sum(sizes) > 1:
        typer.echo("error: give only one of --gpus, --allocation and --max-gpus", err=True)
        raise typer.Exit(2)
    objective = objective.strip().lower()  # as --precision: FP8 and fp8 alike
    goal = [flag for flag, v in (("--tokens", tokens), ("--price", price),
                                 ("--deadline", deadline)) if v is not None]  # fmt: skip
    if objective != "time":
        goal.append("--objective")
    if goal and max_gpus is None:
        typer.echo(
            f"error: {goal[0]}: only with --max-gpus (the goal it sizes the GPU count for); "
            "add --max-gpus N or drop it",
            err=True,
        )
        raise typer.Exit(2)
    if allocation is not None and launch:
        # the launchers start the same number of ranks on every node; an allocation is
        # planned for where its ranks sit, not launched from here
        typer.echo(
            "error: --launch: not with --allocation (launch settings are for whole nodes "
            "alike); plan with --gpus for them, or drop --launch",
            err=True,
        )
        raise typer.Exit(2)
    missing = [name for name, v in (("--model", model), ("--gpu-type", gpu_type)) if v is None]
    if not any(sizes):
        missing.append("--gpus (or --allocation, --max-gpus)")
    if missing:
        typer.echo(
            f"error: {', '.join(missing)} required (or use --job FILE or --evaluate FILE)",
            err=True,
        )
        raise typer.Exit(2)
    assert model is not None and gpu_type is not None
    console = _console()
    try:
        measured, fits = (
            load_links(links_file, links_collective) if links_file is not None else (None, [])
        )
        m = _model(model)
        if precision is not None:
            m = dataclasses.replace(m, precision=precision.strip().lower())  # type: ignore[arg-type]  # checked by Model
        if gpu_file is not None and not gpu_file.is_file():
            raise PlannerError("--gpu-file", f"{gpu_file} not found (a YAML file of GPUs)")
        device = gpu_named(gpu_type, load_catalogue(gpu_file) if gpu_file is not None else None)
        if nodes_of is None:
            nodes_of = device.gpus_per_node
        runnable = runnable_precision(m, device)
        if runnable is not m:
            typer.echo(
                f"note: {device.name} has no {m.precision} tensor cores; planned in "
                f"{runnable.precision}",
                err=True,
            )
            m = runnable
        if max_gpus is not None:
            options = size_for_tokens(
                m,
                device,
                tokens if tokens is not None else float(m.tokens_per_iteration),
                objective=objective,  # type: ignore[arg-type]  # checked by size_for_tokens
                max_gpus=max_gpus,
                price_per_gpu_hour=price,
                nodes_of=nodes_of,
                deadline_hours=deadline,
                flash_attention=flash_attention,
                links=measured,
            )
            plans = [options[0].plan]
            count = options[0].gpus
        elif allocation is not None:
            counts = _allocation(allocation)
            plans = search_allocation(
                m, device, counts, top=top, flash_attention=flash_attention, links=measured
            )
            options, count = [], sum(counts)
        else:
            assert gpus is not None
            plans = search(
                m,
                gpus,
                device,
                nodes_of=nodes_of,
                top=top,
                flash_attention=flash_attention,
                links=measured,
            )
            options, count = [], gpus
        settings = None
        if allocation is None and (launch or as_json):
            settings = launch_settings(m, plans[0], device, nodes_of, measured)
    except (PlannerError, OSError) as exc:
        raise _fail(exc) from None
    if as_json:
        out: dict[str, Any] = {
            "model": m.name,
            "gpu_type": device.name,
            "gpus": count,
            "plans": [plan_to_dict(p, m) for p in plans],
        }
        if allocation is not None:
            out["allocation"] = _allocation(allocation)
        if options:
            out["options"] = [option_to_dict(o, m) for o in options]
        if settings is not None:
            out["launch"] = settings.to_dict()
        if fits:
            out["links"] = [fit_dict(f) for f in fits]
        typer.echo(json.dumps(out, indent=2))
        return
    for f in fits:
        latency = f"latency {f.alpha_us:.1f} us" if f.latency_measured else (
            f"latency not measured (smallest message {min(f.run.points)[0]:,} bytes; NCCL's "
            f"{f.link.latency_us:.1f} us a step kept)"
        )  # fmt: skip
        typer.echo(
            f"links: {f.run.collective} over {f.run.ranks} ranks on {f.run.nodes} node(s): "
            f"{latency}, bus bandwidth {f.busbw_gbps:.1f} GB/s -> {f.level} "
            f"link {f.link.bandwidth_gbps:.1f} GB/s, {f.link.latency_us:.2f} us a step "
            f"(fit error median {f.median_error:.0%}, max {f.max_error:.0%})"
        )
        if f.level == "inter" and f.run.ranks_per_node != nodes_of:
            typer.echo(
                f"note: measured with {f.run.ranks_per_node} ranks a node, planned with "
                f"{nodes_of}: one GPU's share of the network is read as measured"
            )
    where = f"{allocation} GPUs per node" if allocation is not None else None
    render(m, count, device.name, plans, console, where=where)
    if options:
        render_options(options, console)
    if settings is not None:
        typer.echo(settings.shell())
