"""`trainyard submit` flags and `trainyard jobs` filters against the real REST API (no
scheduler: jobs stay PENDING), on SQLite and PostgreSQL.

Rules checked:
- each sbatch-style flag lands in the stored spec (`describe --json` -> `spec`) under its
  field (`--mem` in GB, `--time` as `time_limit_s` and `expected_duration_s`,
  `--min/max-gpus` as `elastic`);
- flags override a spec file's values, also one given under `resources:`, and `--env`
  merges with the file's `env`;
- spec-less `-- COMMAND...` makes the command the job, named after its script;
- a bad flag value is one `error: --flag: ...` line on stderr and exit code 2;
- `jobs --format/--no-header` picks columns, `--state/--queue/--user/--since` filter on the
  server, and a cut page says more exist on stderr (`--all` reads every page).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cli_servers import ApiServer, Cli
from sqlalchemy import Engine
from typer.testing import Result

from trainyard.server.db.session import make_session_factory

SPEC = (
    "name: from-file\nqueue: research\ncommand: [python, train.py]\n"
    "resources:\n  gpus: 2\n  cpus: 8\nenv:\n  A: from-file\n  B: kept\npriority: 1\n"
)


def _error(result: Result) -> str:
    """The one error line of a failed command (and no traceback)."""
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.output
    return lines[0]


def _submit(cli: Cli, token: str, *args: str, command: tuple[str, ...] = ()) -> str:
    """Submit with `args` (and `-- command`, the login given before `--`); the job's id."""
    argv = ["submit", *args, "--url", cli.url, "--token", token]
    if command:
        argv += ["--", *command]
    result = cli(*argv)
    assert result.exit_code == 0, result.output
    job_id = result.stdout.strip()
    assert job_id.startswith("j-"), result.output
    return job_id


def _spec(cli: Cli, token: str, job_id: str) -> dict[str, Any]:
    described = cli("describe", job_id, "--json", token=token)
    assert described.exit_code == 0, described.output
    spec: dict[str, Any] = json.loads(described.stdout)["spec"]
    return spec


def test_each_flag_lands_in_the_stored_spec(api_server: ApiServer, cli: Cli) -> None:
    ada = api_server.tokens["ada"]
    job = _submit(
        cli, ada,
        "--queue", "research", "--name", "flags", "--gpus", "2", "--gpu-type", "H100",
        "--nodes", "1", "--workers", "2", "--cpus", "4.5", "--mem", "512M", "--env", "K=V",
        "--env", "EMPTY=", "--priority", "3", "--max-restarts", "5", "--time", "90m",
        command=("python", "x.py"),
    )  # fmt: skip
    spec = _spec(cli, ada, job)
    assert spec["queue"] == "research" and spec["name"] == "flags"
    assert (spec["gpus"], spec["gpu_type"], spec["nodes"], spec["workers"]) == (2, "H100", 1, 2)
    assert spec["cpus"] == 4.5
    assert spec["memory_gb"] == pytest.approx(0.5)
    assert spec["env"] == {"K": "V", "EMPTY": ""}
    assert (spec["priority"], spec["max_restarts"]) == (3, 5)
    assert spec["expected_duration_s"] == spec["time_limit_s"] == 5400  # sbatch -t: both
    assert spec["command"] == ["python", "x.py"]

    other = _submit(
        cli, ada, "--queue", "research", "--mem", "16G", "--time", "1-02:00:00",
        "--min-gpus", "1", "--max-gpus", "4", command=("python", "x.py"),
    )  # fmt: skip
    spec = _spec(cli, ada, other)
    assert spec["memory_gb"] == pytest.approx(16.0)
    assert spec["expected_duration_s"] == 86400 + 2 * 3600
    assert spec["elastic"]["min_gpus"] == 1 and spec["elastic"]["max_gpus"] == 4


