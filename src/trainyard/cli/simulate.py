"""`trainyard simulate`: run a workload through the scheduling core with a simulated clock.

Thin shell over `trainyard.sim`: read the workload (`--workload KIND:PATH` or `synthetic`),
build the cluster (`--cluster 16x4`, a YAML file, ...), pick the speed model the workload
needs (trace durations for Philly and synthetic jobs, measured profiles for Pollux and Gavel),
simulate one policy or several (`--compare`), and print a table (one fixed unit per column,
stated in its header and explained in a legend under it) or JSON (raw seconds); `--report
DIR` also writes a markdown/HTML report with plots. Input errors print one `error: ...` line
on stderr and exit with code 2, never a traceback. The devices are simulated, and the output
says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal, TypedDict

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from trainyard.core import UnknownNameError, get_profile
from trainyard.datafiles import find_data_file, shared_root
from trainyard.sim.cluster import Cluster, parse_cluster
from trainyard.sim.engine import QUOTA_SHARE, SimOptions, default_queues, simulate
from trainyard.sim.metrics import TABLE_LEGEND, compare, summarize, table_rows
from trainyard.sim.records import SimResult
from trainyard.sim.speed import FixedDuration, SpeedModel, restart_seconds
from trainyard.sim.workload import SimJob, Workload, WorkloadError, larger_than, without

DEFAULT_RESTART_S = 30.0  # Pollux's re-scale delay, used for trace-duration jobs as well


def register(app: typer.Typer) -> None:
    """Add the `simulate` command to `app`."""
    app.command("simulate")(simulate_command)


def _workload_file(spec: str) -> Path | None:
    """The file a KIND:PATH spec names, resolved as the readers do (None for synthetic)."""
    from trainyard.sim.readers import WORKLOAD_FOLDERS

    kind, _, rest = spec.partition(":")
    if kind.strip().lower() == "synthetic" or not rest.strip():
        return None
    return find_data_file(rest.strip(), shared_root(), WORKLOAD_FOLDERS)


class _Restart(TypedDict, total=False):
    """`--restart-penalty` as the speed models' keyword, present only when it was given."""

    restart_s: float


def _speed(
    spec: str, profiles: Path | None, restart_penalty: float | None, rigid: bool
) -> SpeedModel:
    """The speed model of the workload `spec`, with `--restart-penalty` when given (each
    model's own default otherwise; trace jobs `DEFAULT_RESTART_S`)."""
    kind = spec.partition(":")[0].strip().lower()
    given: _Restart = {}
    if restart_penalty is not None:
        given["restart_s"] = restart_seconds(restart_penalty, "--restart-penalty")
    if kind == "pollux":
        from trainyard.sim.pollux_jobs import PolluxJobs
        from trainyard.sim.pollux_speed import PolluxSpeed

        if profiles is None:
            profiles = _default_profiles(spec)
        elif not profiles.is_dir():
            raise WorkloadError(
                "--pollux-profiles", f"{profiles} is not a folder of Pollux profiles"
            )
        if profiles is None:
            raise WorkloadError(
                "--pollux-profiles",
                "the Pollux workload needs the measured profiles, and none were found beside "
                "it (../profiles) or under $TRAINYARD_SHARED/traces/pollux: give "
                "--pollux-profiles DIR",
            )
        return PolluxSpeed(profiles, **given) if rigid else PolluxJobs(profiles, **given)
    # the Pollux options mean nothing to the other workloads: say so rather than ignore them
    for flag, used in (("--rigid", rigid), ("--profiles", profiles is not None)):
        if used:
            raise WorkloadError(flag, f"is for Pollux workloads (pollux:FILE), not {spec!r}")
    if kind == "gavel":
        from trainyard.sim.gavel_speed import GavelSpeed

        found = _workload_file(spec)
        if found is None:
            raise WorkloadError(spec, "no such file; give the path of simulation_throughputs.json")
        return GavelSpeed(found, **given)
    return FixedDuration(restart_s=given.get("restart_s", DEFAULT_RESTART_S))


def _default_profiles(spec: str) -> Path | None:
    """The Pollux profiles a workload uses when `--pollux-profiles` is not given: the
    `profiles` folder beside its workloads folder (the Pollux artifact's layout), else the
    shared data's (`$TRAINYARD_SHARED/traces/pollux/profiles`, for a workload written
    elsewhere); None when neither exists (found by an outside review: the error named a flag
    the user had not given)."""
    found = _workload_file(spec)
    beside = found.parent.parent / "profiles" if found is not None else None
    shared = shared_root() / "traces" / "pollux" / "profiles"
    for folder in (beside, shared):
        if folder is not None and folder.is_dir():
            return folder
    return None


