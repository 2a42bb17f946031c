"""The token routes, job-scoped tokens and the job-logs route, on SQLite and PostgreSQL.

Logs are served by a real `JobLogs` over files laid out as the local executor writes them
(`<runs>/jobs/<id>/logs/attempt-<n>/rank-<r>.log`)."""

from __future__ import annotations

import hashlib
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from api_fixtures import NOW, ApiWorld, api
from sqlalchemy import select, text

from trainyard.jobspec import Limits
from trainyard.server.api.app import create_app
from trainyard.server.db import ApiToken, Job, JobState, User, make_session_factory
from trainyard.server.db.tokens import issue_token
from trainyard.server.lifecycle import transition
from trainyard.server.services.logs import JobLogs

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

__all__ = ["api"]  # the fixture, imported for pytest

S = JobState
SPEC: dict[str, object] = {"name": "train", "queue": "research", "command": ["x"], "gpus": 2}


def _submit(api: ApiWorld, user: str = "ada", **fields: object) -> str:
    answer = api.client.post("/v1/jobs", json={**SPEC, **fields}, headers=api.auth(user))
    assert answer.status_code == 201, answer.text
    job_id: str = answer.json()["id"]
    return job_id


def _start(api: ApiWorld, job_id: str, *, running: bool = True) -> None:
    """The scheduler places the job and (with `running`) the executor reports it up."""
    with make_session_factory(api.engine)() as s:
        job = s.get(Job, job_id)
        assert job is not None
        job.placement = [{"node": "n0", "devices": [0, 1]}]
        transition(s, job, S.STARTING, reason="scheduled", now=NOW + 500)
        if running:
            transition(s, job, S.RUNNING, reason="started", now=NOW + 501)
        s.commit()


def _finish(api: ApiWorld, job_id: str) -> None:
    with make_session_factory(api.engine)() as s:
        job = s.get(Job, job_id)
        assert job is not None
        transition(s, job, S.SUCCEEDED, reason="exited", now=NOW + 900, details={"exit_code": 0})
        s.commit()


def _job_token(api: ApiWorld, job_id: str, user: str = "ada") -> dict[str, str]:
    with make_session_factory(api.engine)() as s:
        owner = s.scalars(select(User).where(User.name == user)).one()
        _, token = issue_token(s, owner, now=NOW, job_id=job_id, name=f"job {job_id}")
        s.commit()
    return {"Authorization": f"Bearer {token}"}


def _error(answer: object) -> tuple[int, str | None]:
    status: int = answer.status_code  # type: ignore[attr-defined]
    field: str | None = answer.json()["error"]["field"]  # type: ignore[attr-defined]
    return status, field


# ---- tokens --------------------------------------------------------------------------------


def test_a_created_token_is_shown_once_stored_hashed_and_works(api: ApiWorld) -> None:
    created = api.client.post(
        "/v1/tokens", json={"name": "laptop", "expires_in_s": 3600}, headers=api.auth("ada")
    )
    assert created.status_code == 201, created.text
    body = created.json()
    token = body["token"]
    assert token.startswith(f"ty_{body['token_id']}_")
    assert (body["name"], body["user"], body["job_id"], body["revoked_at"]) == (
        "laptop", "ada", None, None,
    )  # fmt: skip
    assert body["expires_at"] == pytest.approx(body["created_at"] + 3600)
    whoami = api.client.get("/v1/whoami", headers={"Authorization": f"Bearer {token}"})
    assert whoami.status_code == 200 and whoami.json() == {
        "user": "ada", "tenant": "acme", "role": "member",
    }  # fmt: skip
    listed = api.client.get("/v1/tokens", headers=api.auth("ada")).json()["tokens"]
    assert body["token_id"] in {t["token_id"] for t in listed}
    assert all("token" not in t for t in listed) and token not in str(listed)
    with make_session_factory(api.engine)() as s:
        stored = " ".join(
            str(v) for row in s.execute(text("SELECT * FROM api_tokens")) for v in row
        )
        row = s.scalars(select(ApiToken).where(ApiToken.token_id == body["token_id"])).one()
        assert row.secret_hash == hashlib.sha256(token.encode()).hexdigest()
    assert token not in stored and token.split("_", 2)[2] not in stored


