"""The console's server side without a browser, on SQLite and PostgreSQL (the `api` world:
tenants acme and globex; ada member, vic viewer, root admin of acme; gus of globex):
login codes and sessions, the session cookie on the REST API with its CSRF rule, the pages'
answers per role and tenant, the jobs list's order, usage over time, report history, and
the simulator reports' files."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from api_fixtures import NOW, ApiWorld, api
from sqlalchemy import select
from sqlalchemy.orm import Session

from trainyard.server.api.auth import CSRF_HEADER, SESSION_COOKIE
from trainyard.server.api.errors import ApiError
from trainyard.server.console import simreports
from trainyard.server.db import Job, JobReportSample, JobState, Queue, UsageRecord, User
from trainyard.server.db import make_session_factory as sessions_of
from trainyard.server.db.tokens import issue_token
from trainyard.server.lifecycle import transition
from trainyard.server.services import logins, reports, usage

__all__ = ["api"]
SPEC = {"name": "train", "command": ["python", "train.py"], "gpus": 2, "queue": "research"}


def _session(world: ApiWorld) -> Session:
    return sessions_of(world.engine)()


def _ids(s: Session) -> dict[str, int]:
    """The ids of the seeded rows (sequences differ between backends and tests)."""
    users = {u.name: u for u in s.scalars(select(User))}
    queues = {q.name: q.id for q in s.scalars(select(Queue))}
    return {
        "ada": users["ada"].id, "gus": users["gus"].id, "acme": users["ada"].tenant_id,
        "globex": users["gus"].tenant_id, "research": queues["research"], "sales": queues["sales"],
    }  # fmt: skip


def _as(world: ApiWorld, cookie: str | None) -> Any:
    """The test client with only this session cookie (None: none)."""
    world.client.cookies.clear()
    if cookie is not None:
        world.client.cookies.set(SESSION_COOKIE, cookie)
    return world.client


def _login(world: ApiWorld, credential: str) -> str:
    """Log in by link; the session token the cookie holds."""
    client = _as(world, None)
    answer = client.get(f"/jobs?token={credential}&state=RUNNING", follow_redirects=False)
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"] == "/jobs?state=RUNNING"  # the token left the address
    cookie = answer.cookies[SESSION_COOKIE]
    assert "httponly" in answer.headers["set-cookie"].lower()
    assert "samesite=lax" in answer.headers["set-cookie"].lower()
    client.cookies.clear()
    return str(cookie)


def _csrf(world: ApiWorld, cookie: str) -> str:
    page = _as(world, cookie).get("/queues")
    found = re.search(r'name="csrf-token" content="([0-9a-f]+)"', page.text)
    assert found, page.text[:500]
    return found.group(1)


@pytest.mark.parametrize("site", ["cross-site", "same-site"])
def test_a_login_link_another_site_opened_asks_first(api: ApiWorld, site: str) -> None:
    """Login CSRF: a page elsewhere (another port of the same host is same-site) that opens
    `/?token=<its author's token>` logged its visitor in as the author, whose account then
    received what the visitor submitted. Such a link now shows the form, the token filled
    in, and logs in only by this site's button; the code is not used up meanwhile."""
    with _session(api) as s:
        code = logins.issue_code(s, "ada", now=NOW)
        s.commit()
    client = _as(api, None)
    opened = client.get(
        f"/jobs?token={code}", headers={"Sec-Fetch-Site": site}, follow_redirects=False
    )
    assert opened.status_code == 200 and SESSION_COOKIE not in opened.cookies
    assert "opened by another site" in opened.text and f'value="{code}"' in opened.text
    origin = {"Origin": str(api.client.base_url).rstrip("/")}
    form = client.post(
        "/login", data={"token": code, "next": "/jobs"}, headers=origin, follow_redirects=False
    )
    assert form.status_code == 303 and SESSION_COOKIE in form.cookies, form.text
    client.cookies.clear()


def test_a_login_code_logs_in_once_as_its_user(api: ApiWorld) -> None:
    with _session(api) as s:
        code = logins.issue_code(s, "ada", now=NOW)
        s.commit()
    cookie = _login(api, code)
    who = _as(api, cookie).get("/v1/whoami").json()
    assert (who["user"], who["tenant"], who["role"]) == ("ada", "acme", "member")
    again = api.client.get(f"/?token={code}", follow_redirects=False)
    assert again.status_code == 401 and "already used" in again.text
    assert SESSION_COOKIE not in again.cookies
    # the session is a token of ada's, listed (and revocable) like any other
    names = [
        t["name"] for t in api.client.get("/v1/tokens", headers=api.auth("ada")).json()["tokens"]
    ]
    assert logins.CONSOLE_SESSION in names


