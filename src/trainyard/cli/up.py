"""`trainyard up`: run the platform on this machine (server, scheduler loop, local executor).

Starts `trainyard.server.serve.Server`: migrates (and on first start bootstraps) the database,
registers this machine with its GPUs (declared virtual ones with `--virtual-gpus N` when NVML
finds none, and then every line says they are virtual), re-adopts jobs that outlived a
previous server, and serves the API until Ctrl-C. `--submit FILE` submits job specs through
the API once it is up (what `make up` does with the examples); the loop's progress is printed
as it happens. `--exit-when-done` stops the server once the submitted jobs have finished.
On a first start the CLI is logged in to this server unless it already has a login.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from trainyard.server.config import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    ServerConfig,
    default_db,
    default_home,
)

if TYPE_CHECKING:  # the server stack is imported when `up` runs, not for every command
    from trainyard.server.loop.platform import StepReport
    from trainyard.server.serve import Server, Started

_TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}
console = Console(highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add the `up` command to `app`."""
    app.command("up")(up_command)


def _fail(message: str) -> None:
    # the message is text, not markup: `pip install 'trainyard[ray]'` keeps its brackets
    Console(stderr=True, highlight=False).print(f"[red]error:[/red] {escape(message)}")
    raise typer.Exit(2)


def up_command(
    home: Annotated[
        Path | None, typer.Option(help="state directory [$TRAINYARD_HOME or ~/.trainyard]")
    ] = None,
    db: Annotated[
        str | None,
        typer.Option(help="database URL or SQLite path [$TRAINYARD_DB or HOME/trainyard.db]"),
    ] = None,
    host: Annotated[str, typer.Option(help="address the API listens on")] = DEFAULT_HOST,
    port: Annotated[
        int, typer.Option(help="API port (0: any free port)", min=0, max=65535)
    ] = DEFAULT_PORT,
    virtual_gpus: Annotated[
        int | None,
        typer.Option(
            "--virtual-gpus",
            min=0,
            help="declare N virtual GPUs when NVML finds none (labelled virtual everywhere)",
        ),
    ] = None,
    profile: Annotated[str, typer.Option(help="scheduling profile")] = "default",
    interval: Annotated[
        float, typer.Option(help="scheduler timer in seconds (events wake it sooner)", min=0.05)
    ] = 1.0,
    restart_backoff: Annotated[
        float,
        typer.Option(
            "--restart-backoff",
            min=0.0,
            help="back-off before a restart after repeated failures (the first restart is "
            "immediate; doubling, at most 600)",
        ),
    ] = 10.0,
    resize_hold: Annotated[
        float | None,
        typer.Option(
            "--resize-hold",
            min=0.0,
            help="seconds an elastic job runs after a (re)start before it may be resized "
            "[the profile's: 60]",
        ),
    ] = None,
    resize_restart: Annotated[
        float | None,
        typer.Option(
            "--resize-restart-cost",
            min=0.0,
            help="seconds a resize is taken to cost (checkpoint, relaunch): a growth must "
            "repay it over the job's age, a rebalance its restarts within the profile's "
            "resize horizon [the profile's: 90]",
        ),
    ] = None,
    resize_horizon: Annotated[
        float | None,
        typer.Option(
            "--resize-horizon",
            min=0.0,
            help="seconds over which a rebalance of elastic jobs must repay the restarts it "
            "causes (0: moves judged by the growing jobs' gains alone) [the profile's: 300]",
        ),
    ] = None,
    submit: Annotated[
        list[Path] | None,
        typer.Option("--submit", help="job spec to submit once the API is up (repeatable)"),
    ] = None,
    exit_when_done: Annotated[
        bool, typer.Option("--exit-when-done", help="stop once the --submit jobs have finished")
    ] = False,
    job_user: Annotated[
        str,
        typer.Option(
            "--job-user",
            help="who jobs run as: auto (a uid of their own when the server is root; on "
            "Ray the workers' user), dynamic, server, or an account name (docs/security.md)",
        ),
    ] = "auto",
    job_env: Annotated[
        list[str] | None,
        typer.Option("--job-env", help="pass this server variable to every job (repeatable)"),
    ] = None,
    fairshare_half_life: Annotated[
        float,
        typer.Option(
            "--fairshare-half-life",
            min=0.001,
            help="days for past GPU use to count half as much in fair share",
        ),
    ] = 7.0,
    max_queued_jobs: Annotated[
        int,
        typer.Option("--max-queued-jobs", min=1, help="jobs one tenant may have queued"),
    ] = 10_000,
    log_cap_mb: Annotated[
        float,
        typer.Option(
            "--log-cap-mb", min=1.0, help="output kept per rank (older output is rotated away)"
        ),
    ] = 64.0,
    executor: Annotated[
        str,
        typer.Option(
            "--executor",
            help="what runs jobs: local (this machine) or ray (the nodes of a Ray cluster; "
            "pip install 'trainyard[ray]', docs/ray.md)",
        ),
    ] = "local",
    ray_address: Annotated[
        str | None,
        typer.Option(
            "--ray-address",
            help="the Ray cluster for --executor ray (host:port of its head) [a local Ray]",
        ),
    ] = None,
    progress_timeout: Annotated[
        float,
        typer.Option(
            "--progress-timeout",
            min=0.0,
            help="seconds without a progress report (trainyard.sdk) after which a job that "
            "reports is taken as hung and restarted (0: never)",
        ),
    ] = 600.0,
    spares: Annotated[
        int,
        typer.Option(
            "--spares",
            min=0,
            help="idle nodes kept as hot spares: jobs recovering from a failure (a lost "
            "node, a killed rank) restart there first, and no other job is placed there",
        ),
    ] = 0,
    sim_reports: Annotated[
        list[Path] | None,
        typer.Option(
            "--sim-reports",
            help="folder of `trainyard simulate --report` output the console shows "
            "(repeatable) [HOME/sim-reports]",
        ),
    ] = None,
    work_root: Annotated[
        list[Path] | None,
        typer.Option(
            "--work-root",
            help="confine job working_dirs to this directory (repeatable) [any directory "
            "but the server's home]",
        ),
    ] = None,
) -> None:
    """Run trainyard on this machine: API, scheduler and local executor (Ctrl-C stops it)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from trainyard.core import PROFILES
    from trainyard.exec.procfs import free_port
    from trainyard.server.locks import ServerError
    from trainyard.server.serve import Server

    if profile not in PROFILES:
        known = ", ".join(PROFILES.names())
        _fail(f"--profile: unknown profile {profile!r}; choose one of {known}")
    specs = list(submit or [])
    for path in specs:
        if not path.is_file():
            _fail(f"--submit: no such file {str(path)!r}")
    if exit_when_done and not specs:
        _fail("--exit-when-done needs at least one --submit FILE")
    if executor not in ("local", "ray"):
        _fail(f"--executor: unknown executor {executor!r}; choose local or ray")
    if ray_address and executor != "ray":
        _fail("--ray-address needs --executor ray")
    from trainyard.exec.jobenv import check_passthrough

    try:
        check_passthrough(job_env or ())
    except ValueError as error:
        _fail(str(error))
    config = ServerConfig(
        home=(home or default_home()).expanduser().resolve(),
        db_url=db or default_db(),
        host=host,
        port=port or free_port(host if host not in ("", "0.0.0.0") else "127.0.0.1"),
        virtual_gpus=virtual_gpus,
        profile=profile,
        interval_s=interval,
        restart_backoff_s=restart_backoff,
        resize_hold_s=resize_hold,
        resize_restart_s=resize_restart,
        resize_horizon_s=resize_horizon,
        job_user=job_user,
        job_env=tuple(job_env or ()),
        work_roots=tuple(p.expanduser() for p in work_root or ()),
        log_cap_mb=log_cap_mb,
        max_queued_jobs=max_queued_jobs,
        fairshare_half_life_s=fairshare_half_life * 86_400.0,
        executor=executor,
        ray_address=ray_address,
        progress_timeout_s=progress_timeout,
        spares=spares,
        sim_reports=tuple(p.expanduser().resolve() for p in sim_reports or ()),
    )
    watch = _Watch(exit_when_done)
    server = Server(config, on_step=watch.on_step)
    watch.server = server
    try:
        started = server.prepare()
    except ServerError as error:
        _fail(str(error))
        return
    token = _token(config, started)
    _banner(config, started, token, server.console_link())
    server.serve(on_ready=lambda: watch.submit(config, token, specs))
    console.print(
        f"server stopped; {config.url} is down. Jobs still running keep running; the next "
        "`trainyard up` on this home re-adopts them."
    )


class _Watch:
    """Submits the `--submit` specs, prints the loop's progress, stops when they are done."""

    def __init__(self, exit_when_done: bool) -> None:
        self.exit_when_done = exit_when_done
        self.server: Server | None = None
        self.names: dict[str, str] = {}
        self._lock = threading.Lock()

    def submit(self, config: ServerConfig, token: str | None, specs: list[Path]) -> None:
        if not specs:
            return
        if token is None:
            console.print("[yellow]not submitting: no admin token (see above)[/yellow]")
            return
        import httpx

        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/yaml"}
        with httpx.Client(base_url=config.url, timeout=30) as client:
            for path in specs:
                answer = client.post("/v1/jobs", content=path.read_bytes(), headers=headers)
                body: dict[str, Any] = answer.json()
                if answer.status_code != 201:
                    error = body.get("error", {})
                    why = escape(f"{path}: rejected: {error.get('field') or ''} "
                                 f"{error.get('message')}")  # fmt: skip
                    console.print(f"[red]{why}[/red]")
                    continue
                with self._lock:
                    self.names[body["id"]] = path.parent.name if path.stem == "job" else path.stem
                console.print(f"submitted {path} as job [bold]{body['id']}[/bold]")
        if not self.names and self.exit_when_done and self.server is not None:
            self.server.shutdown()
        self.on_step(None)

    def _label(self, job_id: str) -> str:
        name = self.names.get(job_id)
        return f"{job_id} ({name})" if name else job_id

    def on_step(self, report: StepReport | None) -> None:
        if report is not None:
            # in the order they happened: a step observes ends (and requeues the retried)
            # before it launches
            for kind in ("adopted", "succeeded", "failed", "stopped", "requeued", "launched"):
                for job_id in getattr(report, kind):
                    console.print(f"  job {self._label(job_id)}: {kind}")
        if not self.exit_when_done or not self.names or self.server is None:
            return
        platform = self.server.platform
        assert platform is not None
        from sqlalchemy import select

        from trainyard.server.db import Job, JobState

        with platform.session_factory() as s:
            columns = (Job.id, Job.state, Job.restart_count, Job.max_restarts)
            rows = list(s.execute(select(*columns).where(Job.id.in_(list(self.names)))))
        states = {row.id: JobState(row.state).value for row in rows}
        settled = all(
            state in _TERMINAL
            and not (state == "FAILED" and row.restart_count < row.max_restarts)  # retried
            for row, state in zip(rows, states.values(), strict=True)
        )
        if settled and len(states) == len(self.names):
            summary = ", ".join(f"{self._label(k)}={v}" for k, v in states.items())
            console.print(f"all submitted jobs finished: {summary}")
            self.server.shutdown()


