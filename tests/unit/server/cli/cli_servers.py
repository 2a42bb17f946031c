"""Fixtures of the CLI tests (conftest.py makes them visible): real servers on SQLite and
PostgreSQL (the `engine`/`db_url` fixtures of tests/unit/server/conftest.py), served by
uvicorn on a free port in a background thread:

- `api_server`: the REST API alone (`create_app`) over a database seeded like the API tests
  (tenants acme and globex; users ada (member), vic (viewer), root (admin), gus (globex)).
- `running_server`: a whole `trainyard.server.serve.Server` (scheduler loop, local executor, two
  virtual GPUs), which runs submitted jobs for real; its bootstrapped admin token included.

`cli` runs `trainyard` commands with typer's CliRunner, the login file in the test's tmp dir.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from api_fixtures import seed
from sqlalchemy import Engine
from typer.testing import CliRunner, Result

from trainyard.cli.main import app
from trainyard.exec.procfs import free_port
from trainyard.server.api.app import create_app
from trainyard.server.config import ServerConfig
from trainyard.server.db import make_session_factory
from trainyard.server.lifecycle import RetryPolicy
from trainyard.server.serve import Server

TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}


@contextlib.contextmanager
def serving(asgi_app: Any, port: int | None = None) -> Iterator[str]:
    """Serve `asgi_app` with uvicorn on `port` (a free one) in a thread; yields its URL."""
    port = port or free_port()
    config = uvicorn.Config(
        asgi_app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"uvicorn did not start on port {port}")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@dataclass
class Cli:
    """Runs `trainyard ...` in-process; the login lives in `config`."""

    config: Path
    url: str = ""
    runner: CliRunner = field(default_factory=CliRunner)

    def __call__(self, *args: str, input: str | None = None, token: str | None = None) -> Result:
        argv = list(args)
        if token is not None:
            argv += ["--url", self.url, "--token", token]
        return self.runner.invoke(app, argv, input=input, catch_exceptions=False)


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    config = tmp_path / "config" / "credentials.json"
    monkeypatch.setenv("TRAINYARD_CONFIG", str(config))
    monkeypatch.setenv("COLUMNS", "200")
    for name in ("TRAINYARD_URL", "TRAINYARD_API_URL", "TRAINYARD_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    return Cli(config=config)


@dataclass
class ApiServer:
    url: str
    tokens: dict[str, str]  # user name -> token


@pytest.fixture
def api_server(engine: Engine, cli: Cli) -> Iterator[ApiServer]:
    with make_session_factory(engine)() as session:
        tokens = seed(session)
    with serving(create_app(engine)) as url:
        cli.url = url
        yield ApiServer(url=url, tokens=tokens)


@dataclass
class RunningServer:
    url: str
    admin_token: str
    server: Server

    def job(self, job_id: str) -> dict[str, Any]:
        answer = httpx.get(
            f"{self.url}/v1/jobs/{job_id}",
            headers={"Authorization": f"Bearer {self.admin_token}"},
            timeout=30,
        )
        answer.raise_for_status()
        detail: dict[str, Any] = answer.json()
        return detail

    def wait(self, job_id: str, states: set[str], timeout_s: float = 120) -> dict[str, Any]:
        """The job once it is in one of `states` (generous timeout: no timing is tested)."""
        deadline = time.monotonic() + timeout_s
        while True:
            detail = self.job(job_id)
            if detail["state"] in states:
                return detail
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} still {detail['state']}, not in {states}")
            time.sleep(0.1)


@pytest.fixture
def running_server(db_url: str, tmp_path: Path, cli: Cli) -> Iterator[RunningServer]:
    config = ServerConfig(
        home=tmp_path / "home",
        db_url=db_url,
        port=free_port(),
        virtual_gpus=2,
        interval_s=0.2,
        grace_s=5.0,
    )
    server = Server(config)
    started = server.prepare()
    assert started.admin_token is not None
    assert server.platform is not None
    server.platform.retry = RetryPolicy(base_s=0.2, cap_s=1.0)  # quick restarts in tests
    try:
        server.start_loop()
        with serving(server.app(), config.port) as url:
            assert url == config.url
            cli.url = url
            running = RunningServer(url=url, admin_token=started.admin_token, server=server)
            yield running
            _stop_jobs(running)
    finally:
        server.close()
        for handle in server.platform.executor.handles():  # nothing outlives the test
            server.platform.executor.stop(handle, grace_s=2.0)


def _stop_jobs(running: RunningServer) -> None:
    """Cancel what a test left running, so no process outlives it."""
    headers = {"Authorization": f"Bearer {running.admin_token}"}
    jobs = httpx.get(f"{running.url}/v1/jobs", headers=headers, timeout=30).json()["jobs"]
    for job in jobs:
        if job["state"] not in TERMINAL:
            httpx.post(f"{running.url}/v1/jobs/{job['id']}/cancel", headers=headers, timeout=30)
            running.wait(job["id"], TERMINAL)