def test_expired_codes_disabled_users_and_job_tokens_do_not_log_in(api: ApiWorld) -> None:
    with _session(api) as s:
        old = logins.issue_code(s, "vic", now=NOW - 10_000)
        gus = logins.issue_code(s, "gus", now=NOW)
        s.get(User, s.scalar(select(User.id).where(User.name == "gus"))).disabled = True  # type: ignore[union-attr]
        ids = _ids(s)
        job = Job(tenant_id=ids["acme"], user_id=ids["ada"], queue_id=ids["research"], name="j",
                  submitted_at=NOW,
                  state_changed_at=NOW, state=JobState.RUNNING)  # fmt: skip
        s.add(job)
        s.flush()
        ada = s.scalars(select(User).where(User.name == "ada")).one()
        _row, job_token = issue_token(s, ada, now=NOW, job_id=job.id)
        s.commit()
        with pytest.raises(ApiError) as raised:
            logins.issue_code(s, "nobody", now=NOW)
        assert raised.value.field == "user"
    for credential, why in ((old, "expired"), (gus, "already used"), (job_token, "job-scoped"),
                            ("ty_0123456789ab_nope", "invalid")):  # fmt: skip
        answer = api.client.get(f"/?token={credential}", follow_redirects=False)
        assert answer.status_code == 401, credential
        assert why in answer.text
        assert "Traceback" not in answer.text


def test_the_cookie_works_on_the_api_and_its_writes_need_the_csrf_token(api: ApiWorld) -> None:
    cookie = _login(api, api.tokens["ada"])
    jar = {SESSION_COOKIE: cookie}
    assert _as(api, jar[SESSION_COOKIE]).get("/v1/jobs").status_code == 200
    body = json.dumps({"name": "x"})
    plain = {"Content-Type": "application/json"}
    refused = _as(api, jar[SESSION_COOKIE]).post("/v1/tokens", content=body, headers=plain)
    assert refused.status_code == 403 and CSRF_HEADER in refused.json()["error"]["message"]
    forged = plain | {CSRF_HEADER: "0" * 64}
    wrong = _as(api, cookie).post("/v1/tokens", content=body, headers=forged)
    assert wrong.status_code == 403
    token = _csrf(api, cookie)
    elsewhere = plain | {CSRF_HEADER: token, "Origin": "http://evil:1"}
    foreign = _as(api, cookie).post("/v1/tokens", content=body, headers=elsewhere)
    assert foreign.status_code == 403 and "cross-origin" in foreign.json()["error"]["message"]
    made = _as(api, jar[SESSION_COOKIE]).post(
        "/v1/tokens", content=body, headers=plain | {CSRF_HEADER: token}
    )
    assert made.status_code == 201, made.text
    # a bearer token needs no CSRF token (no browser sends it on its own)
    assert (
        api.client.post("/v1/tokens", content=body, headers=api.auth("ada") | plain).status_code
        == 201
    )


def test_the_cookie_takes_a_console_session_only(api: ApiWorld) -> None:
    """An API token or a job's own token set as the cookie by hand is refused (found by an
    outside review: a job's token read its whole tenant's usage through the Usage page)."""
    with _session(api) as s:
        ids = _ids(s)
        job = Job(tenant_id=ids["acme"], user_id=ids["ada"], queue_id=ids["research"], name="j",
                  submitted_at=NOW, state_changed_at=NOW, state=JobState.RUNNING)  # fmt: skip
        s.add(job)
        s.flush()
        ada = s.scalars(select(User).where(User.name == "ada")).one()
        _row, job_token = issue_token(s, ada, now=NOW, job_id=job.id)
        s.commit()
    # the job's token still reads its own job through the API, in the header
    assert api.client.get("/v1/usage", headers={"Authorization": f"Bearer {job_token}"}).json()
    for credential in (job_token, api.tokens["ada"]):
        refused = _as(api, credential).get("/v1/whoami")
        assert refused.status_code == 401, credential
        assert "console session" in refused.json()["error"]["message"]
        page = _as(api, credential).get("/usage?by=user", follow_redirects=False)
        assert page.status_code == 303 and page.headers["location"].startswith("/login")
        assert "Totals by user" not in page.text
    session = _login(api, api.tokens["ada"])
    assert _as(api, session).get("/v1/whoami").json()["user"] == "ada"
    assert "Totals by user" in _as(api, session).get("/usage?by=user").text