def _elastic_share(
    spec: str, speed: SpeedModel, share: float, seed: int, cl: Cluster
) -> SpeedModel:
    """The trace-duration speed model with `share` of the jobs elastic (`--elastic-share`)."""
    if not isinstance(speed, FixedDuration):
        raise WorkloadError(
            "--elastic-share",
            f"is for workloads with trace run times (philly, synthetic), not {spec!r}: Pollux "
            "jobs are elastic by default (--rigid turns that off)",
        )
    from trainyard.sim.elastic_duration import ElasticDuration

    node_gpus = max((n.gpus for n in cl.nodes), default=0)
    return ElasticDuration(share, seed=seed, node_gpus=node_gpus, restart_s=speed.restart_s)


def _options(values: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise WorkloadError("--option", f"write KEY=VALUE (e.g. clusters=11cb48), got {item!r}")
        out[key.strip()] = value.strip()
    return out


def _fit(wl: Workload, cl: Cluster, oversize: str) -> tuple[Workload, list[str], list[str]]:
    """`wl` with the jobs larger than the cluster left out under `--oversize skip` (refused
    under `fail`, naming them and the fix), and the lines the header prints about them (found
    by an outside review: one 128-GPU job of the Philly trace stopped a whole-trace run on a
    smaller cluster, with an error that named neither the file nor a way out)."""
    if oversize not in ("fail", "skip"):
        raise WorkloadError("--oversize", f"must be fail or skip, got {oversize!r}")
    unfit, capped = larger_than(wl.jobs, cl.gpus)
    notes: list[str] = []
    if unfit:
        names = _sizes(unfit)
        if oversize == "fail":
            lines = " (philly-N is line N of the file)" if wl.kind == "philly" else ""
            raise WorkloadError(
                wl.source,
                f"{len(unfit)} job(s) need more GPUs than the cluster's {cl.gpus}: {names}"
                f"{lines}; give a --cluster of at least {max(j.fewest_gpus for j in unfit)} GPUs, "
                "or --oversize skip to leave them out",
            )
        wl = without(wl, unfit)
        if not wl.jobs:
            raise WorkloadError(
                wl.source, f"no job fits on {cl.gpus} GPUs; give a larger --cluster"
            )
        notes.append(
            f"left out (--oversize skip): {len(unfit)} job(s) larger than the cluster: {names}"
        )
    if capped:
        notes.append(
            f"{len(capped)} elastic job(s) ask for more than the cluster's {cl.gpus} GPUs and "
            f"start at most at {cl.gpus} (their minimum fits): {_sizes(capped)}"
        )
    return wl, [j.id for j in unfit], notes


def _share_note(wl: Workload) -> str:
    """What `--elastic-share` did, and how to read the comparison (found by an outside
    review: a rigid profile's figures changed with the share, which read as the share's
    effect on the baseline)."""
    n = sum(1 for j in wl.jobs if j.max_gpus is not None)
    return (
        f"{n} of {len(wl.jobs)} jobs elastic (--elastic-share): their run time follows a "
        "scaling law that depends on their placement (slower across nodes) under every "
        "profile, rigid ones included; compare profiles at one share, not across shares"
    )


def _sizes(jobs: tuple[SimJob, ...], shown: int = 5) -> str:
    """The first `shown` jobs with the GPUs they ask for, and how many more."""
    text = ", ".join(f"{j.id} ({j.gpus} GPUs)" for j in jobs[:shown])
    return text + (f" and {len(jobs) - shown} more" if len(jobs) > shown else "")


def _policies(policy: str, compare_list: str | None) -> list[str]:
    field = "--compare" if compare_list is not None else "--profile"
    text = compare_list if compare_list is not None else policy  # --compare '' names none
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise WorkloadError(field, "give one or more profile names, comma-separated")
    for name in names:
        try:
            get_profile(name)
        except UnknownNameError as exc:
            raise WorkloadError(field, exc.message) from None  # it lists the known names
    return names


# The default profile charges 90 s for a resize against the Pollux jobs' 30 s restart: a
# restart also holds the job's GPUs idle and delays the jobs behind it (docs/benchmarks.md).
CHARGE_PER_RESTART_S = 3.0


def _charge(restart_penalty: float | None, resize_restart: float | None) -> float | None:
    """The restart cost the policies are told (`Profile.resize_restart_s`): the one given, or
    `CHARGE_PER_RESTART_S` times a `--restart-penalty` given (found by an outside review: a
    dearer restart in the simulator was not told to the elastic policy, which went on
    resizing as if a restart cost 90 s); None: the profiles' own."""
    if resize_restart is not None:
        return restart_seconds(resize_restart, "--resize-restart-cost")
    if restart_penalty is not None:
        return CHARGE_PER_RESTART_S * restart_seconds(restart_penalty, "--restart-penalty")
    return None


def _run(
    workload: Workload,
    cluster: Cluster,
    speed: SpeedModel,
    policies: list[str],
    options: SimOptions,
    seed: int,
    share: float,
    charge: float | None = None,
) -> list[SimResult]:
    queues = default_queues(workload, cluster, speed, share)
    profiles = [
        get_profile(p).with_overrides(resize_restart_s=charge) if charge is not None else p
        for p in policies
    ]
    return [
        simulate(workload, cluster, speed, p, options, queues=queues, seed=seed) for p in profiles
    ]


def simulate_command(
    workload: Annotated[
        str,
        typer.Option(
            "--workload",
            "-w",
            metavar="KIND:PATH",
            help="philly:F, pollux:F, gavel:F, synthetic[:N].",
        ),
    ] = "synthetic",
    cluster: Annotated[
        str,
        typer.Option("--cluster", "-c", help="NODESxGPUS[:TYPE][@PER_LEAF][+...] or a YAML file."),
    ] = "16x4",
    policy: Annotated[
        str,
        typer.Option(
            "--profile", "--policy", "-p", help="Scheduling profile (--policy: the old name)."
        ),
    ] = "default",
    compare_list: Annotated[
        str | None,
        typer.Option("--compare", metavar="P1,P2,...", help="Several policies side by side."),
    ] = None,
    load: Annotated[float, typer.Option("--load", help="Arrival-rate multiplier.")] = 1.0,
    seed: Annotated[int, typer.Option("--seed", help="Seed for generated workloads.")] = 0,
    option: Annotated[
        list[str] | None,
        typer.Option("--option", "-o", metavar="KEY=VALUE", help="Workload option (repeatable)."),
    ] = None,
    interval: Annotated[
        float, typer.Option("--interval", help="Seconds between rounds (0: at every event).")
    ] = 60.0,
    estimates: Annotated[
        str, typer.Option("--estimates", help="Run times told to the scheduler: none or exact.")
    ] = "none",
    restart_penalty: Annotated[
        float | None,
        typer.Option(
            "--restart-penalty",
            help="Seconds a job loses at every restart after its first start (a resize, a "
            "resume after preemption) [default: 30; Gavel workloads 0].",
        ),
    ] = None,
    resize_restart: Annotated[
        float | None,
        typer.Option(
            "--resize-restart-cost",
            help="Seconds the elastic policy takes a resize to cost, as `trainyard up "
            "--resize-restart-cost` [default: 3 x --restart-penalty when that is given, "
            "else the profile's 90].",
        ),
    ] = None,
    fairshare_half_life: Annotated[
        float | None,
        typer.Option(
            "--fairshare-half-life",
            help="Keep each queue's decayed usage for DRF, as the server does (days).",
        ),
    ] = None,
    quota_share: Annotated[
        float,
        typer.Option(
            "--quota-share", help="Share of the cluster the queues' guarantees add up to."
        ),
    ] = QUOTA_SHARE,
    profiles: Annotated[
        Path | None,
        typer.Option(
            "--pollux-profiles",
            "--profiles",
            help="Pollux's measured profiles folder (default: beside the workload; "
            "--profiles: the old name).",
        ),
    ] = None,
    rigid: Annotated[
        bool,
        typer.Option(
            "--rigid",
            help="Pollux workloads: run every job at its trace size and batch (by default "
            "they are elastic, adapting GPUs and batch size, as in Pollux's evaluation).",
        ),
    ] = False,
    elastic_share: Annotated[
        float,
        typer.Option(
            "--elastic-share",
            help="Philly and synthetic workloads: make this share of the GPU jobs elastic "
            "(1 up to 4x their size, a stated scaling law; see trainyard.sim.elastic_duration).",
        ),
    ] = 0.0,
    oversize: Annotated[
        str,
        typer.Option(
            "--oversize",
            metavar="fail|skip",
            help="A job larger than the cluster: stop with an error naming it (fail), or "
            "leave it out and say so (skip).",
        ),
    ] = "fail",
    report_dir: Annotated[
        str | None,
        typer.Option("--report", metavar="DIR", help="Write report.md/html and plots here."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the metrics as JSON.")] = False,
) -> None:
    """Simulate WORKLOAD on CLUSTER under one policy (or --compare several) with the real
    scheduling core and a simulated clock; print JCT, queueing, utilisation, fragmentation,
    fairness and preemptions."""
    from trainyard.sim.readers import read_workload

    report = _report_dir(report_dir)
    try:
        names = _policies(policy, compare_list)
        half_life = fairshare_half_life * 86_400.0 if fairshare_half_life is not None else None
        opts = SimOptions(interval_s=interval, estimates=estimates, fairshare_half_life_s=half_life)
        wl = read_workload(
            workload, seed=seed, load=load, options=_options(option or []), shared=shared_root()
        )
        cl = parse_cluster(cluster)
        speed = _speed(workload, profiles, restart_penalty, rigid)
        check = getattr(speed, "check", None)
        if check is not None:  # the trace's jobs against what the speed model measured
            check(wl.jobs)
        if elastic_share:
            speed = _elastic_share(workload, speed, elastic_share, seed, cl)
        elastic = getattr(speed, "elastic_workload", None)
        if elastic is not None:
            wl = elastic(wl)
        wl, left_out, notes = _fit(wl, cl, oversize)
        if elastic_share:
            notes.append(_share_note(wl))
        charge = _charge(restart_penalty, resize_restart)
        results = _run(wl, cl, speed, names, opts, seed, quota_share, charge)
    except (WorkloadError, OSError) as exc:
        typer.echo(f"error: {' '.join(str(exc).split())}", err=True)
        raise typer.Exit(2) from None
    summaries = compare(results)
    written: list[Path] = []
    if report is not None:
        from trainyard.sim.report import write_report

        try:
            written = write_report(results, report)
        except OSError as exc:
            typer.echo(f"error: --report: {exc}", err=True)
            raise typer.Exit(2) from None
    if as_json:
        out: dict[str, Any] = {
            "workload": workload,
            "cluster": cl.spec,
            "gpus": cl.gpus,
            "devices": "simulated",
            "jobs": len(wl.jobs),
            "interval_s": interval,
            "restart_s": speed.restart_s,
            "resize_restart_cost_s": charge,
            "left_out": left_out,
            "notes": notes,
            "policies": summaries if len(results) > 1 else None,
            "summary": summarize(results[0]) if len(results) == 1 else None,
        }
        typer.echo(json.dumps(out, indent=2, sort_keys=True))
        return
    typer.echo(
        f"{len(wl.jobs)} jobs of {workload} on {cl.gpus} simulated GPUs ({cl.spec}), "
        + (f"rounds every {interval:g} s" if interval > 0 else "a round at every event")
        + f", {speed.restart_s:g} s lost per restart"
        + (f" (the policies charge {charge:g} s a resize)" if charge is not None else "")
    )
    for note in notes:
        typer.echo(note)
    _print_table(summaries)
    if written and report is not None:
        typer.echo(f"report: {report / 'report.md'} ({len(written)} files)")


def _report_dir(raw: str | None) -> Path | None:
    """The folder `--report` names, refused when empty (it would mean the current folder,
    where report.md would be overwritten unasked) or when it is a file."""
    if raw is None:
        return None
    if not raw.strip():
        typer.echo(
            "error: --report: give a folder for the report, e.g. --report sim-report", err=True
        )
        raise typer.Exit(2)
    path = Path(raw)
    if path.exists() and not path.is_dir():
        typer.echo(f"error: --report: {path} is a file; give a folder", err=True)
        raise typer.Exit(2)
    return path


def _print_table(summaries: dict[str, dict[str, Any]]) -> None:
    """The comparison as a rich table, one row per policy (numbers right-aligned), never
    wrapped: a narrow or absent terminal gets it at its natural width."""
    header, rows = table_rows(summaries)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for i, title in enumerate(header):
        justify: Literal["left", "right"] = "left" if i == 0 else "right"
        table.add_column(title, justify=justify, no_wrap=True, min_width=widths[i])
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))
    natural = sum(w + 3 for w in widths)  # a cell, its padding and the column gap
    console = Console(highlight=False)
    Console(highlight=False, width=max(console.width, natural)).print(table)
    typer.echo(_legend())


def _legend() -> str:
    """What the table's headers mean, one per line, aligned: printed under the table."""
    width = max(len(term) for term, _ in TABLE_LEGEND)
    return "\n".join(f"  {term:<{width}}  {text}" for term, text in TABLE_LEGEND)
