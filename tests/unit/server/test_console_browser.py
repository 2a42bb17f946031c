"""The web console in a real browser (Debian's chromium through Playwright), against a real
`trainyard up` process (`live_server.Cluster`: 4 virtual GPUs, the local executor, real job
processes) on SQLite and on PostgreSQL.

One server and one browser per backend for the whole module; each test opens a fresh
browser context (its own cookies) and cancels the jobs it started. Tenants: `default` (the
bootstrapped admin, logged in by the one-time link `trainyard up` printed), `acme` (ada, a
member; vic, a viewer) and `globex` (gus, a member). Nothing waits on a fixed sleep: the
browser waits for what the page shows (Playwright's `expect`), the API for the job's state.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from console_browser import close, follow_stream, launch, other_site
from live_server import Cluster, LiveServer, wait_until

from trainyard.server.db import make_engine, make_session_factory
from trainyard.server.services import admin

pytestmark = pytest.mark.slow
WAIT_MS = 90_000  # the longest the browser waits for something to show (a busy CI machine)
TICKER = (
    "import time\n"
    "for i in range(100000):\n"
    "    print(f'tick {i}', flush=True)\n"
    "    time.sleep(0.3)\n"
)


def ticker(name: str, gpus: int = 1) -> dict[str, Any]:
    return {"name": name, "command": ["python", "-c", TICKER], "workers": 1, "gpus": gpus,
            "cpus": 0.1, "memory_gb": 0.1, "queue": "default"}  # fmt: skip


@dataclass
class Site:
    """The server of this module, its users' API tokens and the jobs the tests started."""

    cluster: Cluster
    server: LiveServer
    tokens: dict[str, str]
    jobs: list[tuple[str, str]] = field(default_factory=list)  # (user, job id)

    @property
    def url(self) -> str:
        return self.server.url

    def api(self, user: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30,
                            headers={"Authorization": f"Bearer {self.tokens[user]}"})  # fmt: skip

    def submit(self, user: str, spec: dict[str, Any]) -> str:
        with self.api(user) as client:
            answer = client.post("/v1/jobs", json=spec)
        assert answer.status_code == 201, answer.text
        job_id = str(answer.json()["id"])
        self.jobs.append((user, job_id))
        return job_id

    def state(self, user: str, job_id: str) -> str:
        with self.api(user) as client:
            return str(client.get(f"/v1/jobs/{job_id}").json()["state"])

    def wait_state(self, user: str, job_id: str, *states: str) -> str:
        return str(wait_until(
            f"job {job_id} to be {'/'.join(states)}",
            lambda: (s := self.state(user, job_id)) in states and s, 120, self.cluster.output,
        ))  # fmt: skip

    def cancel_all(self) -> None:
        for user, job_id in self.jobs:
            with self.api(user) as client:
                client.post(f"/v1/jobs/{job_id}/cancel")
        self.jobs.clear()

    def login(self, browser: Any, user: str) -> Any:
        """A fresh browser context logged in as `user` by a link with its API token."""
        context = browser.new_context(viewport={"width": 1366, "height": 900})
        page = context.new_page()
        page.goto(f"{self.url}/?token={self.tokens[user]}")
        assert "token=" not in page.url
        return page


