"""The CLI against a whole running server (scheduler loop, local executor, virtual GPUs) on
SQLite and PostgreSQL: jobs run for real, `logs` streams their output, `describe` shows
their events, `cancel` stops them."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from cli_servers import Cli, RunningServer

import trainyard.cli.logs as logs_module


def _spec(path: Path, name: str, code: str, **fields: Any) -> Path:
    """A job spec file running `python -c code` (JSON is YAML)."""
    spec = {"name": name, "command": [sys.executable, "-c", code], "gpus": 0, **fields}
    path.write_text(json.dumps(spec))
    return path


def _submit(cli: Cli, running: RunningServer, spec: Path) -> str:
    result = cli("submit", str(spec), token=running.admin_token)
    assert result.exit_code == 0, result.output
    job_id = result.stdout.strip()
    assert job_id.startswith("j-"), result.stdout
    return job_id


HELLO = "import os; print('hello from rank', os.environ['RANK'], flush=True)"


def test_job_runs_logs_and_describe(
    running_server: RunningServer, cli: Cli, tmp_path: Path
) -> None:
    token = running_server.admin_token
    job = _submit(cli, running_server, _spec(tmp_path / "job.yaml", "hello", HELLO, workers=2))

    followed = cli("logs", job, "--follow", token=token)  # waits for the start, ends at the end
    assert followed.exit_code == 0, followed.output
    assert "[rank 0] hello from rank 0" in followed.stdout
    assert "[rank 1] hello from rank 1" in followed.stdout
    assert running_server.job(job)["state"] == "SUCCEEDED"

    both = cli("logs", job, token=token)
    assert both.exit_code == 0, both.output
    assert sorted(both.stdout.splitlines()) == [
        "[rank 0] hello from rank 0",
        "[rank 1] hello from rank 1",
    ]
    one = cli("logs", job, "--rank", "1", token=token)
    assert one.exit_code == 0, one.output
    assert one.stdout.splitlines() == ["hello from rank 1"]
    first = cli("logs", job, "--attempt", "0", "--rank", "0", token=token)
    assert first.stdout.splitlines() == ["hello from rank 0"]
    last = cli("logs", job, "--tail", "1", token=token)  # each rank's last line
    assert sorted(last.stdout.splitlines()) == sorted(both.stdout.splitlines())
    assert cli("logs", job, "-n", "0", token=token).stdout == ""
    assert cli("logs", job, "--tail", "-1", token=token).exit_code == 2

    described = cli("describe", job, token=token)
    assert described.exit_code == 0, described.output
    out = described.stdout
    assert f"job {job} hello: SUCCEEDED" in out
    assert "exit:" in out and "code 0" in out
    moves = ["(new) -> PENDING", "PENDING -> STARTING", "STARTING -> RUNNING"]
    moves.append("RUNNING -> SUCCEEDED")
    positions = [out.index(move) for move in moves]
    assert positions == sorted(positions), out
    assert "events (4):" in out

    detail = json.loads(cli("describe", job, "--json", token=token).stdout)
    assert [e["to_state"] for e in detail["events"]] == [
        "PENDING",
        "STARTING",
        "RUNNING",
        "SUCCEEDED",
    ]

    listed = cli("jobs", "--state", "succeeded", token=token)
    assert listed.exit_code == 0, listed.output
    assert job in listed.stdout and "hello" in listed.stdout and "admin" in listed.stdout
    assert "no jobs in state RUNNING" in cli("jobs", "--state", "RUNNING", token=token).stdout

    nodes = cli("nodes", token=token)
    assert nodes.exit_code == 0, nodes.output
    assert "2 x virtual" in nodes.stdout and "(VIRTUAL: declared, not real)" in nodes.stdout
    queues = cli("queues", token=token)
    assert queues.exit_code == 0 and "default" in queues.stdout and "(shared)" in queues.stdout


RELEASE = (
    "import os, pathlib, time\n"
    "print('holder running', flush=True)\n"
    "while not pathlib.Path(os.environ['RELEASE_FILE']).exists(): time.sleep(0.05)\n"
)
FAILS = (
    "import os, sys; print('boom in attempt', os.environ['TRAINYARD_ATTEMPT'], flush=True); "
    "sys.exit(3)"
)


def test_follow_waits_then_streams_every_attempt(
    running_server: RunningServer, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`logs -f` on a job waiting for GPUs says why it waits, then follows each attempt of a
    job restarted after failures, and ends when the job has failed for good."""
    token = running_server.admin_token
    release = tmp_path / "release"
    holder = _submit(
        cli,
        running_server,
        _spec(
            tmp_path / "hold.yaml", "holder", RELEASE, gpus=2, env={"RELEASE_FILE": str(release)}
        ),
    )
    running_server.wait(holder, {"RUNNING"})
    failing = _submit(
        cli,
        running_server,
        _spec(tmp_path / "fail.yaml", "failing", FAILS, gpus=2, max_restarts=1),
    )
    waiting = running_server.wait(failing, {"PENDING"})
    assert waiting["attempt"] == 0

    def sleep(seconds: float) -> None:  # the CLI polls: let the holder end once it waits
        release.touch()
        time.sleep(seconds)

    monkeypatch.setattr(logs_module, "time", SimpleNamespace(sleep=sleep))
    followed = cli("logs", failing, "-f", token=token)
    assert followed.exit_code == 0, followed.output
    assert f"waiting for job {failing} to start (pending: " in followed.stderr
    assert followed.stdout.splitlines() == ["boom in attempt 0", "boom in attempt 1"]
    assert f"--- job {failing}: attempt 1 ---" in followed.stderr

    detail = running_server.wait(failing, {"FAILED"})
    assert detail["exit_code"] == 3 and detail["restart_count"] == 1
    described = cli("describe", failing, token=token)
    assert described.exit_code == 0, described.output
    out = described.stdout
    assert "FAILED" in out and "code 3" in out
    assert "exit_code=3 rank=0" in out
    assert "restart after failure" in out
    assert "(VIRTUAL: declared, not real)" in out  # its two devices are declared ones
    assert "restarts 1 of at most 1" in out
    assert running_server.job(holder)["state"] == "SUCCEEDED"

    again = cli("logs", failing, "--attempt", "0", token=token)
    assert again.stdout.splitlines() == ["boom in attempt 0"]
    followed_tail = cli("logs", failing, "-f", "--tail", "1", token=token)
    assert followed_tail.stdout.splitlines() == ["boom in attempt 1"]  # the latest attempt's
    missing = cli("logs", failing, "--attempt", "5", token=token)
    assert missing.exit_code == 2
    assert "error: attempt: " in missing.stderr and "has not run" in missing.stderr
    bad_rank = cli("logs", failing, "--rank", "3", token=token)
    assert bad_rank.exit_code == 2 and "error: rank: " in bad_rank.stderr