def test_array_and_after_flags(api_server: ApiServer, cli: Cli) -> None:
    ada = api_server.tokens["ada"]
    first = _submit(cli, ada, "--queue", "research", command=("true",))
    argv = ["submit", "--queue", "research", "--array", "0-6:2%2", "--after", f"{first}:any",
            "--json", "--url", cli.url, "--token", ada, "--", "true"]  # fmt: skip
    result = cli(*argv)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["id"].startswith("a-") and len(out["array_ids"]) == 4  # 0, 2, 4, 6
    spec = _spec(cli, ada, out["array_ids"][0])
    assert spec["array"] == "0-6:2%2"
    assert spec["after"] == [{"job": first, "condition": "any"}]
    listed = cli("jobs", "--array", out["id"], "--format", "id,index", "--no-header", token=ada)
    assert [line.split() for line in listed.stdout.splitlines()] == [
        [job, str(index)] for job, index in zip(out["array_ids"], (0, 2, 4, 6), strict=True)
    ]


def test_flags_override_the_spec_file(api_server: ApiServer, cli: Cli, tmp_path: Path) -> None:
    ada = api_server.tokens["ada"]
    path = tmp_path / "job.yaml"
    path.write_text(SPEC)
    plain = _spec(cli, ada, _submit(cli, ada, str(path)))
    assert (plain["name"], plain["gpus"], plain["cpus"], plain["priority"]) == (
        "from-file", 2, 8, 1,
    )  # fmt: skip
    job = _submit(
        cli, ada, str(path), "--gpus", "3", "--cpus", "2", "--priority", "4", "--name",
        "flagged", "--env", "A=from-flag", "--env", "C=new",
    )  # fmt: skip
    spec = _spec(cli, ada, job)
    assert (spec["name"], spec["gpus"], spec["cpus"], spec["priority"]) == ("flagged", 3, 2, 4)
    assert spec["env"] == {"A": "from-flag", "B": "kept", "C": "new"}
    assert spec["command"] == ["python", "train.py"]  # the file's, no command given
    with_command = _spec(cli, ada, _submit(cli, ada, str(path), command=("sh", "run.sh")))
    assert with_command["command"] == ["sh", "run.sh"] and with_command["name"] == "from-file"


def test_specless_command_and_its_name(api_server: ApiServer, cli: Cli) -> None:
    ada = api_server.tokens["ada"]
    job = _submit(cli, ada, "--queue", "research", command=("python", "train.py", "--lr", "3e-4"))
    spec = _spec(cli, ada, job)
    assert spec["command"] == ["python", "train.py", "--lr", "3e-4"]
    assert spec["name"] == "train"
    named = _spec(cli, ada, _submit(cli, ada, "--queue", "research", command=("sleep", "1")))
    assert named["name"] == "sleep"
    nothing = cli("submit", token=ada)
    assert "give a job spec file" in _error(nothing)


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--mem", "lots"),
        ("--mem", "0"),
        ("--time", "soon"),
        ("--time", "0m"),
        ("--time", "9" * 200 + "d"),  # past ten years (estimated starts overflowed clocks)
        ("--env", "NOVALUE"),
        ("--env", "=x"),
        ("--after", "j-1:maybe"),
        ("--array", "0-3%x"),
        ("--array", "a-b"),
    ],
)
def test_bad_flag_values_are_one_error_line(
    api_server: ApiServer, cli: Cli, flag: str, value: str
) -> None:
    ada = api_server.tokens["ada"]
    argv = ["submit", flag, value, "--url", cli.url, "--token", ada, "--", "true"]
    assert _error(cli(*argv)).startswith(f"error: {flag}: ")


def test_jobs_shows_why_pending_jobs_wait(api_server: ApiServer, cli: Cli, engine: Engine) -> None:
    # outside review 14, F14: finding why 50 jobs wait took 50 `describe` calls (squeue %r)
    from sqlalchemy import update

    from trainyard.server.db.jobs import Job

    ada = api_server.tokens["ada"]
    waiting = _submit(cli, ada, "--queue", "research", command=("true",))
    done = _submit(cli, ada, "--queue", "research", command=("true",))
    assert cli("cancel", done, token=ada).exit_code == 0
    with make_session_factory(engine)() as session:
        session.execute(update(Job).values(pending_reason="capacity: waiting for 1 GPU; 0 free"))
        session.commit()
    table = cli("jobs", "--format", "id,reason", "--no-header", token=ada)
    assert table.exit_code == 0, table.output
    rows = dict(line.split(None, 1) for line in table.stdout.splitlines())
    assert rows == {waiting: "capacity: waiting for 1 GPU; 0 free", done: "-"}  # ended: none