def _database(request: pytest.FixtureRequest, tmp: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp / 'trainyard.db'}"
        return
    pg = request.getfixturevalue("pg_server")
    name = f"console_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield pg.url(name)
    finally:
        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _seed(db_url: str) -> dict[str, str]:
    """Tenants acme (ada member, vic viewer) and globex (gus member), and their tokens."""
    engine = make_engine(db_url)
    now = time.time()
    tokens = {}
    try:
        with make_session_factory(engine)() as s:
            admin.create_tenant(s, "acme", now=now)
            admin.create_tenant(s, "globex", now=now)
            for user, tenant, role in (("ada", "acme", "member"), ("vic", "acme", "viewer"),
                                       ("gus", "globex", "member")):  # fmt: skip
                admin.create_user(s, tenant, user, role, now=now)
                tokens[user] = admin.issue_user_token(s, user, now=now, name="test").token
            s.commit()
    finally:
        engine.dispose()
    return tokens


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def site(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp(f"console-{request.param}")
    for db_url in _database(request, tmp):
        cluster = Cluster(tmp, db_url, virtual_gpus=4, args=("--job-user", "server"))
        try:
            server = cluster.start()
            tokens = _seed(db_url)
            tokens["admin"] = (cluster.home / "admin-token").read_text().strip()
            found = Site(cluster, server, tokens)
            yield found
            found.cancel_all()
        finally:
            cluster.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    playwright, chromium = launch()
    try:
        yield chromium
    finally:
        close(playwright, chromium)


@pytest.fixture
def jobs_cancelled(site: Site) -> Iterator[Site]:
    try:
        yield site
    finally:
        site.cancel_all()


def _expect() -> Any:
    from playwright.sync_api import expect

    return expect


def test_the_printed_link_logs_in_once_drops_the_token_and_sets_a_session_cookie(
    site: Site, browser: Any
) -> None:
    link = re.search(r"console: (\S+)", site.cluster.output())
    assert link, site.cluster.output()
    context = browser.new_context()
    page = context.new_page()
    page.goto(link.group(1))
    assert page.url == f"{site.url}/", "the login code must leave the address"
    _expect()(page.locator("h1")).to_have_text("Cluster")
    _expect()(page.locator(".whoami")).to_contain_text("admin")
    cookies = {c["name"]: c for c in context.cookies()}
    session = cookies["trainyard_session"]
    assert session["httpOnly"] and session["sameSite"] == "Lax"
    assert session["value"] not in link.group(1)  # a session of its own, not the code
    # the code was spent: the same link again does not log another browser in
    other = browser.new_context().new_page()
    answer = other.goto(link.group(1))
    assert answer is not None and answer.status == 401
    _expect()(other.locator("#login-error")).to_contain_text("already used")
    assert "trainyard_session" not in {c["name"] for c in other.context.cookies()}
    # ... and a bad token neither (no traceback: the login page says why)
    answer = other.goto(f"{site.url}/jobs?token=ty_000000000000_nope")
    assert answer is not None and answer.status == 401
    _expect()(other.locator("#login-error")).to_contain_text("invalid")
    other.context.close()
    context.close()


def test_the_cluster_map_shows_the_virtual_gpus_and_jobs_live(
    jobs_cancelled: Site, browser: Any
) -> None:
    site = jobs_cancelled
    page = site.login(browser, "admin")
    expect = _expect()
    expect(page.locator(".gpu")).to_have_count(4)
    expect(page.locator(".gpu.virtual")).to_have_count(4)
    expect(page.locator(".badge.virtual").first).to_be_visible()
    # a job started after the page was opened appears on it, without a reload
    job_id = site.submit("admin", ticker("map-pair", gpus=2))
    cells = page.locator(f'a.gpu.busy[data-job="{job_id}"]')
    expect(cells).to_have_count(2, timeout=WAIT_MS)
    expect(cells.first).to_contain_text("map-pair")
    label = cells.first.get_attribute("aria-label") or ""
    assert job_id in label and "queue default" in label and "since" in label
    cells.first.focus()
    expect(cells.first.locator(".tip")).to_be_visible()
    expect(page.locator(".legend-jobs")).to_contain_text(job_id)
    # and leaves it when it ends, still without a reload
    with site.api("admin") as client:
        assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    expect(cells).to_have_count(0, timeout=WAIT_MS)
    page.context.close()


def test_a_jobs_log_appears_and_grows_without_a_reload(jobs_cancelled: Site, browser: Any) -> None:
    site = jobs_cancelled
    job_id = site.submit("ada", ticker("logger"))
    page = site.login(browser, "ada")
    page.goto(f"{site.url}/jobs/{job_id}")
    expect = _expect()
    log = page.locator("#log")
    expect(log).to_contain_text("tick 2", timeout=WAIT_MS)
    seen = int(re.findall(r"tick (\d+)", log.inner_text())[-1])
    expect(log).to_contain_text(f"tick {seen + 3}", timeout=WAIT_MS)  # live: more lines came
    expect(page.locator("#job_head")).to_contain_text("RUNNING", timeout=WAIT_MS)
    page.context.close()


def test_terminal_colours_are_taken_out_of_the_log_view(jobs_cancelled: Site, browser: Any) -> None:
    # Coloured output (tqdm, rich, loggers) showed its raw control sequences (review 11, F10).
    site = jobs_cancelled
    code = (
        "import time\n"
        "print('\\x1b[31mRED\\x1b[0m \\x1b]0;title\\x07done', flush=True)\n"
        "time.sleep(600)\n"
    )
    spec = {**ticker("colours"), "command": ["python", "-c", code]}
    job_id = site.submit("ada", spec)
    page = site.login(browser, "ada")
    page.goto(f"{site.url}/jobs/{job_id}")
    log = page.locator("#log")
    _expect()(log).to_contain_text("RED done", timeout=WAIT_MS)
    assert "\x1b" not in log.inner_text() and "title" not in log.inner_text()
    page.context.close()


def test_a_member_cancels_a_job_and_a_viewer_may_not(jobs_cancelled: Site, browser: Any) -> None:
    site = jobs_cancelled
    expect = _expect()
    mine = site.submit("ada", ticker("to-cancel"))
    site.wait_state("ada", mine, "RUNNING")
    # the viewer sees the job but no cancel button, and a forged cancel (with the page's
    # own CSRF token) is refused by the API with its reason
    viewer = site.login(browser, "vic")
    viewer.goto(f"{site.url}/jobs/{mine}")
    expect(viewer.locator("#job_head")).to_contain_text("to-cancel")
    expect(viewer.locator("#cancel")).to_have_count(0)
    answer = viewer.evaluate(
        """async (id) => {
            const csrf = document.querySelector('meta[name="csrf-token"]').content;
            const r = await fetch(`/v1/jobs/${id}/cancel`, {method: "POST",
                                  headers: {"X-CSRF-Token": csrf}});
            return {status: r.status, body: await r.json()};
        }""",
        mine,
    )
    assert answer["status"] == 403, answer
    assert "role viewer may not cancel jobs" in answer["body"]["error"]["message"]
    assert site.state("ada", mine) == "RUNNING"
    viewer.context.close()
    # the member cancels it from the job page; the page follows it to CANCELLED
    member = site.login(browser, "ada")
    member.goto(f"{site.url}/jobs/{mine}")
    member.on("dialog", lambda dialog: dialog.accept())
    member.locator("#cancel").click()
    expect(member.locator("#job_head")).to_contain_text("CANCELLED", timeout=WAIT_MS)
    assert site.state("ada", mine) == "CANCELLED"
    member.context.close()


def test_another_tenants_job_is_neither_listed_nor_reachable(
    jobs_cancelled: Site, browser: Any
) -> None:
    site = jobs_cancelled
    expect = _expect()
    theirs = site.submit("ada", ticker("acme-secret"))
    site.wait_state("ada", theirs, "RUNNING")
    page = site.login(browser, "gus")
    page.goto(f"{site.url}/jobs")
    expect(page.locator("#jobs_table")).to_be_visible()
    assert theirs not in page.content() and "acme-secret" not in page.content()
    answer = page.goto(f"{site.url}/jobs/{theirs}")
    assert answer is not None and answer.status == 404
    expect(page.locator("h1")).to_have_text("Not found")
    # on the cluster map the GPU is taken, by "another tenant": no id, no name
    page.goto(f"{site.url}/")
    expect(page.locator(".gpu.other")).to_have_count(1, timeout=WAIT_MS)
    assert theirs not in page.content() and "acme-secret" not in page.content()
    # nor is its log, through the console's stream or the API
    answer = page.goto(f"{site.url}/v1/jobs/{theirs}/logs")
    assert answer is not None and answer.status == 404
    page.context.close()


def test_bad_input_in_forms_shows_the_apis_error_by_its_field(site: Site, browser: Any) -> None:
    expect = _expect()
    page = site.login(browser, "ada")
    answer = page.goto(f"{site.url}/jobs?state=BOGUS&user=ada")
    assert answer is not None and answer.status == 422
    expect(page.locator("#state-error")).to_contain_text("PENDING")  # pydantic's enum message
    expect(page.locator("#f-user")).to_have_value("ada")
    # the submit form: the API refuses gpus -1 and names the field; nothing is stored
    page.goto(f"{site.url}/submit")
    page.fill("#s-name", "bad-gpus")
    page.fill("#s-command", "python -c pass")
    page.fill("#s-gpus", "-1")
    page.locator("form.submit button[type=submit]").click()
    error = page.locator('[data-error-for="gpus"]')
    expect(error).to_be_visible(timeout=WAIT_MS)
    expect(error).to_contain_text(">= 0")
    expect(page.locator("#s-gpus")).to_have_attribute("aria-invalid", "true")
    with site.api("ada") as client:
        names = [j["name"] for j in client.get("/v1/jobs").json()["jobs"]]
    assert "bad-gpus" not in names
    # the token form: a lifetime that is not a number
    page.goto(f"{site.url}/tokens")
    page.fill("#t-exp", "soon")
    page.locator("form.create-token button[type=submit]").click()
    expect(page.locator('[data-error-for="expires_in_s"]')).to_be_visible(timeout=WAIT_MS)
    page.context.close()


def test_logout_ends_the_session(site: Site, browser: Any) -> None:
    expect = _expect()
    page = site.login(browser, "ada")
    cookie = next(c for c in page.context.cookies() if c["name"] == "trainyard_session")
    page.locator("form[action='/logout'] button").click()
    expect(page.locator("h1")).to_have_text("Log in to trainyard")
    assert "trainyard_session" not in {c["name"] for c in page.context.cookies()}
    # the session is revoked on the server, not only forgotten by the browser
    answer = httpx.get(f"{site.url}/v1/whoami", cookies={"trainyard_session": cookie["value"]})
    assert answer.status_code == 401
    page.goto(f"{site.url}/queues")
    expect(page.locator("h1")).to_have_text("Log in to trainyard")
    page.context.close()


def test_a_logged_out_session_ends_its_open_streams(jobs_cancelled: Site, browser: Any) -> None:
    # A page's live stream and a job's log stream opened with a session go on only while the
    # session may read: Log out (elsewhere) ends both within seconds (outside review 11, F1:
    # they went on for minutes and showed jobs submitted after the revoke).
    site = jobs_cancelled
    job_id = site.submit("ada", ticker("revoked-stream"))
    site.wait_state("ada", job_id, "RUNNING")
    page = site.login(browser, "ada")
    cookie = next(c for c in page.context.cookies() if c["name"] == "trainyard_session")
    streams = {
        "page": f"{site.url}/jobs",
        "log": f"{site.url}/jobs/{job_id}/log?rank=0",
    }
    seen: dict[str, list[str]] = {name: [] for name in streams}
    started = {name: threading.Event() for name in streams}
    threads = {
        name: threading.Thread(
            target=follow_stream,
            args=(url, cookie["value"], seen[name], started[name]),
            daemon=True,
        )
        for name, url in streams.items()
    }
    for thread in threads.values():
        thread.start()
    for name, event in started.items():
        assert event.wait(60), f"the {name} stream sent nothing: {seen[name][-5:]}"
    page.goto(f"{site.url}/queues")
    page.locator("form[action='/logout'] button").click()
    _expect()(page.locator("h1")).to_have_text("Log in to trainyard")
    ended = time.monotonic()
    for name, thread in threads.items():
        thread.join(45)
        assert not thread.is_alive(), f"the {name} stream still runs: {seen[name][-5:]}"
        assert "event: gone" in seen[name], seen[name][-5:]
        text = "\n".join(seen[name][seen[name].index("event: gone") :])
        assert "your session has ended" in text
    # the token cache keeps a principal 10 s, and a stream checks every 5 s
    assert time.monotonic() - ended < 30
    page.context.close()


def test_a_forged_write_is_refused(jobs_cancelled: Site, browser: Any) -> None:
    site = jobs_cancelled
    job_id = site.submit("ada", ticker("target"))
    site.wait_state("ada", job_id, "RUNNING")
    page = site.login(browser, "ada")
    # another site's form posting to the console with the browser's cookie
    form = (f'<form id="f" method="post" action="{site.url}/v1/jobs/{job_id}/cancel"></form>'
            '<script>document.getElementById("f").submit()</script>')  # fmt: skip
    with other_site(form) as evil, page.expect_response(re.compile("/cancel$")) as caught:
        page.goto(evil)
    assert caught.value.status == 403
    assert "cross-origin" in json.loads(caught.value.text())["error"]["message"]
    # a script of the console's own origin without the page's CSRF token
    page.goto(f"{site.url}/jobs")
    status = page.evaluate(
        "async (id) => (await fetch(`/v1/jobs/${id}/cancel`, {method: 'POST'})).status", job_id
    )
    assert status == 403
    assert site.state("ada", job_id) == "RUNNING"
    page.context.close()


def test_another_sites_link_and_logout_change_nothing(site: Site, browser: Any) -> None:
    # Outside review 11: a login link another site opened is not followed and its token
    # leaves the address at once (F4); another site's logout form neither logs the visitor
    # out nor clears the cookie of a session that goes on (F2).
    expect = _expect()
    page = site.login(browser, "ada")
    link = f'<a id="go" href="{site.url}/?token={site.tokens["gus"]}">open</a>'
    with other_site(link) as evil:
        page.goto(evil)
        page.locator("#go").click()
        expect(page.locator(".notice")).to_contain_text("opened by another site")
        page.wait_for_function("() => !window.location.search.includes('token')")
    assert site.tokens["gus"] not in page.url
    form = (f'<form id="f" method="post" action="{site.url}/logout"></form>'
            '<script>document.getElementById("f").submit()</script>')  # fmt: skip
    with other_site(form) as evil, page.expect_response(re.compile("/logout$")) as caught:
        page.goto(evil)
    assert caught.value.status == 403
    page.goto(f"{site.url}/tokens")
    expect(page.locator("h1")).not_to_have_text("Log in to trainyard")
    assert "trainyard_session" in {c["name"] for c in page.context.cookies()}
    page.context.close()


def test_make_ups_printed_link_shows_the_example_jobs_on_the_virtual_gpus(
    browser: Any, tmp_path: Path
) -> None:
    """Acceptance 1 of issue 17: `trainyard up --virtual-gpus 4 --submit <the examples>`, as
    `make up` runs it; the link it prints shows the 4 virtual GPUs and the examples on them
    as they run (the page is opened as soon as the link is printed and follows them live)."""
    from test_up_e2e import Up

    up = Up(tmp_path, f"sqlite:///{tmp_path / 'trainyard.db'}", tmp_path / "home")
    try:
        link = wait_until("the console link", lambda: re.search(r"console: (\S+)", up.output()),
                          60, up.output)  # fmt: skip
        base = link.group(1).split("/?", 1)[0]

        def serving() -> bool:  # the banner comes just before the API listens
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(f"{base}/healthz", timeout=2).status_code == 200
            return False

        wait_until("the API", serving, 60, up.output)
        page = browser.new_context(viewport={"width": 1366, "height": 900}).new_page()
        page.goto(link.group(1))
        expect = _expect()
        expect(page.locator(".gpu.virtual")).to_have_count(4)
        ddp = page.locator("a.gpu.busy", has_text="ddp-mlp")
        expect(ddp).to_have_count(2, timeout=WAIT_MS)  # the 2-worker DDP example, live
        expect(page.locator(".legend-jobs")).to_contain_text("ddp-mlp")
        page.context.close()
    finally:
        up.stop()
        print(up.output())
