"""The executor's values: what to launch (`LaunchSpec`), what was launched (`RunHandle`,
`RankInfo`) and how a run stands (`RunStatus`), plus the device split across ranks."""

from __future__ import annotations

import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

RunState = Literal["running", "succeeded", "failed", "stopped", "lost"]


class DeviceBusy(RuntimeError):
    """A launch asked for devices that a live run (one with a process left) still holds.

    Raised before anything of the new run exists. `holders` maps each busy device to the
    (job id, attempt) holding it. The scheduler never asks for this when it keeps its
    contract (`core.audit`), so a caller treats it as a bug signal and launches later."""

    def __init__(self, job_id: str, holders: dict[int, tuple[str, int]]) -> None:
        self.job_id = job_id
        self.holders = dict(holders)
        held = ", ".join(f"{d} (job {j} attempt {a})" for d, (j, a) in sorted(holders.items()))
        super().__init__(f"devices still held by live runs: {held}")


class NodeGone(RuntimeError):
    """A launch named a node the engine no longer has (lost since the decision), or a rank
    could not start there (`node`, when known). Nothing of the run is left; the job is
    requeued at no cost."""

    def __init__(self, message: str, node: str = "") -> None:
        super().__init__(message)
        self.node = node


@dataclass(frozen=True)
class LaunchSpec:
    """One attempt of a job on this machine. `devices` are split evenly across the ranks."""

    job_id: str
    command: list[str]
    attempt: int = 0
    workers: int = 1
    devices: tuple[int, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    token: str = ""
    cpus: float | None = None
    memory_gb: float | None = None
    virtual_gpus: bool = False  # the devices are declared, not real (TRAINYARD_VIRTUAL_GPUS=1)
    array: tuple[str, int] | None = None  # (array id, index) of a job array's member
    # "node": every rank sees all the job's devices on the node (torchrun's way, LOCAL_RANK
    # indexes them); "rank": each rank sees only its own
    visible_devices: str = "node"
    # every node of the run with its devices and ranks, rank 0's node first (an executor of
    # many machines reads this; the local one runs `workers` ranks on `devices` here)
    hosts: tuple[Host, ...] = ()
    # an ended job of the same user whose checkpoints this job starts from (`resume_from`)
    resume_from: str | None = None


@dataclass(frozen=True)
class Host:
    """One node of a run: its name, the devices the core chose there, and its ranks."""

    node: str
    devices: tuple[int, ...]
    workers: int


@dataclass(frozen=True)
class RankInfo:
    rank: int
    pid: int  # the wrapper's pid
    start_time: int | None
    log: Path
    devices: tuple[int, ...]
    node: str = ""  # the node it runs on (the Ray executor's; empty: this machine)


@dataclass
class RunHandle:
    """A launched (or adopted) attempt. Mutable bookkeeping stays in this process only."""

    job_id: str
    attempt: int
    pgid: int
    port: int
    run_dir: Path
    ranks: tuple[RankInfo, ...]
    notes: tuple[str, ...] = ()
    cgroup: Path | None = None
    adopted: bool = False
    workers: int = 0  # ranks the launch meant to start (0: not recorded)
    uid: int | None = None  # a uid of this job alone (`--job-user dynamic`), else None
    procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)
    term_sent_at: float | None = None
    seen_end: dict[int, float] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """False when the launch was cut short (a crash while starting ranks): fewer ranks
        are recorded than were meant to start."""
        return self.workers == 0 or len(self.ranks) == self.workers

    @property
    def pids(self) -> list[int]:
        return [r.pid for r in self.ranks]

    def exit_file(self, rank: int) -> Path:
        return self.run_dir / f"rank-{rank}.exit.json"

    def start_error(self, rank: int) -> str:
        """Why `rank`'s command could not be started, from its wrapper's exit record (the
        wrapper exits 127 with an `error`: `rankwrap._not_started`), else ""."""
        from trainyard.exec.procfs import read_json

        rec = read_json(self.exit_file(rank))
        error = rec.get("error") if isinstance(rec, dict) else None
        return str(error) if error else ""

    def pid_file(self, rank: int) -> Path:
        return self.run_dir / f"rank-{rank}.pid.json"


