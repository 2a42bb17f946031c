"""Accounting (issue 14, acceptance 4), on both databases: `GET /v1/usage` and `trainyard
usage` equal the sum of the run intervals, to the second, for jobs that were preempted,
failed and restarted, and for one still running; a window clips intervals; tenants see only
their own usage."""

from __future__ import annotations

import json
from typing import Any

import pytest
from api_fixtures import NOW, ApiWorld, api
from sqlalchemy import select

from trainyard.server.db import Job, JobState, Queue, User, make_session_factory
from trainyard.server.db.tokens import issue_token
from trainyard.server.lifecycle import submit, transition

__all__ = ["api"]
S = JobState
T0 = NOW - 10_000.0


def _job(s: Any, user: str, queue: str, gpus: int, cpus: float = 0.0) -> Job:
    owner = s.scalars(select(User).where(User.name == user)).one()
    q = s.scalars(select(Queue).where(Queue.name == queue)).one()
    job = Job(tenant=owner.tenant, user=owner, queue=q, gpus=gpus, cpus=cpus, max_restarts=3,
              spec={"name": "j", "command": ["x"]})  # fmt: skip
    submit(s, job, now=T0)
    return job


def _run(s: Any, job: Job, start: float, end: float | None, to: JobState) -> None:
    job.placement = [{"node": "n0", "devices": list(range(job.gpus))}]
    transition(s, job, S.STARTING, reason="scheduled", now=start - 5)
    transition(s, job, S.RUNNING, reason="running", now=start)
    if end is not None:
        transition(s, job, to, reason="ended", now=end)


@pytest.fixture
def history(api: ApiWorld) -> dict[str, str]:
    """ada: a job preempted (100 s on 2 GPUs), failed (50 s) and restarted to success (100 s);
    gus (globex): a job on 4 GPUs still running since T0 + 900."""
    with make_session_factory(api.engine)() as s:
        a = _job(s, "ada", "research", gpus=2, cpus=8.0)
        _run(s, a, T0 + 0, T0 + 100, S.PREEMPTED)
        transition(s, a, S.PENDING, reason="stopped", now=T0 + 110)
        _run(s, a, T0 + 200, T0 + 250, S.FAILED)
        transition(s, a, S.PENDING, reason="restart", now=T0 + 260)
        _run(s, a, T0 + 300, T0 + 400, S.SUCCEEDED)
        b = _job(s, "gus", "sales", gpus=4)
        _run(s, b, T0 + 900, None, S.RUNNING)
        s.commit()
        return {"ada": a.id, "gus": b.id}


def _usage(api: ApiWorld, user: str, **params: Any) -> dict[str, Any]:
    answer = api.client.get("/v1/usage", params=params, headers=api.auth(user))
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_usage_is_the_sum_of_run_intervals_to_the_second(
    api: ApiWorld, history: dict[str, str]
) -> None:
    out = _usage(api, "ada", since=T0 - 1, until=T0 + 1000, by="job")
    assert out["rows"] == [{
        "key": history["ada"], "gpu_seconds": 2 * (100 + 50 + 100),
        "gpu_hours": 500 / 3600, "cpu_seconds": 8 * 250.0, "memory_gb_seconds": 0.0,
        "intervals": 3, "jobs": 1,
    }]  # fmt: skip
    clipped = _usage(api, "ada", since=T0 + 50, until=T0 + 320, by="user")["rows"]
    assert [(r["key"], r["gpu_seconds"], r["intervals"]) for r in clipped] == [
        ("ada", 2 * (50 + 50 + 20), 3)
    ]


def test_a_running_job_counts_up_to_now_and_tenants_are_apart(
    api: ApiWorld, history: dict[str, str]
) -> None:
    mine = _usage(api, "gus", since=T0, until=T0 + 1000, by="tenant")["rows"]
    assert [(r["key"], r["gpu_seconds"]) for r in mine] == [("globex", 4 * 100.0)]
    now_rows = _usage(api, "gus", since=T0, by="queue")  # until: the server's clock
    (row,) = now_rows["rows"]
    assert row["key"] == "sales"
    assert row["gpu_seconds"] == pytest.approx(4 * (now_rows["until"] - (T0 + 900)))
    # no CPUs reserved: its one rank is billed as one CPU, while it runs too
    assert row["cpu_seconds"] == pytest.approx(now_rows["until"] - (T0 + 900))
    assert all(r["key"] != "globex" for r in _usage(api, "ada", since=T0, by="tenant")["rows"])


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"by": "planet"}, "by"),
        ({"since": -1}, "since"),
        ({"until": "inf"}, "until"),
    ],
)
def test_bad_usage_queries_name_the_field(
    api: ApiWorld, params: dict[str, Any], field: str
) -> None:
    answer = api.client.get("/v1/usage", params=params, headers=api.auth("ada"))
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == field