def test_jobs_format_and_filters(api_server: ApiServer, cli: Cli) -> None:
    ada, root, vic = (api_server.tokens[u] for u in ("ada", "root", "vic"))
    first = _submit(cli, ada, "--queue", "research", command=("true",))
    second = _submit(cli, root, "--queue", "research", command=("true",))
    third = _submit(cli, ada, "--queue", "research", command=("true",))
    cancelled = cli("cancel", third, token=ada)
    assert cancelled.exit_code == 0, cancelled.output

    table = cli("jobs", "--format", "id,state", "--no-header", token=ada)
    assert table.exit_code == 0, table.output
    rows = [line.split() for line in table.stdout.splitlines()]
    assert rows == [[third, "CANCELLED"], [second, "PENDING"], [first, "PENDING"]]
    header = cli("jobs", "--format", "id,state", token=ada).stdout.splitlines()[0].split()
    assert header == ["ID", "STATE"]
    assert "--format: 'nosuch' is not a column" in _error(cli("jobs", "--format", "nosuch",
                                                              token=ada))  # fmt: skip
    assert "--state" in _error(cli("jobs", "--state", "sleepy", token=ada))

    def ids(*args: str, token: str = ada) -> list[str]:
        result = cli("jobs", *args, "--json", token=token)
        assert result.exit_code == 0, result.output
        return [j["id"] for j in json.loads(result.stdout)["jobs"]]

    assert ids("--state", "pending,running") == [second, first]
    assert ids("--state", "PENDING", "--state", "CANCELLED") == [third, second, first]
    assert ids("-s", "PD,CA") == [third, second, first]  # squeue's codes (outside review 12)
    assert ids("--queue", "research", token=vic) == [third, second, first]
    assert ids("--queue", "root") == []  # the shared root queue: no job of acme's in it
    assert "no jobs in queue root" in cli("jobs", "--queue", "root", token=ada).stdout
    # a user or queue the tenant has none of is a mistake, as squeue says (outside review 12);
    # another tenant's read as one that does not exist
    assert "there is no queue 'sales'" in _error(cli("jobs", "-q", "sales", token=ada))
    assert "user: 'nobody' is not a user of this tenant" in _error(
        cli("jobs", "--user", "nobody", token=ada)
    )
    assert "queue: there is no queue 'nosuch'" in _error(cli("jobs", "-q", "nosuch", token=ada))
    assert "is not a user of this tenant" in _error(cli("jobs", "-u", "gus", token=ada))
    assert ids("--user", "root") == [second]
    assert ids("--user", "ada", "--state", "pending") == [first]
    assert ids("--since", "1h") == [third, second, first]
    future = (datetime.now() + timedelta(days=1)).replace(microsecond=0).isoformat()
    assert ids("--since", future) == []
    assert ids("--since", "99999999d") == [third, second, first]  # before 1970: every job
    assert "--since" in _error(cli("jobs", "--since", "yesterday", token=ada))
    other = cli("jobs", "--json", token=api_server.tokens["gus"])
    assert json.loads(other.stdout)["jobs"] == []  # another tenant sees none of them

    cut = cli("jobs", "--limit", "2", "--format", "id", "--no-header", token=ada)
    assert cut.exit_code == 0, cut.output
    assert cut.stdout.split() == [third, second]
    assert "2 shown; more jobs exist: --offset 2" in cut.stderr
    every = cli("jobs", "--limit", "2", "--all", "--format", "id", "--no-header", token=ada)
    assert every.exit_code == 0, every.output
    assert every.stdout.split() == [third, second, first]
    assert "more jobs exist" not in every.stderr
    assert ids("--limit", "2", "--all") == [third, second, first]