SLEEPS = "import time; print('started', flush=True); time.sleep(600)"


def test_cancel_a_running_job(running_server: RunningServer, cli: Cli, tmp_path: Path) -> None:
    token = running_server.admin_token
    job = _submit(cli, running_server, _spec(tmp_path / "sleep.yaml", "sleeper", SLEEPS))
    running_server.wait(job, {"RUNNING"})
    running = cli("describe", job, token=token)
    assert "RUNNING" in running.stdout and "no GPU (CPU only)" in running.stdout

    cancelled = cli("cancel", job, token=token)
    assert cancelled.exit_code == 0, cancelled.output
    assert cancelled.stdout.strip() == f"job {job}: CANCELLED"
    followed = cli("logs", job, "-f", token=token)  # the job has ended: prints and returns
    assert followed.exit_code == 0, followed.output
    assert followed.stdout.splitlines() == ["started"]
    twice = cli("cancel", job, token=token)
    assert twice.exit_code == 2
    assert twice.stderr.strip() == (f"error: state: job {job} is CANCELLED and cannot be cancelled")
    assert "RUNNING -> CANCELLED" in cli("describe", job, token=token).stdout


def test_logs_of_a_job_that_never_started(
    running_server: RunningServer, cli: Cli, tmp_path: Path
) -> None:
    token = running_server.admin_token
    big = _spec(tmp_path / "big.yaml", "too-big", HELLO, gpus=4, wait_for_capacity=True)
    job = _submit(cli, running_server, big)
    detail = running_server.wait(job, {"PENDING"})
    assert detail["attempt"] == 0
    described = cli("describe", job, token=token)
    assert "pending:" in described.stdout
    early = cli("logs", job, token=token)
    assert early.exit_code == 0, early.output
    assert early.stdout == ""
    assert f"job {job} has not started yet (PENDING)" in early.stderr
    assert cli("cancel", job, token=token).exit_code == 0
    ended = cli("logs", job, "-f", token=token)
    assert ended.exit_code == 0
    assert f"job {job} ended CANCELLED before it started: no logs" in ended.stderr


def test_a_job_runs_where_it_was_submitted(
    running_server: RunningServer,
    cli: Cli,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As with sbatch: a relative script path resolves in the directory `submit` ran in (the
    # server is on this machine); --workdir picks another; a spec's working_dir wins.
    project = tmp_path / "project"
    other = tmp_path / "other"
    for folder, word in ((project, "project"), (other, "other")):
        folder.mkdir()
        (folder / "hello.py").write_text(f"print('hello from {word}')\n")
    spec = project / "job.yaml"
    spec.write_text(f"name: here\ncommand: [{sys.executable}, hello.py]\n")
    monkeypatch.chdir(project)
    token = running_server.admin_token
    here = _submit(cli, running_server, spec)
    assert running_server.wait(here, {"SUCCEEDED", "FAILED"})["state"] == "SUCCEEDED"
    assert cli("logs", here, token=token).stdout.splitlines() == ["hello from project"]
    assert running_server.job(here)["spec"]["working_dir"] == str(project)

    result = cli("submit", str(spec), "--workdir", str(other), token=token)
    assert result.exit_code == 0, result.output
    there = result.stdout.strip()
    assert running_server.wait(there, {"SUCCEEDED", "FAILED"})["state"] == "SUCCEEDED"
    assert cli("logs", there, token=token).stdout.splitlines() == ["hello from other"]

    pinned = project / "pinned.yaml"
    pinned.write_text(
        f"name: pinned\nworking_dir: {other}\ncommand: [{sys.executable}, hello.py]\n"
    )
    kept = _submit(cli, running_server, pinned)
    assert running_server.wait(kept, {"SUCCEEDED", "FAILED"})["state"] == "SUCCEEDED"
    assert cli("logs", kept, token=token).stdout.splitlines() == ["hello from other"]
