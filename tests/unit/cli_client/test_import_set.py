"""Client commands start fast (issue 19): each imports only what it needs.

Rule: a command that only speaks HTTP (`submit`, `jobs`, `describe`, `logs`, `cancel`,
`wait`, `queues`, `nodes`, `whoami`, `login`, `token`, `usage`) never imports SQLAlchemy,
FastAPI, uvicorn, httpx, pydantic, numpy, torch, the planner, the simulator, the scheduling
core or the server. Each command is run for real in a fresh interpreter against a port where
no server listens (it fails with one `error:` line, after parsing its options and opening
its client), then the interpreter's `sys.modules` is checked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainyard.exec.procfs import free_port

FORBIDDEN = (
    "sqlalchemy", "fastapi", "uvicorn", "starlette", "httpx", "pydantic", "numpy", "torch",
    "alembic", "yaml_jobspec", "trainyard.planner", "trainyard.sim", "trainyard.core",
    "trainyard.server", "trainyard.jobspec", "trainyard.exec", "matplotlib", "rich",
)  # fmt: skip
# commands that print through rich tables (still no server stack)
RICH_OK = {"queues", "nodes", "whoami", "token", "usage", "login"}

PROBE = r"""
import json, sys
from trainyard.cli import main
try:
    main.main(sys.argv[1:])
except SystemExit as e:
    code = e.code
else:
    code = 0
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def _run(argv: list[str], tmp_path: Path) -> tuple[int, list[str], str]:
    env = {
        **os.environ,
        "TRAINYARD_CONFIG": str(tmp_path / "credentials.json"),
        "TRAINYARD_TOKEN": "ty_probe_token",
    }
    env.pop("TRAINYARD_URL", None)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv],
        capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    last = done.stderr.strip().splitlines()[-1]
    report = json.loads(last)
    return int(report["code"] or 0), report["modules"], done.stderr


CASES = {
    "jobs": ["jobs", "--state", "running", "--since", "2h"],
    "submit": ["submit", "--gpus", "1", "--time", "1h", "--", "python", "train.py"],
    "submit-file": ["submit", "job.yaml", "--gpus", "2"],
    "describe": ["describe", "j-abc"],
    "cancel": ["cancel", "j-abc"],
    "wait": ["wait", "j-abc"],
    "logs": ["logs", "j-abc"],
    "queues": ["queues"],
    "nodes": ["nodes"],
    "whoami": ["whoami"],
    "usage": ["usage"],
    "token": ["token", "list"],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_client_command_imports_no_server_stack(name: str, tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text("name: probe\ncommand: [python, train.py]\n")
    url = f"http://127.0.0.1:{free_port()}"
    code, modules, stderr = _run([*CASES[name], "--url", url], tmp_path)
    assert code == 2, stderr  # the request fails cleanly: nobody listens there
    assert "cannot reach trainyard" in stderr, stderr
    command = CASES[name][0]
    bad = [
        m for m in modules
        for f in FORBIDDEN
        if (m == f or m.startswith(f + ".")) and not (f == "rich" and command in RICH_OK)
    ]  # fmt: skip
    assert not bad, f"`trainyard {' '.join(CASES[name])}` imported {sorted(set(bad))[:20]}"


def test_help_and_version_list_everything(tmp_path: Path) -> None:
    code, _modules, stderr = _run(["--version"], tmp_path)
    assert code == 0, stderr
    done = subprocess.run(
        [sys.executable, "-m", "trainyard.cli.main", "--help"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    for command in ("submit", "jobs", "wait", "simulate", "admin", "up", "plan"):
        assert command in done.stdout
    assert "Exit codes" in done.stdout


def test_shell_completion_completes_commands_and_options(tmp_path: Path) -> None:
    """Completion (`trainyard --install-completion`) sees every command, though a normal
    run registers only one."""

    def complete(words: str, cword: int) -> list[str]:
        env = {**os.environ, "_TRAINYARD_COMPLETE": "complete_bash", "COMP_WORDS": words,
               "COMP_CWORD": str(cword)}  # fmt: skip
        done = subprocess.run(
            [sys.executable, "-m", "trainyard.cli.main"],
            capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path,
        )  # fmt: skip
        return done.stdout.split()

    assert "submit" in complete("trainyard su", 1)
    assert "wait" in complete("trainyard wa", 1)
    assert "--state" in complete("trainyard jobs --st", 2)
    assert "--array" in complete("trainyard submit --arr", 2)
