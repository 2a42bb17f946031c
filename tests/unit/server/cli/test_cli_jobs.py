"""`trainyard submit/jobs/describe/cancel/queues/nodes/logs` against the real REST API (no
scheduler: jobs stay PENDING), on SQLite and PostgreSQL, and every error path: one
`error: ...` line on stderr, exit code 2, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from cli_servers import ApiServer, Cli
from typer.testing import Result

import trainyard.cli.logs as logs_module

SPEC = "name: mnist-ddp\nqueue: research\ncommand: [python, train.py]\nworkers: 2\ngpus: 2\n"


def _write(tmp_path: Path, text: str, name: str = "job.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _error(result: Result) -> str:
    """The one error line of a failed command (and no traceback)."""
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.output
    return lines[0]


def test_submit_list_describe_cancel(api_server: ApiServer, cli: Cli, tmp_path: Path) -> None:
    ada = api_server.tokens["ada"]
    spec = _write(tmp_path, SPEC)
    submitted = cli("submit", str(spec), token=ada)
    assert submitted.exit_code == 0, submitted.output
    job = submitted.stdout.strip()
    assert job.startswith("j-") and f"as job {job} (PENDING)" in submitted.stderr

    as_json = cli("submit", str(spec), "--json", token=ada)
    second = json.loads(as_json.stdout)
    assert second["state"] == "PENDING" and second["id"] != job

    listed = cli("jobs", token=ada)
    assert listed.exit_code == 0, listed.output
    for column in ("ID", "NAME", "QUEUE", "STATE", "GPUS", "USER", "AGE"):
        assert column in listed.stdout
    assert job in listed.stdout and "mnist-ddp" in listed.stdout and "research" in listed.stdout
    page = json.loads(cli("jobs", "--json", "--limit", "1", token=ada).stdout)
    assert [r["id"] for r in page["jobs"]] == [second["id"]]  # newest first
    assert page["more"] is True
    cut = cli("jobs", "--limit", "1", token=ada)
    assert "1 shown; more jobs exist: --offset 1" in cut.stderr
    rest = json.loads(cli("jobs", "--json", "--limit", "1", "--offset", "1", token=ada).stdout)
    assert [r["id"] for r in rest["jobs"]] == [job] and rest["more"] is False
    assert "more jobs exist" not in cli("jobs", "--limit", "2", token=ada).stderr

    described = cli("describe", job, token=ada)
    assert described.exit_code == 0, described.output
    out = described.stdout
    assert f"job {job} mnist-ddp: PENDING" in out
    assert "queue:" in out and "research" in out and "ada (tenant acme)" in out
    assert "pending:" in out and "placement: -" in out
    assert "(new) -> PENDING" in out and "submitted by ada" in out
    detail = json.loads(cli("describe", job, "--json", token=ada).stdout)
    assert detail["id"] == job and detail["spec"]["workers"] == 2

    cancelled = cli("cancel", job, token=ada)
    assert cancelled.exit_code == 0, cancelled.output
    assert cancelled.stdout.strip() == f"job {job}: CANCELLED"
    assert "PENDING -> CANCELLED" in cli("describe", job, token=ada).stdout
    assert _error(cli("cancel", job, token=ada)) == (
        f"error: state: job {job} is CANCELLED and cannot be cancelled"
    )
    only = cli("jobs", "--state", "cancelled", "--json", token=ada)
    assert [r["id"] for r in json.loads(only.stdout)["jobs"]] == [job]
    assert _error(cli("jobs", "--state", "sleeping", token=ada)).startswith("error: --state: ")


def test_cancel_tries_every_job_and_says_which_failed(
    api_server: ApiServer, cli: Cli, tmp_path: Path
) -> None:
    """Found by an outside review: `cancel A B C` stopped at the first job that could not be
    cancelled, and the later ones went on running without a word. Every id is now tried,
    each failure named on stderr, and the exit status is 2 when any failed."""
    ada = api_server.tokens["ada"]
    spec = _write(tmp_path, SPEC)
    first, ended, last = (cli("submit", str(spec), token=ada).stdout.strip() for _ in range(3))
    assert cli("cancel", ended, token=ada).exit_code == 0
    both = cli("cancel", first, ended, "j-00000000000000000000", last, token=ada)
    assert both.exit_code == 2, both.output
    assert both.stdout.splitlines() == [f"job {first}: CANCELLED", f"job {last}: CANCELLED"]
    errors = both.stderr.splitlines()
    assert len(errors) == 2 and all(line.startswith("error: ") for line in errors)
    assert ended in errors[0] and "CANCELLED" in errors[0]
    assert "j-00000000000000000000" in errors[1]
    as_json = json.loads(cli("cancel", first, last, "--json", token=ada).stdout)
    assert [a["id"] for a in as_json] == [first, last] and all("error" in a for a in as_json)
    malformed = cli("cancel", first, "not an id", token=ada)  # checked before any cancel
    assert malformed.exit_code == 2 and "is not a job id" in malformed.stderr


def test_submit_overrides_queue_and_name(api_server: ApiServer, cli: Cli, tmp_path: Path) -> None:
    ada = api_server.tokens["ada"]
    spec = _write(tmp_path, SPEC.replace("queue: research", "queue: nowhere"))
    refused = _error(cli("submit", str(spec), token=ada))
    assert refused.startswith(f"error: {spec}: queue: ")
    ok = cli("submit", str(spec), "--queue", "research", "--name", "renamed", token=ada)
    assert ok.exit_code == 0, ok.output
    detail = json.loads(cli("describe", ok.stdout.strip(), "--json", token=ada).stdout)
    assert (detail["queue"], detail["name"]) == ("research", "renamed")


def test_submit_errors(api_server: ApiServer, cli: Cli, tmp_path: Path) -> None:
    ada, vic = api_server.tokens["ada"], api_server.tokens["vic"]
    spec = _write(tmp_path, SPEC)

    forbidden = _error(cli("submit", str(spec), token=vic))
    assert forbidden == "error: role viewer may not submit jobs; a member or admin may"

    malformed = _write(tmp_path, "name: x\ncommand: [python\n", "bad.yaml")
    message = _error(cli("submit", str(malformed), token=ada))
    assert message.startswith(f"error: {malformed}: malformed YAML at line ")
    # an override does not hide the server's report of a file that does not parse
    again = _error(cli("submit", str(malformed), "--queue", "research", token=ada))
    assert again == message

    unknown = _write(tmp_path, SPEC.replace("workers:", "wrokers:"), "typo.yaml")
    assert _error(cli("submit", str(unknown), token=ada)).startswith(f"error: {unknown}: wrokers:")
    bad_value = _write(tmp_path, SPEC.replace("gpus: 2", "gpus: lots"), "value.yaml")
    assert _error(cli("submit", str(bad_value), token=ada)).startswith(f"error: {bad_value}: gpus:")
    empty = _write(tmp_path, "", "empty.yaml")
    assert "the job spec is empty" in _error(cli("submit", str(empty), token=ada))

    missing = tmp_path / "nope.yaml"
    assert _error(cli("submit", str(missing), token=ada)) == f"error: {missing}: no such file"
    assert _error(cli("submit", str(tmp_path), token=ada)) == f"error: {tmp_path}: not a file"
    assert json.loads(cli("jobs", "--json", token=ada).stdout)["jobs"] == []


def test_unknown_and_foreign_jobs(api_server: ApiServer, cli: Cli, tmp_path: Path) -> None:
    ada, gus = api_server.tokens["ada"], api_server.tokens["gus"]
    assert _error(cli("describe", "j-nope", token=ada)) == "error: job 'j-nope' not found"
    assert _error(cli("cancel", "j-nope", token=ada)) == "error: job 'j-nope' not found"
    assert _error(cli("logs", "j-nope", token=ada)) == "error: job 'j-nope' not found"
    assert _error(cli("describe", "../../whoami", token=ada)).startswith(  # not whoami
        "error: '../../whoami' is not a job id"
    )
    job = cli("submit", str(_write(tmp_path, SPEC)), token=ada).stdout.strip()
    assert _error(cli("describe", job, token=gus)) == f"error: job {job!r} not found"
    # this API serves no executor, so it keeps no logs: said plainly
    assert "keeps no job logs" in _error(cli("logs", job, token=ada))


def test_queues_and_nodes(api_server: ApiServer, cli: Cli) -> None:
    ada, gus = api_server.tokens["ada"], api_server.tokens["gus"]
    queues = cli("queues", token=ada)
    assert queues.exit_code == 0, queues.output
    assert "research" in queues.stdout and "sales" not in queues.stdout
    assert "IN USE" in queues.stdout  # GPUs held against the guarantees (review 14, F14)
    assert "sales" in cli("queues", token=gus).stdout
    names = [q["name"] for q in json.loads(cli("queues", "--json", token=ada).stdout)["queues"]]
    assert names == ["research", "root"]

    nodes = cli("nodes", token=ada)
    assert nodes.exit_code == 0, nodes.output
    assert "n0 (virtual)" in nodes.stdout
    assert "4 x H100 80GB (VIRTUAL: declared, not real)" in nodes.stdout
    data = json.loads(cli("nodes", "--json", token=ada).stdout)
    assert data["nodes"][0]["devices"][0]["virtual"] is True


def test_follow_waits_for_a_pending_job_and_ctrl_c_ends_it(
    api_server: ApiServer, cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No scheduler runs here, so the job stays PENDING: `logs -f` says it waits, polls, and
    Ctrl-C (during its wait) ends it quietly."""
    ada = api_server.tokens["ada"]
    job = cli("submit", str(_write(tmp_path, SPEC)), token=ada).stdout.strip()
    naps: list[float] = []

    def sleep(seconds: float) -> None:
        naps.append(seconds)
        if len(naps) == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(logs_module, "time", SimpleNamespace(sleep=sleep))
    result = cli("logs", job, "-f", token=ada)
    assert result.exit_code == 130
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"waiting for job {job} to start (pending: not scheduled yet)"
    ]
    assert naps == [logs_module.POLL_S] * 3


