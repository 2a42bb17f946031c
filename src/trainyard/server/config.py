"""Where a trainyard server keeps its state, and the settings `trainyard up` starts it with.

Everything lives under one home directory: `$TRAINYARD_HOME`, else `~/.trainyard`:

- `trainyard.db`: the embedded SQLite database (unless `--db URL` names another one);
- `runs/`: the local executor's job directories (run records, per-rank logs, checkpoints);
- `admin-token`: the first admin's API token, written once at bootstrap (mode 0600);
- `server.json`: the running server's URL and pid (removed on a clean exit);
- `sim-reports/`: where the console looks for simulator reports unless told otherwise
  (`trainyard simulate --report ~/.trainyard/sim-reports/NAME`).

The server creates everything with umask 077 (files 0600, directories 0700); the home and the
executor's `runs/` and `runs/jobs/` are 0711 when jobs run as other accounts, so that a job
can pass through to its own directory (`exec/identity.py`) and list nothing.
The database URL may come from `$TRAINYARD_DB` rather than `--db`: a process's command line
is readable by every local user (`/proc/<pid>/cmdline`), its environment is not.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


def default_db() -> str | None:
    """`$TRAINYARD_DB` (a database URL or SQLite path), else None."""
    return os.environ.get("TRAINYARD_DB") or None


def default_home() -> Path:
    """`$TRAINYARD_HOME`, else `~/.trainyard`."""
    env = os.environ.get("TRAINYARD_HOME")
    return Path(env).expanduser() if env else Path.home() / ".trainyard"


@dataclass(frozen=True)
class ServerConfig:
    """The settings of one server process (`trainyard up`)."""

    home: Path
    db_url: str | None = None  # None: SQLite at home/trainyard.db
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    virtual_gpus: int | None = None  # offered only when NVML finds no GPU
    profile: str = "default"
    interval_s: float = 1.0  # the loop's timer; submits, cancels and run ends wake it sooner
    min_step_gap_s: float = 0.05  # events closer together than this share one step
    grace_s: float = 10.0  # SIGTERM -> SIGKILL when stopping a job
    # the back-off before a restart after repeated failures (the first restart is immediate;
    # doubling with each failure in a row, at most 600 s)
    restart_backoff_s: float = 10.0
    # the profile's resize hysteresis, when given (`Profile.resize_hold_s`, `resize_restart_s`,
    # `resize_horizon_s`)
    resize_hold_s: float | None = None
    resize_restart_s: float | None = None
    resize_horizon_s: float | None = None
    heartbeat_s: float = 5.0
    node_name: str | None = None
    job_user: str = "auto"  # auto | dynamic | server | an account (exec/identity.py)
    job_env: tuple[str, ...] = ()  # server variables passed to jobs by name (exec/jobenv.py)
    # directories a job's working_dir must lie in (empty: any but the server's home, which
    # is never allowed)
    work_roots: tuple[Path, ...] = ()
    fairshare_half_life_s: float = 7 * 86_400.0  # decay of the usage history DRF sees
    max_queued_jobs: int = 10_000  # per tenant: a submit beyond it is answered 429
    log_cap_mb: float = 64.0  # output kept per rank, newest first (exec/rankwrap.py rotates)
    executor: str = "local"  # local | ray (exec/base.py)
    ray_address: str | None = None  # the Ray cluster (`ray start --head` prints it)
    # a job that reports progress (trainyard.sdk) and then reports none for this long is hung:
    # stopped and restarted (0: never)
    progress_timeout_s: float = 600.0
    spares: int = 0  # idle nodes kept as hot spares for jobs recovering from a failure
    # folders the console shows simulator reports from (empty: `<home>/sim-reports`)
    sim_reports: tuple[Path, ...] = ()

    @property
    def database(self) -> str:
        return self.db_url or str(self.home / "trainyard.db")

    @property
    def runs_dir(self) -> Path:
        return self.home / "runs"

    @property
    def admin_token_file(self) -> Path:
        return self.home / "admin-token"

    @property
    def state_file(self) -> Path:
        return self.home / "server.json"

    @property
    def sim_report_dirs(self) -> tuple[Path, ...]:
        return self.sim_reports or (self.home / "sim-reports",)

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        host = f"[{host}]" if ":" in host and not host.startswith("[") else host
        return f"http://{host}:{self.port}"