def test_an_empty_window_has_no_usage(api: ApiWorld, history: dict[str, str]) -> None:
    assert _usage(api, "ada", since=T0 + 50, until=T0 + 50)["rows"] == []


@pytest.mark.parametrize(
    ("params", "field"), [({"since": T0 + 50, "until": T0}, "until"), ({"since": 9e11}, "since")]
)
def test_a_window_that_ends_before_it_starts_is_refused(
    api: ApiWorld, history: dict[str, str], params: dict[str, Any], field: str
) -> None:
    """Found by an outside review: `until` before `since` answered 200 with no rows, as if
    nothing had run, where the caller had swapped the two; a `since` beyond the server's
    clock (with `until` left to it) is the same window."""
    answer = api.client.get("/v1/usage", params=params, headers=api.auth("ada"))
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["field"] == field and "before it starts" in error["message"]


def test_a_jobs_own_token_reads_its_jobs_usage_only(api: ApiWorld, history: dict[str, str]) -> None:
    """Found by an outside review: a job's token (`TRAINYARD_TOKEN`, "reads this job only")
    read the usage of every job and user of its tenant."""
    with make_session_factory(api.engine)() as s:
        ada = s.scalars(select(User).where(User.name == "ada")).one()
        other = _job(s, "ada", "research", gpus=1)
        _run(s, other, T0 + 500, None, S.RUNNING)  # a job's token works while it runs
        _, token = issue_token(s, ada, now=NOW, job_id=other.id, name="job token")
        s.commit()
    job = {"Authorization": f"Bearer {token}"}
    answer = api.client.get("/v1/usage", params={"by": "job"}, headers=job)
    assert answer.status_code == 200, answer.text
    rows = answer.json()["rows"]
    assert [r["key"] for r in rows] == [other.id]
    by_user = api.client.get("/v1/usage", params={"by": "user"}, headers=job).json()["rows"]
    assert [r["key"] for r in by_user] == ["ada"] and by_user[0]["jobs"] == 1
    everything = {r["key"]: r for r in _usage(api, "ada", by="job")["rows"]}
    assert set(everything) == {history["ada"], other.id}  # ada herself reads both
    assert rows[0]["gpu_seconds"] == pytest.approx(everything[other.id]["gpu_seconds"], abs=30)