def test_logout_revokes_the_session_only(api: ApiWorld) -> None:
    cookie = _login(api, api.tokens["ada"])
    refused = _as(api, cookie).post("/logout", data={"csrf": "nope"}, follow_redirects=False)
    assert refused.status_code == 403
    assert _as(api, cookie).get("/v1/whoami").status_code == 200
    # Another site's form arrives without the cookie (SameSite=Lax): refused, and the cookie
    # is left alone; clearing it logged the visitor out of a session that went on (review 11)
    foreign = _as(api, None).post(
        "/logout", data={}, headers={"Sec-Fetch-Site": "cross-site"}, follow_redirects=False
    )
    assert foreign.status_code == 403 and "set-cookie" not in foreign.headers
    token = _csrf(api, cookie)
    out = _as(api, cookie).post("/logout", data={"csrf": token}, follow_redirects=False)
    assert out.status_code == 303 and out.headers["location"].startswith("/login")
    assert _as(api, cookie).get("/v1/whoami").status_code == 401
    # the API token the browser logged in with still works
    assert api.client.get("/v1/whoami", headers=api.auth("ada")).status_code == 200
    with _session(api) as s:  # an API token sent as a cookie is never revoked by a logout
        assert not logins.log_out(s, api.tokens["ada"], now=NOW + 100)


def test_pages_follow_the_apis_roles_and_tenants(api: ApiWorld) -> None:
    job_id = api.client.post("/v1/jobs", json=SPEC, headers=api.auth("ada")).json()["id"]
    jars = {user: _login(api, api.tokens[user]) for user in ("ada", "vic", "root", "gus")}
    page = _as(api, jars["ada"]).get(f"/jobs/{job_id}")
    assert page.status_code == 200 and 'id="cancel"' in page.text
    viewer = _as(api, jars["vic"]).get(f"/jobs/{job_id}")
    assert viewer.status_code == 200 and 'id="cancel"' not in viewer.text
    other = _as(api, jars["gus"]).get(f"/jobs/{job_id}")
    assert other.status_code == 404 and job_id in other.text  # "job '...' not found"
    assert job_id not in _as(api, jars["gus"]).get("/jobs").text
    assert job_id in _as(api, jars["vic"]).get("/jobs").text
    assert _as(api, jars["ada"]).get("/admin").status_code == 403
    admin = _as(api, jars["root"]).get("/admin")
    assert admin.status_code == 200 and "vic" in admin.text and "gus" not in admin.text
    for path in ("/", "/queues", "/usage", "/tokens", "/submit", "/simulations"):
        answer = _as(api, jars["ada"]).get(path)
        assert answer.status_code == 200, path
        assert answer.headers["content-security-policy"].startswith("default-src 'none'")
    anonymous = _as(api, None).get("/queues", follow_redirects=False)
    assert anonymous.status_code == 303 and anonymous.headers["location"].startswith("/login")


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("state=BOGUS", "state"),
        ("user=a%00b", "user"),
        ("sort=size", "sort"),
        ("queue=" + "q" * 200, "queue"),
        ("user=nobody", "user"),  # no such user: refused by the service, not the query's form
        ("queue=sales", "queue"),  # another tenant's queue: as one that does not exist
    ],
)
def test_refused_filters_name_their_field_on_the_page(
    api: ApiWorld, query: str, field: str
) -> None:
    jar = {SESSION_COOKIE: _login(api, api.tokens["ada"])}
    page = _as(api, jar[SESSION_COOKIE]).get(f"/jobs?{query}")
    assert page.status_code == 422
    assert "Traceback" not in page.text
    api_answer = api.client.get(f"/v1/jobs?{query}", headers=api.auth("ada")).json()["error"]
    assert api_answer["field"] == field
    if field in ("state", "user"):  # shown next to the field, in the API's words
        assert f'id="{field}-error"' in page.text
    assert api_answer["message"].replace("'", "&#39;").split(",")[0] in page.text


