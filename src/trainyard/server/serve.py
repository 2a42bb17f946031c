"""`Server`: one trainyard control plane process on one machine (what `trainyard up` runs).

It owns, for its lifetime:

- the database (migrated to head at start; bootstrapped with a default tenant, admin and
  queue when empty, the admin token written to `<home>/admin-token`);
- its executor (`--executor`): the local one, with this machine as its node (GPUs from NVML,
  or declared virtual ones, labelled as such), or Ray's, whose cluster's nodes the loop
  keeps in the database (`Platform.sync_nodes`);
- the `Platform` loop, on a thread: one `Platform.step()` per wake-up. It wakes on events (a
  submit or cancel through the API, any rank process exiting, seen through pidfds locally
  and through the Ray executor's watcher, a node joining or leaving) and on a timer
  (`interval_s`); it records the local node's heartbeat;
- the REST API (uvicorn), which reads job logs from the executor's files, and refuses specs
  this machine cannot run as written (`local_limits`: the local executor starts every rank
  here, so `nodes` is at most 1 and a `working_dir` must exist here; with Ray a job may span
  nodes).

At start, before serving, `Platform.recover()` re-adopts the runs that outlived a previous
server process (runs are never children of a particular server: they are re-attached by pid
and start time), and launches jobs that were scheduled but never started. One server per
home: an exclusive lock on `<home>/server.lock` (released by the kernel even after
`kill -9`) stops a second one. Stopping the server leaves running jobs running; the next
start re-adopts them. One server per database too (`locks.lock_database`): a second server
on another home but the same database is refused, naming the first.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import json
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from sqlalchemy import Engine, update

from trainyard.core import Profile, get_profile
from trainyard.exec.base import Executor
from trainyard.exec.gpuhealth import GpuHealth
from trainyard.exec.gpus import GpuInventory, discover
from trainyard.exec.identity import IdentityError, JobUsers, uid_registry
from trainyard.exec.local import LocalExecutor
from trainyard.exec.watch import ExitWatcher
from trainyard.jobspec import Limits
from trainyard.server.api.app import create_app
from trainyard.server.bootstrap import bootstrap, write_secret
from trainyard.server.config import ServerConfig
from trainyard.server.console import ConsoleSettings
from trainyard.server.db import Node, init_db, make_session_factory, shown_url
from trainyard.server.db.ownership import DatabaseLock
from trainyard.server.lifecycle import RetryPolicy
from trainyard.server.locks import ServerError, lock_database, lock_home
from trainyard.server.loop.fairshare import FairShare
from trainyard.server.loop.platform import Platform, StepReport
from trainyard.server.outage import Outage, is_outage
from trainyard.server.services.logs import JobLogs

log = logging.getLogger(__name__)


@dataclass
class Started:
    """What `Server.prepare` found and did, for the banner `trainyard up` prints."""

    inventory: GpuInventory
    node: str
    admin_token: str | None  # set only when this start bootstrapped the database
    recovered: StepReport
    notes: list[str] = field(default_factory=list)
    devices: str = ""  # what the executor's nodes offer (Ray), instead of `inventory`


def local_limits(inventory: GpuInventory) -> Limits:
    """What one job may ask of this machine: one node (the local executor runs every rank
    here: `nodes: 2` would start half the ranks, so it is refused naming `nodes`). A job
    asking for more GPUs than the machine has is accepted and waits, its reason saying the
    cluster has too few (nodes may be added; `--virtual-gpus` may change at a restart)."""
    del inventory  # the same for every machine today; the Ray executor will widen it
    return Limits(max_nodes=1)


class Server:
    def __init__(
        self,
        config: ServerConfig,
        *,
        on_step: Callable[[StepReport], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.on_step = on_step
        self.clock = clock
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._loop: threading.Thread | None = None
        self._lock_file: IO[str] | None = None
        self._db_lock: DatabaseLock | None = None
        self._outage = Outage(log, "scheduler")
        self._watcher: ExitWatcher | None = None
        self._last_heartbeat = 0.0
        self._http: Any = None
        self.engine: Engine | None = None
        self.limits = Limits()
        self.platform: Platform | None = None
        self.steps = 0
        self._umask: int | None = None  # the process's umask before `prepare` (restored)
        self.own_uids = False  # jobs run as uids of their own (`--job-user dynamic`)

    # ---- start ---------------------------------------------------------------------------

    def prepare(self) -> Started:
        """Everything before serving: lock, database, bootstrap, node, executor, recovery;
        a failure undoes what it did (the home's lock, the engine, the process's umask)."""
        try:
            return self._prepare()
        except BaseException:
            if self._lock_file is not None:
                self.close()  # the home is ours: its lock and state file, the engine, the umask
            elif self._umask is not None:
                os.umask(self._umask)
                self._umask = None
            raise

    def _prepare(self) -> Started:
        cfg = self.config
        umask = os.umask(0o077)  # state files 0600, directories 0700 (jobs get their own)
        if self._umask is None:
            self._umask = umask
        cfg.home.mkdir(parents=True, exist_ok=True)
        users = job_users(cfg)
        self.own_uids = users.mode == "dynamic"
        cfg.home.chmod(0o700 if users.mode == "server" else 0o711)
        self._lock_file = lock_home(cfg.home)
        check_port(cfg.host, cfg.port)
        try:
            self.engine = init_db(cfg.database)
        except Exception as error:  # a bad URL, an unreachable server, a newer schema
            raise ServerError(f"database {shown_url(cfg.database)!r}: {error}") from None
        self._db_lock = lock_database(self.engine, cfg.home)  # one server per database
        sessions = make_session_factory(self.engine)
        boot = bootstrap(sessions, now=self.clock())
        if boot.admin_token is not None:
            write_secret(cfg.admin_token_file, boot.admin_token)
        inventory = discover(virtual=cfg.virtual_gpus)
        _private(cfg.home, cfg.database)
        executor = self._executor(users)
        retry = RetryPolicy(base_s=cfg.restart_backoff_s)
        profile: str | Profile = cfg.profile
        tuned = {
            "resize_hold_s": cfg.resize_hold_s,
            "resize_restart_s": cfg.resize_restart_s,
            "resize_horizon_s": cfg.resize_horizon_s,
        }
        if any(v is not None for v in tuned.values()):
            changes = {k: v for k, v in tuned.items() if v is not None}
            profile = get_profile(cfg.profile).with_overrides(**changes)
        self.platform = Platform(
            sessions, executor, profile=profile, clock=self.clock, retry=retry,
            fairshare=FairShare(cfg.fairshare_half_life_s),
            progress_timeout_s=cfg.progress_timeout_s, spares=cfg.spares,
        )  # fmt: skip
        notes = executor.notes()
        if cfg.spares:  # chosen each round among idle nodes; a pending reason names them
            notes.append(f"hot spares: up to {cfg.spares} idle node(s) kept for recovering jobs")
        if isinstance(executor, LocalExecutor):
            node = self.platform.register_node(inventory, cfg.node_name)
            notes.append(users.note or _isolation(users))
            notes.append(self._gpu_checks(inventory))
            self.limits = local_limits(inventory)
        else:
            from trainyard.exec.ray.nodes import summary

            self.platform.sync_nodes(self.clock(), force=True)
            node = f"Ray at {cfg.ray_address or 'a local Ray'}"
            devices = summary(executor.nodes() or [])
            self.limits = Limits()
            set_waker = getattr(executor, "set_waker", None)
            if set_waker is not None:
                set_waker(self._wake.set)
        recovered = self.platform.recover()
        self._watcher = ExitWatcher(lambda _pid: self._wake.set())
        self._watch_runs()
        started = Started(inventory, node, boot.admin_token, recovered, notes)
        if not isinstance(executor, LocalExecutor):
            started.devices = devices
        return started

    def _gpu_checks(self, inventory: GpuInventory) -> str:
        """Start GPU health checks on this machine (loop/nodewatch.py); what to tell."""
        if inventory.virtual or not inventory.gpus:
            return "GPU health checks: off (the GPUs are virtual)"
        health = GpuHealth()
        why = health.start()
        if why:
            return f"GPU health checks: off ({why})"
        assert self.platform is not None
        self.platform.nodes.gpu_health = health
        extra = f"; {'; '.join(health.notes)}" if health.notes else ""
        return f"GPU health checks: on (NVML: lost GPUs, critical XIDs, ECC){extra}"

    def _executor(self, users: JobUsers) -> Executor:
        cfg = self.config
        if cfg.executor == "ray":
            from trainyard.exec.ray import RayExecutor, RayMissing

            try:
                return RayExecutor(
                    cfg.runs_dir,
                    address=cfg.ray_address,
                    api_url=cfg.url,
                    grace_s=cfg.grace_s,
                    virtual_gpus=cfg.virtual_gpus is not None,
                    job_env=cfg.job_env,
                    log_cap_bytes=int(cfg.log_cap_mb * 1024 * 1024),
                    users=users,
                )
            except RayMissing as error:
                raise ServerError(f"--executor ray: {error}") from None
        if cfg.executor != "local":
            raise ServerError(f"--executor: unknown executor {cfg.executor!r}; use local or ray")
        return LocalExecutor(
            cfg.runs_dir,
            api_url=cfg.url,
            grace_s=cfg.grace_s,
            users=users,
            job_env=cfg.job_env,
            job_umask=self._umask,
            log_cap_bytes=int(cfg.log_cap_mb * 1024 * 1024),
        )

    def app(self) -> Any:
        assert self.engine is not None, "prepare() first"
        return create_app(
            self.engine,
            limits=self.limits,
            notify=self.wake,
            logs=JobLogs(self.config.runs_dir),
            clock=self.clock,
            work_roots=self.config.work_roots,
            private=(self.config.home,),
            dirs_here=self.config.executor == "local",
            others_enter=self.own_uids and self.config.executor == "local",
            on_ray=self.config.executor == "ray",
            max_queued=self.config.max_queued_jobs,
            console=ConsoleSettings(
                sim_reports=self.config.sim_report_dirs,
                usage_weight=self._profile().usage_weight,
            ),
        )

    def console_link(self, user: str | None = None) -> str | None:
        """A link that logs a browser in to the console once (a new login code for `user`,
        by default the admin token's user); None when there is no such user."""
        from trainyard.server.api.errors import ApiError
        from trainyard.server.services import logins

        assert self.platform is not None, "prepare() first"
        now = self.clock()
        with self.platform.session_factory() as s:
            if user is None:
                try:
                    token = self.config.admin_token_file.read_text().strip()
                except OSError:
                    token = ""
                user = logins.link_user(s, token, now=now)
            try:
                code = logins.issue_code(s, user, now=now)
            except ApiError:
                return None
            s.commit()
        return f"{self.config.url}/?token={code}"

    def _profile(self) -> Profile:
        chosen = self.platform.profile if self.platform is not None else self.config.profile
        return get_profile(chosen) if isinstance(chosen, str) else chosen

    # ---- the loop ------------------------------------------------------------------------

    def wake(self) -> None:
        """Ask the loop for a step now (after a submit, a cancel, a process exit)."""
        self._wake.set()

    def start_loop(self) -> None:
        self._loop = threading.Thread(target=self._run_loop, name="trainyard-loop", daemon=True)
        self._loop.start()

    def _run_loop(self) -> None:
        ended, took = 0.0, 0.0
        while not self._stop.is_set():
            self._wake.wait(self.config.interval_s)
            # A burst of events (many submits) is taken in one step. Between steps the loop
            # rests at least `min_step_gap_s` and twice as long as the last step took, so a
            # long queue cannot starve the API of the CPU (the loop uses at most ~1/3 of it).
            pause = ended + max(self.config.min_step_gap_s, 2 * took) - time.monotonic()
            if pause > 0:
                self._stop.wait(pause)
            self._wake.clear()
            if self._stop.is_set():
                return
            began = time.monotonic()
            self.step()
            ended = time.monotonic()
            took = ended - began

    def step(self) -> StepReport | None:
        assert self.platform is not None, "prepare() first"
        if self._db_lock is not None and not self._db_lock.held():
            return None  # another server took the database (db/ownership.py)
        try:
            report = self.platform.step()
        except Exception as error:  # a database hiccup must not end the loop: retried
            if is_outage(error):
                self._outage.failed(error)  # one warning, not a traceback a step
            else:
                log.exception("scheduler step failed")
            self.platform.metrics.step_failures.inc()  # what an operator alerts on
            return None
        self._outage.ok()
        self.steps += 1
        if report.launched or report.requeued:
            self._watch_runs()
        try:
            self._heartbeat(report.now)
            if self.on_step is not None:
                self.on_step(report)
        except Exception:
            log.exception("after a scheduler step")
        return report

    def _watch_runs(self) -> None:
        assert self.platform is not None and self._watcher is not None
        if self.platform.executor.name != "local":  # its pids are on other machines
            return
        self._watcher.watch(pid for h in self.platform.executor.handles() for pid in h.pids)

    def _heartbeat(self, now: float) -> None:
        if now - self._last_heartbeat < self.config.heartbeat_s or self.platform is None:
            return
        self._last_heartbeat = now
        with self.platform.session_factory() as s:
            s.execute(
                update(Node)
                .where(Node.name == self.platform.node_name)
                .values(last_heartbeat_at=now)
            )
            s.commit()

    # ---- serve and stop ------------------------------------------------------------------

    def serve(self, app: Any | None = None, on_ready: Callable[[], None] | None = None) -> None:
        """Serve the API until SIGINT/SIGTERM or `shutdown()` (blocking); the loop runs
        meanwhile. `on_ready` runs on a thread once the API accepts connections."""
        import uvicorn

        config = uvicorn.Config(
            app if app is not None else self.app(),
            host=self.config.host,
            port=self.config.port,
            log_level="warning",
            access_log=False,
            lifespan="off",
            # open console pages (server-sent events) end with the server, not the reverse
            timeout_graceful_shutdown=3,
        )
        server = uvicorn.Server(config)
        self._http = server
        # What start-up built (the app and its routes, SQLAlchemy's mappers, the console's
        # templates, imported modules) lives as long as the server: freeze it out of the
        # cyclic collector's sight. Otherwise the first full collection, seconds after
        # start, walks all of it in one pause (~100 ms on this VM) in the middle of a step,
        # and the loop's rest after that step held the next submit back by ~300 ms.
        gc.collect()
        gc.freeze()
        self.start_loop()
        self._write_state()
        if on_ready is not None:
            threading.Thread(
                target=self._when_ready, args=(server, on_ready), name="trainyard-ready",
                daemon=True,
            ).start()  # fmt: skip
        # uvicorn handles SIGINT/SIGTERM during `run` and re-raises them afterwards to the
        # handlers it found; these absorb them, so `serve` returns and cleans up normally.
        caught: dict[signal.Signals, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                caught[sig] = signal.signal(sig, lambda *_: None)
        try:
            server.run()
        finally:
            for sig, handler in caught.items():
                signal.signal(sig, handler)
            gc.unfreeze()  # a process that serves again (tests) starts from a clean slate
            self.close()

    def _when_ready(self, server: Any, on_ready: Callable[[], None]) -> None:
        while not server.started and not self._stop.is_set():
            time.sleep(0.02)
        if server.started:
            on_ready()

    def shutdown(self) -> None:
        """Ask `serve` to return (as SIGTERM would); running jobs keep running."""
        if self._http is not None:
            self._http.should_exit = True

    def _write_state(self) -> None:
        state = {"url": self.config.url, "pid": os.getpid(), "home": str(self.config.home)}
        tmp = self.config.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state) + "\n")
        os.replace(tmp, self.config.state_file)

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._loop is not None:
            self._loop.join(timeout=30)
        if self._watcher is not None:
            self._watcher.close()
        if self.platform is not None:
            self.platform.executor.close()
            self.platform.nodes.close()
        with contextlib.suppress(FileNotFoundError):
            self.config.state_file.unlink()
        if self._db_lock is not None:
            self._db_lock.release()
            self._db_lock = None
        if self.engine is not None:
            self.engine.dispose()
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None
        if self._umask is not None:
            os.umask(self._umask)
            self._umask = None


