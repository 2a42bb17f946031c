"""A real `trainyard up` server as a separate OS process, for end-to-end fault tests.

`Cluster` owns one home directory and one database. `Cluster.start()` runs
`python -m trainyard.cli.main up` (the `trainyard` the test process imports, with its
PYTHONPATH) with output to a file, waits for `GET /healthz`, and returns a `LiveServer` with
an authenticated API client; `LiveServer.kill9()` is a real SIGKILL. Job processes are found
through the run records the local executor writes under `<home>/runs/jobs/` and through
`/proc` (every rank's wrapper and command carry `TRAINYARD_JOB_ID` and a
`TRAINYARD_CHECKPOINT_DIR` under the home in their environment). `Cluster.close()` kills every
server and every job process it can find and prints the servers' output (shown by pytest only
when a test fails).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

import trainyard
from trainyard.exec import procfs
from trainyard.exec.procfs import free_port

Job = dict[str, Any]


def wait_until(
    what: str, check: Callable[[], Any], timeout: float, explain: Callable[[], str]
) -> Any:
    """Poll `check` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{explain()}")
        time.sleep(0.2)


class LiveServer:
    """One `trainyard up` process and an API client logged in as the admin."""

    def __init__(self, proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
        self.proc = proc
        self.url = url
        self.log = log
        self.client: httpx.Client | None = None

    def api(self) -> httpx.Client:
        assert self.client is not None, "the server is not ready"
        return self.client

    def submit(self, spec: dict[str, Any]) -> str:
        answer = self.api().post(
            "/v1/jobs", content=json.dumps(spec), headers={"Content-Type": "application/json"}
        )
        assert answer.status_code == 201, answer.text
        return str(answer.json()["id"])

    def job(self, job_id: str) -> Job:
        answer = self.api().get(f"/v1/jobs/{job_id}")
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    def job_ids(self) -> list[str]:
        answer = self.api().get("/v1/jobs")
        assert answer.status_code == 200, answer.text
        return sorted(j["id"] for j in answer.json()["jobs"])

    def logs(self, job_id: str, rank: int = 0, attempt: int | None = None) -> str:
        params: dict[str, int] = {"rank": rank}
        if attempt is not None:
            params["attempt"] = attempt
        answer = self.api().get(f"/v1/jobs/{job_id}/logs", params=params)
        assert answer.status_code == 200, answer.text
        return answer.text

    def kill9(self) -> None:
        """SIGKILL the server process (not its jobs: they run in their own process groups)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        if self.client is not None:
            self.client.close()
            self.client = None


class Cluster:
    """Servers started one after another on the same home and database."""

    def __init__(
        self,
        tmp_path: Path,
        db_url: str,
        virtual_gpus: int = 4,
        *,
        home: Path | None = None,
        args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        """`args`: more `trainyard up` options; `env`: more server variables. The database
        URL goes in `TRAINYARD_DB` (never on the command line, which every user can read)."""
        self.tmp_path = tmp_path
        self.home = (home or tmp_path / "home").resolve()
        self.db_url = db_url
        self.virtual_gpus = virtual_gpus
        self.args = args
        self.env = dict(env or {})
        self.servers: list[LiveServer] = []

    # ---- servers -------------------------------------------------------------------------

    def start(self, timeout: float = 90.0) -> LiveServer:
        port = free_port()
        log = self.tmp_path / f"server-{len(self.servers)}.log"
        env = dict(os.environ)
        env["TRAINYARD_CONFIG"] = str(self.tmp_path / "credentials.json")
        env["TRAINYARD_HOME"] = str(self.home)
        env["TRAINYARD_DB"] = self.db_url
        env.update(self.env)
        # the trainyard this test process imports (installed, or src/ via PYTHONPATH)
        package_root = str(Path(trainyard.__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(
            [package_root, *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
        )
        argv = [sys.executable, "-m", "trainyard.cli.main", "up", "--home", str(self.home)]
        argv += ["--port", str(port), *self.args]
        argv += ["--virtual-gpus", str(self.virtual_gpus), "--interval", "0.2"]
        with log.open("wb") as out:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.tmp_path,
                start_new_session=True,
            )
        server = LiveServer(proc, f"http://127.0.0.1:{port}", log)
        self.servers.append(server)

        def healthy() -> bool:
            assert proc.poll() is None, f"the server exited with {proc.returncode}\n{self.output()}"
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(f"{server.url}/healthz", timeout=2).status_code == 200
            return False

        wait_until("the server to answer /healthz", healthy, timeout, self.output)
        token = (self.home / "admin-token").read_text().strip()
        server.client = httpx.Client(
            base_url=server.url, timeout=30, headers={"Authorization": f"Bearer {token}"}
        )
        return server

    def output(self) -> str:
        parts = []
        for i, server in enumerate(self.servers):
            text = server.log.read_text(errors="replace") if server.log.exists() else ""
            parts.append(f"--- server {i} (rc={server.proc.poll()}) output:\n{text[-6000:]}")
        return "\n".join(parts)

    # ---- job processes -------------------------------------------------------------------

    def run_dir(self, job_id: str, attempt: int) -> Path:
        return self.home / "runs" / "jobs" / job_id / f"attempt-{attempt}"

    def attempts(self, job_id: str) -> list[int]:
        job_dir = self.home / "runs" / "jobs" / job_id
        return sorted(int(p.name.split("-")[1]) for p in job_dir.glob("attempt-*"))

    def run_record(self, job_id: str, attempt: int) -> dict[str, Any]:
        data = procfs.read_json(self.run_dir(job_id, attempt) / "run.json")
        assert isinstance(data, dict), f"no run record for {job_id} attempt {attempt}"
        return data

    def command_pid(self, job_id: str, attempt: int, rank: int) -> int | None:
        """The pid of the rank's own command (the training process the wrapper started)."""
        rec = procfs.read_json(self.run_dir(job_id, attempt) / f"rank-{rank}.pid.json")
        return int(rec["pid"]) if isinstance(rec, dict) else None

    def recorded_pids(self, job_id: str, attempt: int) -> set[int]:
        """The pids the run records name: each rank's wrapper (run.json) and command."""
        ranks = [int(r["rank"]) for r in self.run_record(job_id, attempt)["ranks"]]
        wrappers = {int(r["pid"]) for r in self.run_record(job_id, attempt)["ranks"]}
        commands = {self.command_pid(job_id, attempt, rank) for rank in ranks}
        return wrappers | {pid for pid in commands if pid is not None}

    def exit_record(self, job_id: str, attempt: int, rank: int) -> dict[str, Any]:
        """What the rank's wrapper recorded when its command ended."""
        rec = procfs.read_json(self.run_dir(job_id, attempt) / f"rank-{rank}.exit.json")
        assert isinstance(rec, dict), f"no exit record for {job_id} attempt {attempt} rank {rank}"
        return rec

    def processes(self, job_id: str | None = None) -> dict[int, str]:
        """pid -> command line of the live (not zombie) processes of this home's jobs (of
        `job_id` only, when given), found in /proc: the commands and their children by their
        environment, the rank wrappers (whose environment holds nothing of the job's) by
        their command line, which names the job's directory."""
        home_mark = f"TRAINYARD_CHECKPOINT_DIR={self.home}/runs/jobs/".encode()
        job_mark = f"TRAINYARD_JOB_ID={job_id}".encode() if job_id else None
        wrapper_mark = f"--exit-file {self.home}/runs/jobs/{job_id + '/' if job_id else ''}"
        found: dict[int, str] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            try:
                variables = (entry / "environ").read_bytes().split(b"\0")
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            wrapper = "rankwrap.py" in cmdline and wrapper_mark in cmdline
            if not wrapper and not any(v.startswith(home_mark) for v in variables):
                continue
            if not wrapper and job_mark is not None and job_mark not in variables:
                continue
            if procfs.alive(pid, None):
                found[pid] = cmdline.strip()
        return found

    def no_processes(self, job_id: str) -> bool:
        return not self.processes(job_id)

    def kill_jobs(self) -> None:
        """SIGKILL every process of this home's jobs: their process groups (from the run
        records, while a recorded member lives) and any process found in /proc."""
        for run in (self.home / "runs" / "jobs").glob("*/attempt-*/run.json"):
            data = procfs.read_json(run)
            if not isinstance(data, dict):
                continue
            members = [(r["pid"], r["start_time"]) for r in data.get("ranks", [])]
            if any(procfs.alive(pid, started) for pid, started in members) and data["pgid"] > 0:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(int(data["pgid"]), signal.SIGKILL)
        for pid in self.processes():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def close(self) -> None:
        for server in self.servers:
            with contextlib.suppress(Exception):
                server.kill9()
        with contextlib.suppress(Exception):
            self.kill_jobs()
        print(self.output())