def test_the_jobs_list_sorts_by_the_column_asked(api: ApiWorld) -> None:
    for gpus in (1, 4, 2):
        spec = SPEC | {"gpus": gpus, "name": f"g{gpus}"}
        assert api.client.post("/v1/jobs", json=spec, headers=api.auth("ada")).status_code == 201
    listed = api.client.get("/v1/jobs?sort=-gpus", headers=api.auth("ada")).json()["jobs"]
    assert [j["gpus"] for j in listed] == [4, 2, 1]
    by_name = api.client.get("/v1/jobs?sort=name", headers=api.auth("ada")).json()["jobs"]
    assert [j["name"] for j in by_name] == ["g1", "g2", "g4"]
    by_user = api.client.get("/v1/jobs?sort=user", headers=api.auth("ada")).json()["jobs"]
    assert len(by_user) == 3
    bad = api.client.get("/v1/jobs?sort=size", headers=api.auth("ada")).json()["error"]
    assert bad["field"] == "sort" and "one of id, name" in bad["message"]


def test_usage_over_time_adds_up_to_the_totals(api: ApiWorld) -> None:
    with _session(api) as s:
        ids = _ids(s)
        s.add_all([
            UsageRecord(job_id="j-a", tenant_id=ids["acme"], user_id=ids["ada"],
                        queue_id=ids["research"], attempt=0,
                        started_at=NOW - 7200, ended_at=NOW - 3600, gpus=2, cpus=1,
                        memory_gb=1, outcome="SUCCEEDED"),
            UsageRecord(job_id="j-b", tenant_id=ids["globex"], user_id=ids["gus"],
                        queue_id=ids["sales"], attempt=0,
                        started_at=NOW - 5000, ended_at=NOW - 100, gpus=4, cpus=1,
                        memory_gb=1, outcome="SUCCEEDED"),
        ])  # fmt: skip
        s.commit()
        series = usage.series(s, tenant_id=ids["acme"], since=NOW - 10_800, until=NOW, buckets=6,
                              by="queue", now=NOW)  # fmt: skip
        assert list(series.gpu_hours) == ["research"]  # the caller's tenant only, by name
        assert sum(series.gpu_hours["research"]) == pytest.approx(2.0)
        assert sum(series.cluster_gpu_hours) == pytest.approx(2.0 + 4 * 4900 / 3600)
        totals = usage.usage(
            s, tenant_id=ids["acme"], since=NOW - 10_800, until=NOW, by="queue", now=NOW
        )
        assert totals[0].gpu_seconds / 3600 == pytest.approx(2.0)
        with pytest.raises(ApiError):
            usage.series(s, tenant_id=ids["acme"], since=0, until=1, buckets=2, by="job", now=NOW)


def test_reports_are_kept_over_time_at_a_bounded_rate(api: ApiWorld) -> None:
    job_id = api.client.post("/v1/jobs", json=SPEC, headers=api.auth("ada")).json()["id"]
    with _session(api) as s:
        job = s.get(Job, job_id)
        assert job is not None
        job.placement = [{"node": "n0", "devices": [0, 1]}]
        for state in (JobState.STARTING, JobState.RUNNING):
            transition(s, job, state, reason="test", now=NOW)
        s.commit()
    base = {"attempt": 0, "gpus": 2, "nodes": 1, "batch": 64, "step_time": 0.5, "steps": 10,
            "step": 10, "samples": 640}  # fmt: skip
    for i, world in enumerate((2, 2, 2, 4)):
        body = base | {"world_size": world, "step": 10 * (i + 1)}
        answer = api.client.post(f"/v1/jobs/{job_id}/reports", json=body, headers=api.auth("ada"))
        assert answer.status_code == 202, answer.text
    with _session(api) as s:
        kept = reports.history(s, job_id)
        assert [r.world_size for r in kept] == [2, 4]  # one per 30 s, and one per change
        assert s.scalar(select(JobReportSample.id).limit(1)) is not None


def test_simulation_reports_serve_their_own_files_only(tmp_path: Path) -> None:
    report = tmp_path / "week1"
    report.mkdir()
    (report / "summary.json").write_text(json.dumps({"fifo": {"jobs": 3, "finished": 3}}))
    (report / "utilisation.png").write_bytes(b"\x89PNG")
    (tmp_path / "secret.png").write_bytes(b"no")
    found = simreports.find((tmp_path,), "week1")
    assert found is not None and found.runs == ["fifo"]
    assert simreports.file(found, "utilisation.png") == report / "utilisation.png"
    for name in ("../secret.png", "summary.json", "report.md", "/etc/passwd"):
        assert simreports.file(found, name) is None
    assert simreports.find((tmp_path,), "..") is None
    details = simreports.details(found)
    assert details["header"][0] == "policy" and details["rows"][0][0] == "fifo"