@dataclass(frozen=True)
class RunStatus:
    """`exit_codes[r]` is None while rank r runs, or when it ended without a record (its
    wrapper was killed too); a negative code is the signal that killed the rank. `settled`:
    no process of the run is left. `lost`: every rank vanished without a trace."""

    state: RunState
    exit_codes: dict[int, int | None]
    first_failed_rank: int | None
    settled: bool
    reason: str = ""
    # the run ended because the infrastructure failed it (a node or a rank's supervisor was
    # lost), not because of the job's own code: it costs the job no restart
    infra: bool = False
    # when the last rank ended (its exit record), once every rank has: a run that ended while
    # no server watched is billed to then, not to when a server saw it
    ended_at: float | None = None
    # no restart can change the outcome: a rank's command could not be started at all (not
    # found, not executable, a working directory its user may not enter), or the run was
    # stopped at its time limit
    final: bool = False

    @property
    def finished(self) -> bool:
        return self.state != "running"


def split_devices(devices: tuple[int, ...], workers: int) -> list[tuple[int, ...]]:
    if not devices:
        return [()] * workers
    if len(devices) % workers:
        raise ValueError(f"devices: {len(devices)} devices cannot be split evenly over {workers}")
    k = len(devices) // workers
    return [devices[i * k : (i + 1) * k] for i in range(workers)]


EXIT_CHECKPOINTED = 85  # trainyard.sdk: saved on a notice and stopped; resumable


def describe_code(code: int | None) -> str:
    if code is None:
        return "ended without an exit record (its wrapper was killed)"
    if code < 0:
        return f"was killed by signal {-code} ({signal.Signals(-code).name})"
    if code == EXIT_CHECKPOINTED:
        return (
            f"exited with code {code} (trainyard.sdk's code for a checkpoint saved on a stop "
            "request: a clean stop when one was asked for, else a failure)"
        )
    return f"exited with code {code}"


def positions(shown: list[int], devices: tuple[int, ...]) -> list[int]:
    """Where a rank's `devices` are in the `CUDA_VISIBLE_DEVICES` it is shown (`shown`: the
    job's devices on the node; empty: it is shown only its own)."""
    return [shown.index(d) for d in devices] if shown else list(range(len(devices)))


def record(h: RunHandle) -> dict[str, object]:
    """The `run.json` document of a run (what `from_record` reads back after a restart)."""
    return {
        "job_id": h.job_id,
        "attempt": h.attempt,
        "pgid": h.pgid,
        "port": h.port,
        "notes": list(h.notes),
        "cgroup": str(h.cgroup) if h.cgroup else None,
        "workers": h.workers,
        "uid": h.uid,
        "ranks": [
            {
                "rank": r.rank,
                "pid": r.pid,
                "start_time": r.start_time,
                "log": str(r.log),
                "devices": list(r.devices),
                "node": r.node,
            }
            for r in h.ranks
        ],
    }


def from_record(data: dict[str, Any], run_dir: Path) -> RunHandle:
    """A handle (marked adopted) from a `run.json` document written by `record`."""
    ranks = tuple(
        RankInfo(
            r["rank"],
            r["pid"],
            r["start_time"],
            Path(r["log"]),
            tuple(r["devices"]),
            str(r.get("node", "")),
        )
        for r in data["ranks"]
    )
    return RunHandle(
        job_id=str(data["job_id"]),
        attempt=int(data["attempt"]),
        pgid=int(data["pgid"]),
        port=int(data["port"]),
        run_dir=run_dir,
        ranks=ranks,
        notes=tuple(data["notes"]),
        cgroup=Path(data["cgroup"]) if data.get("cgroup") else None,
        adopted=True,
        workers=int(data.get("workers", 0)),
        uid=int(data["uid"]) if data.get("uid") is not None else None,
    )
