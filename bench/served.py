"""A real `trainyard up` server in a subprocess with its own home, for the benchmarks that
drive the platform end to end (`elastic.py`, `recovery.py`), and `until`, their wait.

`Server(home, extra)` starts `trainyard up --port P --job-user server --virtual-gpus 4` plus
`extra`, waits for `/healthz`, and talks to the API as the admin (the token the first start
wrote). `stop(jobs)` cancels the jobs still running (their processes outlive the server
otherwise) and stops the server with SIGTERM.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from trainyard.exec.procfs import free_port

FINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}


def until(what: str, check: Any, timeout: float, every: float = 0.25) -> Any:
    """`check()`'s first true value, polled every `every` s; RuntimeError after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")


class Server:
    def __init__(self, home: Path, extra: list[str]) -> None:
        self.home = home
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "TRAINYARD_HOME": str(home), "TRAINYARD_CONFIG": str(home / "c.json")}
        argv = [sys.executable, "-m", "trainyard.cli.main", "up", "--port", str(port)]
        argv += ["--job-user", "server", "--virtual-gpus", "4", *extra]
        self.log = (home / "server.log").open("w")
        self.proc = subprocess.Popen(argv, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        else:
            self.stop([])
            raise RuntimeError(f"server did not start; see {home / 'server.log'}")
        token = (home / "admin-token").read_text().strip()
        self.http = httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=60
        )

    def submit(self, spec: dict[str, Any]) -> str:
        answer = self.http.post("/v1/jobs", json=spec)
        if answer.status_code != 201:
            raise RuntimeError(f"submit refused: {answer.status_code} {answer.text}")
        return str(answer.json()["id"])

    def job(self, job_id: str) -> dict[str, Any]:
        out: dict[str, Any] = self.http.get(f"/v1/jobs/{job_id}").json()
        return out

    def cancel(self, job_id: str) -> None:
        self.http.post(f"/v1/jobs/{job_id}/cancel")

    def logs(self, job_id: str, attempt: int | None = None) -> str:
        """Rank 0's output of `attempt` (0 first), of the latest attempt by default."""
        params = {"rank": 0} if attempt is None else {"rank": 0, "attempt": attempt}
        answer = self.http.get(f"/v1/jobs/{job_id}/logs", params=params)
        return answer.text if answer.status_code == 200 else ""

    def stop(self, jobs: list[str]) -> None:
        with contextlib.suppress(httpx.HTTPError, RuntimeError):
            for job_id in jobs:
                if self.job(job_id)["state"] not in FINAL:
                    self.cancel(job_id)
            for job_id in jobs:
                until(f"{job_id} to end", lambda j=job_id: self.job(j)["state"] in FINAL, 60)
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