def test_trainyard_console_prints_a_link_that_logs_in(api: ApiWorld, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from trainyard.cli.main import app

    db = api.engine.url.render_as_string(hide_password=False)
    argv = ["console", "--home", str(tmp_path), "--db", db]
    down = CliRunner().invoke(app, [*argv, "--user", "vic"])
    assert down.exit_code == 2 and "no server is running" in down.output
    (tmp_path / "server.json").write_text(json.dumps({"url": "http://127.0.0.1:1"}))
    done = CliRunner().invoke(app, [*argv, "--user", "vic"])
    assert done.exit_code == 0, done.output
    code = re.search(r"http://127\.0\.0\.1:1/\?token=(tyc_\S+)", done.output)
    assert code, done.output
    cookie = _login(api, code.group(1))
    assert _as(api, cookie).get("/v1/whoami").json()["user"] == "vic"
    unknown = CliRunner().invoke(app, [*argv, "--user", "nobody"])
    assert unknown.exit_code == 2 and "--user" in unknown.output


def test_charts_cover_their_data_and_say_what_they_show() -> None:
    from trainyard.server.console.charts import Series, line_chart, nice_ticks, stacked_chart

    for low, high in ((0, 4200), (0.0003, 0.08), (5, 5), (0, 1)):
        ticks = nice_ticks(low, high)
        assert ticks[0] <= low and ticks[-1] >= high and len(ticks) <= 12
    chart = str(line_chart("Rate <b>", [Series("a&b", [(0.0, 1.0), (60.0, 3.0)])], y_unit="x/s"))
    assert 'role="img"' in chart and "Rate &lt;b&gt;" in chart and "a&amp;b" in chart
    assert "<table>" in chart  # the numbers, for screen readers
    assert "nothing reported" in str(line_chart("Empty", [Series("a", [])]))
    stacked = str(stacked_chart("Use", [Series("q1", [(0.0, 1.0), (1.0, 2.0)]),
                                        Series("q2", [(0.0, 0.5), (1.0, 0.5)])]))  # fmt: skip
    assert stacked.count("<polygon") == 2


def test_charts_draw_whatever_finite_values_a_job_reports() -> None:
    """A job's loss is any finite number: 1e16 and 1e16 + 2 once kept a server thread in an
    endless loop (a tick step below the values' precision), a loss of 1e20 raised a math
    domain error (a flat range widened by 1, which is nothing there), +-1e308 an overflow;
    a chart over more than 8 weeks found no tick unit."""
    from trainyard.server.console.charts import (
        Series,
        bar_chart,
        line_chart,
        nice_ticks,
        stacked_chart,
    )

    ranges = [(1e16, 1e16 + 2), (1e20, 1e20), (-1e308, 1e308), (0.0, 1e-300), (5e-324, 1e-323)]
    for low, high in ranges:
        ticks = nice_ticks(low, high)
        assert 2 <= len(ticks) <= 21 and all(math.isfinite(t) for t in ticks), (low, high)
    for ys in ([1e16, 1e16 + 2], [1e20], [-1e308, 1e308], [1e300, 1e300]):
        points = [(float(60 * i), y) for i, y in enumerate(ys)]
        chart = str(line_chart("Loss", [Series("loss", points)], y_min=None))
        assert "<polyline" in chart and "nan" not in chart and "inf" not in chart, ys
    weeks = [(0.0, 1.0), (100 * 7 * 86400.0, 2.0)]  # 100 weeks of a running job
    assert "<polyline" in str(line_chart("Rate", [Series("a", weeks)]))
    huge = [Series(n, [(0.0, 1e308), (60.0, 1e308)]) for n in ("a", "b")]  # sum: inf
    assert str(stacked_chart("Use", huge)).count("<polygon") == 2
    assert str(bar_chart("GPUs", [("a", 1e308), ("b", 1.0)])).count("<rect") == 2


def test_the_checkpoint_list_shows_the_jobs_own_files_not_what_its_links_name(
    tmp_path: Path,
) -> None:
    """The server lists checkpoints as root: a job's link to a file only root may read
    showed that file's size and modification time (and whether it exists) on the page."""
    from trainyard.server.console.views import checkpoints
    from trainyard.server.services.logs import JobLogs

    secret = tmp_path / "root-only"
    secret.write_bytes(b"s" * 123)
    directory = tmp_path / "runs" / "jobs" / "j-1" / "checkpoints"
    directory.mkdir(parents=True)
    (directory / "step-100.pt").write_bytes(b"w" * 10)
    (directory / "shadow").symlink_to(secret)
    (directory / "gone").symlink_to(tmp_path / "missing")
    (directory / "sub").symlink_to(tmp_path)
    listed = checkpoints(JobLogs(tmp_path / "runs"), "j-1")
    assert [(c.name, c.bytes) for c in listed] == [("step-100.pt", 10)]


def test_admin_gc_removes_expired_login_codes(api: ApiWorld, tmp_path: Path) -> None:
    from trainyard.server.db import LoginCode
    from trainyard.server.services import retention

    with _session(api) as s:
        logins.issue_code(s, "ada", now=NOW - 100 * 86400)
        logins.issue_code(s, "ada", now=NOW)
        s.commit()
        report = retention.collect(s, tmp_path, now=NOW, runs_age_s=1e9, checkpoints_age_s=1e9,
                                   tokens_age_s=30 * 86400)  # fmt: skip
        s.commit()
        assert report.tokens == 1
        assert len(list(s.scalars(select(LoginCode)))) == 1


def test_the_jobs_page_lists_an_arrays_members(api: ApiWorld) -> None:
    made = api.client.post("/v1/jobs", json=SPEC | {"array": "0-2"}, headers=api.auth("ada"))
    assert made.status_code == 201, made.text
    single = api.client.post("/v1/jobs", json=SPEC, headers=api.auth("ada")).json()["id"]
    page = _as(api, _login(api, api.tokens["ada"])).get(f"/jobs?array={made.json()['id']}")
    assert page.status_code == 200
    assert all(member in page.text for member in made.json()["array_ids"])
    assert single not in page.text


def test_a_running_job_not_grown_shows_why_on_its_page(api: ApiWorld) -> None:
    # The note the scheduling loop stores (loop/elastic.py) is shown while the job runs,
    # escaped like every other text, and not once it has stopped.
    job_id = api.client.post("/v1/jobs", json=SPEC, headers=api.auth("ada")).json()["id"]
    with _session(api) as s:
        job = s.get(Job, job_id)
        assert job is not None
        job.state, job.placement, job.started_at = JobState.RUNNING, [], NOW
        job.resize_note = "+30% goodput at 4 GPUs does not yet repay a restart <now>"
        job.resize_note_until = NOW + 600
        s.commit()
    cookie = _login(api, api.tokens["ada"])
    page = _as(api, cookie).get(f"/jobs/{job_id}")
    assert page.status_code == 200 and 'id="not-grown"' in page.text
    assert "does not yet repay a restart &lt;now&gt;" in page.text and "until" in page.text
    detail = api.client.get(f"/v1/jobs/{job_id}", headers=api.auth("ada")).json()
    assert detail["not_grown"].startswith("+30% goodput") and detail["not_grown_until"]
    with _session(api) as s:
        job = s.get(Job, job_id)
        assert job is not None
        transition(s, job, JobState.SUCCEEDED, reason="done", now=NOW + 10)
        s.commit()
    assert 'id="not-grown"' not in _as(api, cookie).get(f"/jobs/{job_id}").text
    assert api.client.get(f"/v1/jobs/{job_id}", headers=api.auth("ada")).json()["not_grown"] is None


def test_the_tokens_page_is_the_callers_own_and_metrics_are_linked_for_the_operator(
    api: ApiWorld,
) -> None:
    # Outside review 11: an admin's "Your API tokens" listed the whole tenant's (F8), every
    # role's footer linked /metrics, a 403 for all but the operator (F9), and a CPU-only
    # job's placement read "vm: GPU " (F6).
    cookie = _login(api, api.tokens["root"])
    listed = api.client.get("/v1/tokens", headers=api.auth("root")).json()["tokens"]
    mine = {t["token_id"] for t in listed if t["user"] == "root"}
    theirs = {t["token_id"] for t in listed if t["user"] != "root"}
    assert mine and theirs  # an admin's API lists the tenant's; the page its own
    page = _as(api, cookie).get("/tokens").text
    assert all(t in page for t in mine) and not any(t in page for t in theirs)
    assert 'href="/metrics"' not in page  # root is acme's admin, not the operator's
    job_id = api.client.post("/v1/jobs", json={**SPEC, "gpus": 0}, headers=api.auth("ada"))
    with _session(api) as s:
        job = s.get(Job, job_id.json()["id"])
        assert job is not None
        job.state, job.placement, job.started_at = JobState.RUNNING, [], NOW
        job.placement = [{"node": "n0", "devices": []}]
        s.commit()
    shown = _as(api, _login(api, api.tokens["ada"])).get(f"/jobs/{job.id}").text
    assert "n0: no GPU (CPU only)" in shown and "n0: GPU <" not in shown