def test_submit_inlines_a_model_file_for_the_planner(
    api_server: ApiServer, cli: Cli, tmp_path: Path
) -> None:
    # The server reads no files: `submit` sends the fields of a model file found next to the
    # spec, and the server's planner chooses the GPUs and puts the plan in the environment.
    ada = api_server.tokens["ada"]
    (tmp_path / "model.yaml").write_text("preset: gpt3-1.3b\nglobal_batch: 64\n")
    spec = _write(
        tmp_path,
        "name: planned\nqueue: research\ncommand: [python, pretrain.py]\nmodel: model.yaml\n"
        "gpu_type: H100\nplanner: {max_gpus: 4, nodes_of: 4}\n",
    )
    submitted = cli("submit", str(spec), token=ada)
    assert submitted.exit_code == 0, submitted.output
    detail = json.loads(cli("describe", submitted.stdout.strip(), "--json", token=ada).stdout)
    assert 1 <= detail["gpus"] <= 4
    env = detail["spec"]["env"]
    assert env["TRAINYARD_PLAN_GPUS"] == str(detail["gpus"])
    assert {"TRAINYARD_PLAN_TP", "TRAINYARD_PLAN_PP", "TRAINYARD_PLAN_DP"} <= set(env)
    assert detail["spec"]["model"]["preset"] == "gpt3-1.3b"  # inlined, not a path

    missing = _write(tmp_path, spec.read_text().replace("model.yaml", "nope.yaml"), "m2.yaml")
    result = cli("submit", str(missing), token=ada)
    assert result.exit_code == 2 and "nope.yaml cannot be read" in result.output
