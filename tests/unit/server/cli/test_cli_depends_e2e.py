"""Dependencies, job arrays and `trainyard wait` end to end: a whole running server
(scheduler loop, local executor running real processes on two virtual GPUs), on SQLite and
PostgreSQL, driven by the CLI.

Rules checked:
- `submit --after A:ok` starts only once A has SUCCEEDED (its RUNNING event comes after A's
  SUCCEEDED event), PENDING meanwhile with a `dependency: ...` reason;
- a dependency that fails cancels the dependent (`dependency failed: A FAILED`);
- `submit --array 0-3%2` runs four jobs, each told its own TRAINYARD_ARRAY_INDEX, never
  more than two at once; `jobs --array A` lists them in index order; `wait A` exits 0;
- `wait` exits with a failed job's exit code, 1 for a cancelled job, 124 on `--timeout`;
- `cancel A` with an array id cancels the members that have not ended.
No timing is asserted: only the order of events, with generous timeouts.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from cli_servers import TERMINAL, Cli, RunningServer
from typer.testing import Result


def _submit(cli: Cli, running: RunningServer, *args: str, command: tuple[str, ...]) -> Any:
    """`trainyard submit ARGS --json -- COMMAND` (the login before `--`); its answer."""
    argv = ["submit", "--gpus", "0", "--max-restarts", "0", *args, "--json"]
    result = cli(*argv, "--url", running.url, "--token", running.admin_token, "--", *command)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _events(cli: Cli, running: RunningServer, job_id: str) -> list[dict[str, Any]]:
    described = cli("describe", job_id, "--json", token=running.admin_token)
    assert described.exit_code == 0, described.output
    events: list[dict[str, Any]] = json.loads(described.stdout)["events"]
    return events


def _at(events: list[dict[str, Any]], state: str) -> float:
    """When the job (last) entered `state`."""
    times = [e["time"] for e in events if e["to_state"] == state]
    assert times, events
    return float(times[-1])


def _wait(cli: Cli, running: RunningServer, *ids: str, timeout: str = "120") -> Result:
    argv = ("wait", *ids, "--interval", "0.1", "--timeout", timeout)
    return cli(*argv, token=running.admin_token)


def _pending_reason(running: RunningServer, job_id: str, part: str) -> str:
    """The job's pending reason once it contains `part` (the loop writes it each round)."""
    deadline = time.monotonic() + 120
    while True:
        reason = running.job(job_id).get("pending_reason") or ""
        if part in reason:
            return str(reason)
        assert time.monotonic() < deadline, f"{job_id}: reason {reason!r} lacks {part!r}"
        time.sleep(0.1)