def test_bad_token_bodies_are_refused(api: ApiWorld) -> None:
    for body in ({"expires_in_s": 0}, {"expires_in_s": -5}, {"name": "x" * 65}):
        answer = api.client.post("/v1/tokens", json=body, headers=api.auth("ada"))
        assert answer.status_code == 422, body
    assert api.client.post("/v1/tokens", json={}).status_code == 401
    # a body that is no object at all: still 401 first, not its schema (review 11, F5)
    for path in ("/v1/tokens", "/v1/jobs/j-1/reports"):
        answer = api.client.post(path, content=b"name=x")
        assert answer.status_code == 401, (path, answer.text)


def test_members_see_their_tokens_admins_their_tenants(api: ApiWorld) -> None:
    for user in ("ada", "vic", "root", "gus"):
        answer = api.client.post(
            "/v1/tokens", json={"name": f"{user}-extra"}, headers=api.auth(user)
        )
        assert answer.status_code == 201, answer.text  # a viewer may manage their own tokens

    def users(caller: str) -> list[str]:
        answer = api.client.get("/v1/tokens", headers=api.auth(caller))
        assert answer.status_code == 200, answer.text
        return sorted(t["user"] for t in answer.json()["tokens"])

    assert users("ada") == ["ada", "ada"]  # the seeded token and the new one
    assert users("vic") == ["vic", "vic"]
    assert users("root") == ["ada", "ada", "root", "root", "vic", "vic"]
    assert users("gus") == ["gus", "gus"]


def test_revoking_is_limited_to_own_or_tenant_tokens(api: ApiWorld) -> None:
    ids = {}
    for user in ("ada", "vic", "gus"):
        answer = api.client.post("/v1/tokens", json={"name": "x"}, headers=api.auth(user))
        ids[user] = answer.json()["token_id"]
    assert _error(api.client.delete(f"/v1/tokens/{ids['vic']}", headers=api.auth("ada")))[0] == 404
    assert _error(api.client.delete(f"/v1/tokens/{ids['ada']}", headers=api.auth("gus")))[0] == 404
    assert _error(api.client.delete(f"/v1/tokens/{ids['gus']}", headers=api.auth("root")))[0] == 404
    for bad in ("nothex", "0" * 12, "A" * 12):
        assert api.client.delete(f"/v1/tokens/{bad}", headers=api.auth("root")).status_code == 404
    own = api.client.delete(f"/v1/tokens/{ids['ada']}", headers=api.auth("ada"))
    assert own.status_code == 200 and own.json()["revoked_at"] is not None
    again = api.client.delete(f"/v1/tokens/{ids['ada']}", headers=api.auth("ada"))
    assert again.status_code == 200 and again.json()["revoked_at"] == own.json()["revoked_at"]
    by_admin = api.client.delete(f"/v1/tokens/{ids['vic']}", headers=api.auth("root"))
    assert by_admin.status_code == 200 and by_admin.json()["user"] == "vic"
    with make_session_factory(api.engine)() as s:
        live = s.scalars(select(ApiToken.token_id).where(ApiToken.revoked_at.is_(None))).all()
    assert ids["gus"] in live and ids["ada"] not in live and ids["vic"] not in live


# ---- job-scoped tokens ---------------------------------------------------------------------


def test_a_job_token_sees_its_job_only_and_may_not_write(api: ApiWorld) -> None:
    mine = _submit(api)
    other = _submit(api)  # the same tenant and user, another job
    _start(api, mine)
    job = _job_token(api, mine)
    detail = api.client.get(f"/v1/jobs/{mine}", headers=job)
    assert detail.status_code == 200 and detail.json()["state"] == "RUNNING"
    listed = api.client.get("/v1/jobs", headers=job).json()["jobs"]
    assert [j["id"] for j in listed] == [mine]
    assert len(api.client.get("/v1/jobs", headers=api.auth("ada")).json()["jobs"]) == 2
    assert api.client.get(f"/v1/jobs/{other}", headers=job).status_code == 404
    assert api.client.post(f"/v1/jobs/{other}/cancel", headers=job).status_code == 404
    assert api.client.post(f"/v1/jobs/{mine}/cancel", headers=job).status_code == 403
    assert api.client.post("/v1/jobs", json=SPEC, headers=job).status_code == 403
    assert api.client.post("/v1/tokens", json={}, headers=job).status_code == 403
    assert api.client.get("/v1/tokens", headers=job).status_code == 403
    ada_token = api.client.get("/v1/tokens", headers=api.auth("ada")).json()["tokens"][0]
    revoke = api.client.delete(f"/v1/tokens/{ada_token['token_id']}", headers=job)
    assert revoke.status_code == 403
    assert api.client.get("/v1/whoami", headers=job).json()["user"] == "ada"
    listed_tokens = api.client.get("/v1/tokens", headers=api.auth("root")).json()["tokens"]
    assert all(t["job_id"] is None for t in listed_tokens)  # job tokens are not listed
    with make_session_factory(api.engine)() as s:
        states = dict(s.execute(select(Job.id, Job.state)).all())
        assert states == {mine: S.RUNNING, other: S.PENDING}
        assert s.scalar(select(ApiToken.revoked_at).where(
            ApiToken.token_id == ada_token["token_id"])) is None  # fmt: skip
    _finish(api, mine)
    assert api.client.get(f"/v1/jobs/{mine}", headers=job).status_code == 401  # job over