def test_the_cli_prints_the_same_figures(
    api: ApiWorld, history: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from trainyard.cli import usage as cli_usage
    from trainyard.cli.main import app

    class Client:  # the CLI's client, answering from the test app
        def __enter__(self) -> Client:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def get(self, path: str, **params: Any) -> Any:
            answer = api.client.get(path, params=params, headers=api.auth("ada"))
            assert answer.status_code == 200, answer.text
            return answer.json()

    monkeypatch.setattr(cli_usage, "connect", lambda url, token: Client())
    runner = CliRunner()
    args = ["usage", "--since", str(T0 - 1), "--until", str(T0 + 1000), "--by", "job"]
    out = runner.invoke(app, [*args, "--format", "json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["rows"][0]["gpu_seconds"] == 500.0
    csv_out = runner.invoke(app, [*args, "--format", "csv"]).stdout.splitlines()
    assert csv_out[0].startswith("key,gpu_hours,gpu_seconds")
    assert csv_out[1].split(",")[2] == "500.0"
    table = runner.invoke(app, args)
    assert history["ada"] in table.stdout and "0.139" in table.stdout
    bad = runner.invoke(app, ["usage", "--since", "yesterday"])
    assert bad.exit_code == 2 and "--since" in bad.stderr


def test_the_operator_reads_every_tenants_usage(
    api: ApiWorld, history: dict[str, str], tmp_path: Any
) -> None:
    """`trainyard admin usage` (found missing by an outside review: a tenant admin's `usage
    --by tenant` shows one tenant, and the operator had only /metrics' totals)."""
    from typer.testing import CliRunner

    from trainyard.cli.main import app

    url = api.engine.url.render_as_string(hide_password=False)
    window = ["--since", str(T0 - 1), "--until", str(T0 + 1000), "--db", url,
              "--home", str(tmp_path)]  # fmt: skip
    out = CliRunner().invoke(app, ["admin", "usage", *window, "--json"])
    assert out.exit_code == 0, out.output
    rows = {r["key"]: r["gpu_seconds"] for r in json.loads(out.stdout)["rows"]}
    assert rows == {"acme": 500.0, "globex": 400.0}  # ada's 250 s x 2; gus's 100 s x 4
    by_user = CliRunner().invoke(app, ["admin", "usage", *window, "--by", "user"])
    assert by_user.exit_code == 0 and "ada" in by_user.stdout and "gus" in by_user.stdout
    bad = CliRunner().invoke(app, ["admin", "usage", "--by", "planet", "--db", url])
    assert bad.exit_code == 2 and "--by" in bad.stderr


def test_a_deleted_queue_is_named_as_such(api: ApiWorld, history: dict[str, str]) -> None:
    """Usage records outlive the queue they name (`admin queue rm --purge-finished`)."""
    from trainyard.server.services.usage import Interval, _names

    with make_session_factory(api.engine)() as s:
        name = _names(s, "queue")
        gone = Interval("j-x", 1, None, 987_654, 0.0, 1.0, 1, 0.0, 0.0)
        assert name(gone) == "#987654 (deleted queue)"
        assert _names(s, "user")(gone) == "(deleted user)"


@pytest.mark.parametrize("value", ["nan", "inf", "-Infinity"])
def test_a_number_that_is_not_finite_is_called_so(api: ApiWorld, value: str) -> None:
    """Outside review 7: `since=nan` was told "less than or equal to 1000000000000"."""
    answer = api.client.get("/v1/usage", params={"since": value}, headers=api.auth("ada"))
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["field"] == "since" and error["message"].startswith("must be a finite number")


def test_a_job_that_reserves_no_cpus_is_billed_one_per_rank(api: ApiWorld) -> None:
    # Outside review 11 (F3): CPU-only work submitted without `cpus` was billed 0 CPU-seconds
    # however long it ran. Now a rank counts as one CPU; reserved CPUs count as reserved.
    with make_session_factory(api.engine)() as s:
        cpu_only = _job(s, "ada", "research", gpus=0)
        cpu_only.spec = {"name": "j", "command": ["x"], "workers": 3, "nodes": 1, "gpus": 0}
        _run(s, cpu_only, T0 + 0, T0 + 30, S.SUCCEEDED)
        grown = _job(s, "ada", "research", gpus=4)  # an elastic job asked 2 GPUs, 1 per rank
        grown.spec = {"name": "j", "command": ["x"], "workers": 2, "nodes": 1, "gpus": 2}
        _run(s, grown, T0 + 0, T0 + 10, S.SUCCEEDED)
        reserved = _job(s, "ada", "research", gpus=0, cpus=0.5)
        _run(s, reserved, T0 + 0, T0 + 10, S.SUCCEEDED)
        s.commit()
        ids = (cpu_only.id, grown.id, reserved.id)
    rows = {r["key"]: r for r in _usage(api, "ada", since=T0 - 1, until=T0 + 100, by="job")["rows"]}
    assert [rows[i]["cpu_seconds"] for i in ids] == [3 * 30.0, 4 * 10.0, 0.5 * 10.0]
    assert rows[ids[0]]["memory_gb_seconds"] == 0.0  # memory: only as reserved


def test_billed_cpus_reads_the_ranks_from_the_stored_spec() -> None:
    from trainyard.accounting import billed_cpus

    assert billed_cpus(8.0, None, 0) == 8.0
    assert billed_cpus(0.0, None, 0) == 1.0 and billed_cpus(None, {}, 2) == 1.0
    assert billed_cpus(0.0, {"workers": 4, "nodes": 2, "gpus": 8}, 8) == 8.0
    assert billed_cpus(0.0, {"workers": 4, "nodes": 2, "gpus": 8}, 4) == 4.0  # shrunk
    assert billed_cpus(0.0, {"workers": 2, "nodes": 1, "gpus": 4}, 8) == 4.0  # 2 GPUs a rank
    assert billed_cpus(0.0, {"workers": "x", "nodes": True}, 0) == 1.0  # never raises