def _token(config: ServerConfig, started: Started) -> str | None:
    """The admin token: from this bootstrap, else the one the first start wrote."""
    if started.admin_token is not None:
        return started.admin_token
    try:
        return config.admin_token_file.read_text().strip() or None
    except OSError:
        return None


def _banner(config: ServerConfig, started: Started, token: str | None, link: str | None) -> None:
    from trainyard.server.db import shown_url

    inv = started.inventory
    console.print(f"[bold]trainyard[/bold] on {started.node}: API {config.url} "
                  f"(docs {config.url}/docs), home {config.home}")  # fmt: skip
    if link is not None:
        console.print(f"  [bold]console[/bold]: {link}")
        console.print("    (logs a browser in once, within 15 minutes; `trainyard console` "
                      "prints a new link)")  # fmt: skip
    console.print(f"  database: {shown_url(config.database)}")
    console.print(f"  devices: {started.devices or inv.describe()}")
    if not inv.gpus and not started.devices:
        console.print("  [yellow]no GPU found and none declared: only gpus: 0 jobs can run; "
                      "pass --virtual-gpus N to declare virtual ones[/yellow]")  # fmt: skip
    for note in started.notes:
        console.print(f"  note: {note}")
    rec = started.recovered
    if rec.adopted or rec.failed or rec.requeued or rec.launched:
        console.print(f"  recovered from a previous run: {_recovered(rec)}")
    if started.admin_token is not None:
        console.print(f"  first start: admin token written to {config.admin_token_file}")
        _login(config, started.admin_token)
    elif token is None:
        console.print(f"  no admin token at {config.admin_token_file}: issue one with "
                      "`trainyard admin token issue admin`")  # fmt: skip
    console.print(f"  look: `trainyard jobs`, `trainyard describe JOB`, `trainyard logs JOB -f`, "
                  f"{config.url}/metrics (the admin token); Ctrl-C stops the server (jobs keep "
                  "running)")  # fmt: skip


def _login(config: ServerConfig, token: str) -> None:
    """Log the CLI in to this server unless it already has a login somewhere."""
    from trainyard.client import credentials

    if credentials.load() is None:
        path = credentials.save(config.url, token)
        console.print(f"  the CLI is logged in as admin ({path})")
    else:
        switch = f'trainyard login {config.url} --token "$(cat {config.admin_token_file})"'
        console.print(f"  the CLI keeps its existing login (`{switch}` to switch)")


def _recovered(rec: Any) -> str:
    """What `Platform.recover` found, each job counted once: still running (re-adopted),
    ended while no server watched (succeeded, failed: requeued or not), launched."""
    ended = set(rec.succeeded) | set(rec.failed) | set(rec.requeued)
    running = [j for j in rec.adopted if j not in ended]
    parts = [f"{len(running)} job(s) still running, re-adopted"]
    if ended:
        requeued = set(rec.requeued)
        parts.append(
            f"{len(ended)} ended while no server ran ({len(set(rec.succeeded))} succeeded, "
            f"{len(set(rec.failed) - requeued)} failed, {len(requeued)} failed and requeued)"
        )
    parts.append(f"{len(set(rec.launched))} launched")
    return ", ".join(parts)