def test_a_job_token_before_its_job_starts_is_refused(api: ApiWorld) -> None:
    job_id = _submit(api)
    token = _job_token(api, job_id)
    assert api.client.get(f"/v1/jobs/{job_id}", headers=token).status_code == 401
    _start(api, job_id, running=False)
    assert api.client.get(f"/v1/jobs/{job_id}", headers=token).status_code == 200


# ---- logs ----------------------------------------------------------------------------------


@pytest.fixture
def logs_client(api: ApiWorld, tmp_path: Path) -> Iterator[tuple[TestClient, Path]]:
    """A second app on the same database that serves logs from `<tmp>/runs`."""
    runs = tmp_path / "runs"
    clock = iter(float(NOW + 10_000 + i) for i in range(1_000_000))
    app = create_app(
        api.engine, limits=Limits(max_gpus_per_job=64), logs=JobLogs(runs),
        clock=lambda: next(clock),
    )  # fmt: skip
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, runs


def _follow_while(
    api: ApiWorld, client: TestClient, job_id: str, meanwhile: Callable[[], None]
) -> httpx.Response:
    """`GET .../logs?follow=true` as ada while `meanwhile` runs in a thread started 0.5 s in."""
    worker = threading.Timer(0.5, meanwhile)
    worker.start()
    try:
        return client.get(f"/v1/jobs/{job_id}/logs?follow=true", headers=api.auth("ada"))
    finally:
        worker.join(60)


def _write_log(runs: Path, job_id: str, attempt: int, rank: int, text: str) -> Path:
    path = runs / "jobs" / job_id / "logs" / f"attempt-{attempt}" / f"rank-{rank}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(text)
    return path


def test_logs_without_a_log_source_or_of_another_tenant_are_404(
    api: ApiWorld, logs_client: tuple[TestClient, Path]
) -> None:
    client, runs = logs_client
    job_id = _submit(api)
    _start(api, job_id)
    _write_log(runs, job_id, 0, 0, "secret\n")
    assert _error(api.client.get(f"/v1/jobs/{job_id}/logs", headers=api.auth("ada"))) == (
        404, None,
    )  # fmt: skip
    foreign = client.get(f"/v1/jobs/{job_id}/logs", headers=api.auth("gus"))
    assert foreign.status_code == 404 and "secret" not in foreign.text
    assert client.get("/v1/jobs/j-nope/logs", headers=api.auth("ada")).status_code == 404
    assert client.get(f"/v1/jobs/{job_id}/logs").status_code == 401
    assert client.get(f"/v1/jobs/{job_id}/logs", headers=api.auth("vic")).text == "secret\n"