def job_users(cfg: ServerConfig) -> JobUsers:
    """Who the server's jobs run as (`--job-user`). On Ray, `auto` is the Ray workers' user:
    per-job uids there need root Ray workers and a shared filesystem on which root may chown
    (docs/ray.md, Security), so they are asked for with `dynamic`."""
    if cfg.executor == "ray" and cfg.job_user == "auto":
        return JobUsers("server")
    try:
        return JobUsers.create(cfg.job_user, cfg.runs_dir, ours=(cfg.home,))
    except IdentityError as error:
        raise ServerError(str(error)) from None


def _isolation(users: JobUsers) -> str:
    if users.mode == "dynamic":
        return (
            f"jobs run as uids of their own ({users.uid_base + 1:,} and up, each unique on "
            f"this machine: {uid_registry()}), not as root"
        )
    if users.mode == "named":
        return f"jobs run as {users.account!r}"
    return "jobs run as the server's user"


def _private(home: Path, database: str) -> None:
    """State that earlier versions left readable: the SQLite files and the run records."""
    candidates = [home / "trainyard.db", Path(database)]
    for base in candidates:
        for path in (base, base.with_name(base.name + "-wal"), base.with_name(base.name + "-shm")):
            with contextlib.suppress(OSError):
                if path.is_file() and path.stat().st_mode & 0o077:
                    path.chmod(0o600)


def check_port(host: str, port: int) -> None:
    """A clear error when the API port is taken (rather than uvicorn's log line)."""
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as error:
            why = "is in use" if error.errno == errno.EADDRINUSE else f"cannot be bound ({error})"
            raise ServerError(
                f"port {port} on {host} {why}; choose another with --port (or stop the "
                "program that holds it)"
            ) from None