def test_after_ok_waits_for_success_and_a_failure_cancels(
    running_server: RunningServer, cli: Cli, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    hold = ("sh", "-c", f'while [ ! -e "{release}" ]; do sleep 0.05; done; echo first')
    first = _submit(cli, running_server, command=hold)["id"]
    second = _submit(cli, running_server, "--after", f"{first}:ok", command=("echo", "second"))
    second_id = second["id"]
    running_server.wait(first, {"RUNNING"})
    reason = _pending_reason(running_server, second_id, "RUNNING")
    assert reason == f"dependency: waiting for job {first} to succeed (it is RUNNING)"
    assert running_server.job(second_id)["state"] == "PENDING"
    assert running_server.job(second_id)["after"] == [{"job": first, "condition": "ok"}]
    release.touch()
    assert _wait(cli, running_server, second_id).exit_code == 0
    ended = _at(_events(cli, running_server, first), "SUCCEEDED")
    began = _events(cli, running_server, second_id)
    assert _at(began, "RUNNING") >= ended
    assert [e["to_state"] for e in began] == ["PENDING", "STARTING", "RUNNING", "SUCCEEDED"]

    failing = _submit(cli, running_server, command=("sh", "-c", "exit 1"))["id"]
    dependent = _submit(cli, running_server, "--after", failing, command=("echo", "never"))["id"]
    waited = _wait(cli, running_server, dependent)
    assert waited.exit_code == 1, waited.output
    assert f"job {dependent}: CANCELLED" in waited.stdout
    assert running_server.job(failing)["state"] == "FAILED"
    events = _events(cli, running_server, dependent)
    assert [e["to_state"] for e in events] == ["PENDING", "CANCELLED"]
    assert events[-1]["reason"] == f"dependency failed: {failing} FAILED"
    described = cli("describe", dependent, token=running_server.admin_token)
    assert "after:" in described.stdout and f"{failing}:ok" in described.stdout


def test_an_array_runs_each_index_at_most_two_at_once(
    running_server: RunningServer, cli: Cli
) -> None:
    token = running_server.admin_token
    script = "echo index=$TRAINYARD_ARRAY_INDEX of $TRAINYARD_ARRAY_ID; sleep 0.5"
    out = _submit(cli, running_server, "--array", "0-3%2", command=("sh", "-c", script))
    array, members = out["id"], out["array_ids"]
    assert array.startswith("a-") and len(members) == 4
    assert _wait(cli, running_server, array).exit_code == 0

    listed = cli("jobs", "--array", array, "--json", token=token)
    assert listed.exit_code == 0, listed.output
    jobs = json.loads(listed.stdout)["jobs"]
    assert [(j["id"], j["array_id"], j["array_index"]) for j in jobs] == [
        (member, array, k) for k, member in enumerate(members)
    ]
    assert {j["state"] for j in jobs} == {"SUCCEEDED"}
    unknown = cli("jobs", "--array", "a-" + "0" * 20, token=token)  # not an empty array
    assert unknown.exit_code == 2 and "not found" in unknown.output, unknown.output
    for k, member in enumerate(members):
        logs = cli("logs", member, token=token)
        assert logs.exit_code == 0, logs.output
        assert f"index={k} of {array}" in logs.stdout, logs.stdout
        assert all(f"index={i} " not in logs.stdout for i in range(4) if i != k)

    # Each member holds its slot from before its RUNNING event to after its end event, so
    # these intervals overlap at most two at a time whatever the machine's speed.
    spans = []
    for member in members:
        events = _events(cli, running_server, member)
        spans.append((_at(events, "RUNNING"), _at(events, "SUCCEEDED")))
    for start, _end in spans:
        assert sum(1 for s, e in spans if s <= start < e) <= 2, spans


def test_wait_exit_statuses(running_server: RunningServer, cli: Cli) -> None:
    token = running_server.admin_token
    three = _submit(cli, running_server, command=("sh", "-c", "exit 3"))["id"]
    waited = _wait(cli, running_server, three)
    assert waited.exit_code == 3, waited.output
    assert f"job {three}: FAILED (exit code 3)" in waited.stdout

    sleeper = _submit(cli, running_server, command=("sleep", "600"))["id"]
    running_server.wait(sleeper, {"RUNNING"})
    timed_out = _wait(cli, running_server, sleeper, timeout="0.5")
    assert timed_out.exit_code == 124, timed_out.output
    assert f"timed out waiting for {sleeper}" in timed_out.stderr
    assert cli("cancel", sleeper, token=token).exit_code == 0
    cancelled = _wait(cli, running_server, sleeper)
    assert cancelled.exit_code == 1, cancelled.output
    assert f"job {sleeper}: CANCELLED" in cancelled.stdout
    both = _wait(cli, running_server, sleeper, three)  # the failed job's code wins
    assert both.exit_code == 3, both.output
    assert _error_exit(cli("wait", "a-nosuch", token=token))


def _error_exit(result: Result) -> bool:
    return result.exit_code == 2 and result.stderr.startswith("error: ")


def test_cancel_an_array_cancels_what_has_not_ended(
    running_server: RunningServer, cli: Cli
) -> None:
    token = running_server.admin_token
    script = 'test "$TRAINYARD_ARRAY_INDEX" = 0 || sleep 600'
    out = _submit(cli, running_server, "--array", "0-2%1", command=("sh", "-c", script))
    array, members = out["id"], out["array_ids"]
    running_server.wait(members[0], {"SUCCEEDED"})
    running_server.wait(members[1], {"RUNNING"})
    assert "array: " in _pending_reason(running_server, members[2], "array: ")
    cancelled = cli("cancel", array, token=token)
    assert cancelled.exit_code == 0, cancelled.output
    assert cancelled.stdout.strip() == f"array {array}: 2 jobs cancelled, 1 had ended"
    states = [running_server.wait(m, TERMINAL)["state"] for m in members]
    assert states == ["SUCCEEDED", "CANCELLED", "CANCELLED"]
    waited = _wait(cli, running_server, array)
    assert waited.exit_code == 1, waited.output
    again = cli("cancel", array, token=token)
    assert again.exit_code == 0 and "0 jobs cancelled, 3 had ended" in again.stdout