def test_logs_by_rank_all_ranks_and_bad_ranks_or_attempts(
    api: ApiWorld, logs_client: tuple[TestClient, Path]
) -> None:
    client, runs = logs_client
    job_id = _submit(api, workers=2)
    ada = api.auth("ada")
    empty = client.get(f"/v1/jobs/{job_id}/logs", headers=ada)  # pending: nothing yet
    assert empty.status_code == 200 and empty.text == ""
    assert _error(client.get(f"/v1/jobs/{job_id}/logs?attempt=1", headers=ada)) == (
        422, "attempt",
    )  # fmt: skip
    _start(api, job_id)
    _write_log(runs, job_id, 0, 0, "r0 first\nr0 second\n")
    _write_log(runs, job_id, 0, 1, "r1 only\n")
    one = client.get(f"/v1/jobs/{job_id}/logs?rank=1", headers=ada)
    assert one.status_code == 200 and one.text == "r1 only\n"
    assert one.headers["content-type"].startswith("text/plain")
    both = client.get(f"/v1/jobs/{job_id}/logs", headers=ada)
    assert both.text == "[rank 0] r0 first\n[rank 0] r0 second\n[rank 1] r1 only\n"
    assert client.get(f"/v1/jobs/{job_id}/logs?attempt=0&rank=0", headers=ada).text == (
        "r0 first\nr0 second\n"
    )
    assert _error(client.get(f"/v1/jobs/{job_id}/logs?rank=2", headers=ada)) == (422, "rank")
    assert _error(client.get(f"/v1/jobs/{job_id}/logs?attempt=1", headers=ada)) == (
        422, "attempt",
    )  # fmt: skip
    assert _error(client.get(f"/v1/jobs/{job_id}/logs?rank=-1", headers=ada))[0] == 422
    # an attempt that ran more ranks than the spec's `workers` (an elastic job grown 2 -> 4,
    # found by an outside review: its ranks 2 and 3 were refused) is read by its own files
    _write_log(runs, job_id, 0, 3, "r3 of a grown run\n")
    assert client.get(f"/v1/jobs/{job_id}/logs?rank=3", headers=ada).text == "r3 of a grown run\n"
    assert _error(client.get(f"/v1/jobs/{job_id}/logs?rank=4", headers=ada)) == (422, "rank")


def test_a_job_token_reads_its_own_logs_only(
    api: ApiWorld, logs_client: tuple[TestClient, Path]
) -> None:
    client, runs = logs_client
    mine, other = _submit(api), _submit(api)
    _start(api, mine)
    _write_log(runs, mine, 0, 0, "mine\n")
    _write_log(runs, other, 0, 0, "other\n")
    token = _job_token(api, mine)
    assert client.get(f"/v1/jobs/{mine}/logs", headers=token).text == "mine\n"
    assert client.get(f"/v1/jobs/{other}/logs", headers=token).status_code == 404


def test_follow_on_a_finished_job_returns_what_is_there_and_ends(
    api: ApiWorld, logs_client: tuple[TestClient, Path]
) -> None:
    client, runs = logs_client
    job_id = _submit(api)
    _start(api, job_id)
    _write_log(runs, job_id, 0, 0, "epoch 1\nepoch 2\nno newline at the end")
    _finish(api, job_id)
    answer = client.get(f"/v1/jobs/{job_id}/logs?follow=true", headers=api.auth("ada"))
    assert answer.status_code == 200
    assert answer.text.splitlines() == ["epoch 1", "epoch 2", "no newline at the end"]


def test_follow_on_a_running_job_ends_when_the_job_does(
    api: ApiWorld, logs_client: tuple[TestClient, Path]
) -> None:
    client, runs = logs_client
    job_id = _submit(api)
    _start(api, job_id)
    _write_log(runs, job_id, 0, 0, "started\n")

    def the_run_ends() -> None:
        _write_log(runs, job_id, 0, 0, "last words\n")
        _finish(api, job_id)

    answer = _follow_while(api, client, job_id, the_run_ends)
    assert answer.status_code == 200
    assert answer.text == "started\nlast words\n"


def test_follow_from_before_the_launch_sees_the_run(
    api: ApiWorld, logs_client: tuple[TestClient, Path]
) -> None:
    """Followed while STARTING (scheduled, not launched: no log files yet); each rank's file
    appears later, as the executor starts its processes one by one."""
    client, runs = logs_client
    job_id = _submit(api, workers=2)
    _start(api, job_id, running=False)

    def the_run() -> None:
        _write_log(runs, job_id, 0, 0, "rank zero up\n")
        threading.Event().wait(0.5)
        _write_log(runs, job_id, 0, 1, "rank one up\n")
        with make_session_factory(api.engine)() as s:
            job = s.get(Job, job_id)
            assert job is not None
            transition(s, job, S.RUNNING, reason="started", now=NOW + 600)
            s.commit()
        threading.Event().wait(0.5)
        _write_log(runs, job_id, 0, 0, "rank zero done\n")
        _finish(api, job_id)

    answer = _follow_while(api, client, job_id, the_run)
    assert answer.status_code == 200
    assert sorted(answer.text.splitlines()) == [
        "[rank 0] rank zero done", "[rank 0] rank zero up", "[rank 1] rank one up",
    ]  # fmt: skip


def test_logs_removed_by_retention_are_a_410_that_says_so(
    api: ApiWorld, logs_client: tuple[TestClient, Path]
) -> None:
    """Outside review 7: after `admin gc` a job's logs answered 200 with nothing, as if the
    job had printed nothing."""
    from trainyard.server.services import retention

    client, runs = logs_client
    job_id = _submit(api)
    _start(api, job_id)
    _write_log(runs, job_id, 0, 0, "the output\n")
    _finish(api, job_id)
    ada = api.auth("ada")
    assert client.get(f"/v1/jobs/{job_id}/logs", headers=ada).text == "the output\n"
    with make_session_factory(api.engine)() as s:
        report = retention.collect(
            s,
            runs,
            now=NOW + 86_400 * 60,
            runs_age_s=86_400 * 30,
            checkpoints_age_s=86_400 * 30,
            tokens_age_s=86_400 * 30,
        )
        s.commit()  # fmt: skip
    assert report.runs == [job_id]
    for query in ("", "?follow=true", "?rank=0"):
        answer = client.get(f"/v1/jobs/{job_id}/logs{query}", headers=ada)
        assert answer.status_code == 410, (query, answer.text)
        assert "removed by retention (trainyard admin gc)" in answer.json()["error"]["message"]
    other = _submit(api)  # a job that has not run yet: no logs, and none removed
    assert client.get(f"/v1/jobs/{other}/logs", headers=ada).status_code == 200


def test_a_finished_attempts_log_comes_whole_in_large_pieces(
    api: ApiWorld, logs_client: tuple[TestClient, Path]
) -> None:
    # Sent a line a time, a 61 MB log of short lines took 36 s (outside review 12, F5): each
    # piece of a streamed answer is handed to a worker thread. Now pieces of about 64 KiB,
    # of whole lines, and every line still there, in order.
    client, runs = logs_client
    job_id = _submit(api)
    _start(api, job_id, running=False)
    text = "".join(f"step {i} loss 0.{i % 97:02d}\n" for i in range(60_000))
    _write_log(runs, job_id, 0, 0, text)
    with client.stream("GET", f"/v1/jobs/{job_id}/logs", headers=api.auth("ada")) as answer:
        pieces = list(answer.iter_text())
    assert "".join(pieces) == text
    assert len(pieces) < 40  # about 1.2 MB in 64 KiB pieces, not 60,000 lines


def test_tail_gives_each_ranks_last_lines_then_follows(
    api: ApiWorld, logs_client: tuple[TestClient, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # outside review 12: seeing the end of a chatty job's output meant downloading all of it
    client, runs = logs_client
    job_id = _submit(api, workers=2)
    _start(api, job_id)
    ada = api.auth("ada")
    _write_log(runs, job_id, 0, 0, "".join(f"step {i}\n" for i in range(5000)))
    _write_log(runs, job_id, 0, 1, "r1 only\n")
    tail = client.get(f"/v1/jobs/{job_id}/logs?tail=2", headers=ada)
    assert tail.text == "[rank 0] step 4998\n[rank 0] step 4999\n[rank 1] r1 only\n"
    assert client.get(f"/v1/jobs/{job_id}/logs?tail=1&rank=0", headers=ada).text == "step 4999\n"
    assert client.get(f"/v1/jobs/{job_id}/logs?tail=0", headers=ada).text == ""
    assert _error(client.get(f"/v1/jobs/{job_id}/logs?tail=-1", headers=ada)) == (422, "tail")

    # the run's last line is written once the follower has sent the tail: on a busy machine
    # a timer could fire before the request was read (CI: the tail was already "last words")
    tail_sent = threading.Event()
    following = JobLogs.follow

    def follow(self: JobLogs, *args: object, **kwargs: object) -> Iterator[str]:
        for line in following(self, *args, **kwargs):  # type: ignore[arg-type]
            yield line
            tail_sent.set()

    monkeypatch.setattr(JobLogs, "follow", follow)

    def the_run_ends() -> None:
        assert tail_sent.wait(60)
        _write_log(runs, job_id, 0, 0, "last words\n")
        _finish(api, job_id)

    worker = threading.Thread(target=the_run_ends)
    worker.start()
    try:
        followed = client.get(f"/v1/jobs/{job_id}/logs?follow=true&tail=1&rank=0", headers=ada)
    finally:
        worker.join(60)
    assert followed.text == "step 4999\nlast words\n"
    done = client.get(f"/v1/jobs/{job_id}/logs?tail=2&rank=0", headers=ada)  # finished
    assert done.text == "step 4999\nlast words\n"
