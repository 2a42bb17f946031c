"""The web console at scale: page loads and live updates with 10,000 queued jobs (issue 17).

A database (SQLite in a temporary directory, or `--db URL`) holds the bootstrapped admin,
`--nodes` nodes of 8 GPUs each (every GPU busy with a running job) and `--queued` PENDING
jobs with pending reasons; the API's app (console included) is served by uvicorn on this
machine. Then, logged in with the session cookie as a browser is:

- `pages`: each page's server time (its `Server-Timing: render`, the view built from the
  database and the template rendered) and the client's wall time per request, over
  `--repeat` requests (p50, p95, max);
- `updates`: the server time of one live update of each live page (the page built again and
  its live blocks rendered, as `console/live.py` does after every change), and the
  watcher's fingerprint query; and end to end: a job submitted through the API until the
  cluster page's event stream delivers the changed block (p50 over `--repeat`);
- `browser` (when Debian's chromium and Playwright are there): the first render of each
  page in a real browser, navigation start to the load event (p50 of `--repeat`).

Prints one JSON document. Usage: python bench/console.py [--queued 10000] [--repeat 20]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from sqlalchemy import insert

from trainyard.exec.procfs import free_port
from trainyard.server.api.app import create_app
from trainyard.server.bootstrap import bootstrap
from trainyard.server.console import live
from trainyard.server.console.web import Page, build_values, render_block
from trainyard.server.db import (
    Device,
    Job,
    JobEvent,
    JobState,
    Node,
    Queue,
    User,
    init_db,
    make_session_factory,
)
from trainyard.stats import percentile

PAGES = ["/", "/queues", "/jobs", "/jobs?state=PENDING&sort=-gpus&page=3", "/usage", "/tokens"]
LIVE = {"/": ("cluster.html", ("map", "summary")), "/jobs": ("jobs.html", ("jobs_table", "counts")),
        "/queues": ("queues.html", ("queues",))}  # fmt: skip


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(percentile(values, 50), 2),
        "p95": round(percentile(values, 95), 2),
        "max": round(max(values), 2),
        "n": len(values),
    }


def populate(db: str, queued: int, nodes: int) -> tuple[Any, str]:
    """The database: admin, nodes busy with running jobs, `queued` pending jobs."""
    engine = init_db(db)
    sessions = make_session_factory(engine)
    now = time.time()
    token = bootstrap(sessions, now=now).admin_token
    assert token is not None, "an empty database is needed"
    with sessions() as s:
        admin = s.query(User).one()
        queue = s.query(Queue).one()
        for n in range(nodes):
            node = Node(name=f"node-{n:03d}", cpus=64, memory_gb=512, virtual=True,
                        registered_at=now, last_heartbeat_at=now)  # fmt: skip
            node.devices = [Device(index=i, gpu_type="H100", memory_gb=80, virtual=True)
                            for i in range(8)]  # fmt: skip
            s.add(node)
        s.flush()
        rows, events = [], []
        for n in range(nodes):
            for half in range(2):
                job_id = f"j-run{n:04d}{half}"
                rows.append({
                    "id": job_id, "tenant_id": admin.tenant_id, "user_id": admin.id,
                    "queue_id": queue.id, "name": f"train-{n}-{half}", "spec": {"workers": 1},
                    "gpus": 4, "state": JobState.RUNNING, "submitted_at": now - 3600,
                    "state_changed_at": now - 3000, "started_at": now - 3000,
                    "placement": [{"node": f"node-{n:03d}",
                                   "devices": list(range(4 * half, 4 * half + 4))}],
                })  # fmt: skip
        for i in range(queued):
            rows.append({
                "id": f"j-q{i:07d}", "tenant_id": admin.tenant_id, "user_id": admin.id,
                "queue_id": queue.id, "name": f"sweep-{i}", "spec": {"workers": 1},
                "gpus": 1 + i % 8, "state": JobState.PENDING, "submitted_at": now - queued + i,
                "state_changed_at": now - queued + i,
                "pending_reason": "capacity: no node has 4 free GPUs (the cluster is full)",
            })  # fmt: skip
        s.execute(insert(Job), rows)
        for r in rows:
            events.append({"job_id": r["id"], "time": r["submitted_at"], "from_state": None,
                           "to_state": JobState.PENDING, "reason": "submitted",
                           "details": {}})  # fmt: skip
        s.execute(insert(JobEvent), events)
        s.commit()
    return engine, token


@contextlib.contextmanager
def serving(app: Any) -> Iterator[str]:
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                            lifespan="off", timeout_graceful_shutdown=2)  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def pages(client: httpx.Client, repeat: int) -> dict[str, Any]:
    out = {}
    for path in PAGES:
        server_ms, wall_ms = [], []
        for _ in range(repeat):
            began = time.perf_counter()
            answer = client.get(path)
            wall_ms.append((time.perf_counter() - began) * 1000)
            assert answer.status_code == 200, (path, answer.status_code, answer.text[:300])
            timing = answer.headers.get("server-timing", "render;dur=0")
            server_ms.append(float(timing.split("dur=")[1]))
        out[path] = {"server_ms": _stats(server_ms), "wall_ms": _stats(wall_ms),
                     "bytes": len(answer.content)}  # fmt: skip
    return out


def updates(app: Any, client: httpx.Client, token: str, repeat: int) -> dict[str, Any]:
    """Server time of one live update per live page, the watcher's query, and end to end."""
    from trainyard.server.api.auth import Principal
    from trainyard.server.console import views
    from trainyard.server.db.base import Role

    ctx = app.state.trainyard
    with ctx.sessions() as s:
        admin = s.query(User).one()
        who = Principal(admin.id, admin.name, admin.tenant_id, "default", Role.ADMIN)
    from trainyard.server.services import jobs as job_service

    builds = {
        "/": lambda s, now: views.cluster(s, who, now),
        "/jobs": lambda s, now: views.job_list(s, who, job_service.Filters(), 1),
        "/queues": lambda s, now: views.queues(s, who, now, 0.5),
    }
    out: dict[str, Any] = {}
    for path, (template, blocks) in LIVE.items():
        page = Page(template, builds[path], live=blocks)
        base = {"who": who, "csrf": "x", "title": "", "nav": "", "path": path, "query": "",
                "live_blocks": blocks, "filters": job_service.Filters(), "error": None,
                "raw": httpx.QueryParams()}  # fmt: skip
        times = []
        for _ in range(repeat):
            began = time.perf_counter()
            values = build_values(ctx, page)
            for block in blocks:
                render_block(template, block, {**base, **values})
            times.append((time.perf_counter() - began) * 1000)
        out[path] = {"server_ms": _stats(times)}
    fingerprint = []
    for _ in range(repeat):
        began = time.perf_counter()
        with ctx.sessions() as s:
            live.fingerprint(s)
        fingerprint.append((time.perf_counter() - began) * 1000)
    out["watcher_fingerprint_ms"] = _stats(fingerprint)
    out["end_to_end"] = _end_to_end(client, token, repeat)
    return out


def _end_to_end(client: httpx.Client, token: str, repeat: int) -> dict[str, Any]:
    """A submit through the API until the jobs page's stream sends its changed table."""
    waits, server = [], []
    spec = {"name": "probe", "command": ["true"], "gpus": 1}
    with client.stream("GET", "/jobs", headers={"Accept": "text/event-stream"}, timeout=60) as s:
        lines = s.iter_lines()
        seen = 0
        for line in lines:  # the first full send of the live blocks
            if line.startswith("event: update"):
                seen += 1
            if seen == 2:
                break
        for _ in range(repeat):
            began = time.perf_counter()
            answer = httpx.post(f"{client.base_url}/v1/jobs", json=spec,
                                headers={"Authorization": f"Bearer {token}"})  # fmt: skip
            assert answer.status_code == 201, answer.text
            for line in lines:
                if line.startswith("data:") and '"jobs_table"' in line:
                    waits.append((time.perf_counter() - began) * 1000)
                    server.append(float(json.loads(line[5:])["ms"]))
                    break
    return {
        "submit_to_update_ms": _stats(waits),
        "update_server_ms": _stats(server),
        "note": "includes the watcher's poll interval (0.5 s) and the submit itself",
    }


def browser(url: str, cookie: str, repeat: int) -> dict[str, Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return {"skipped": "playwright is not installed"}
    if not Path("/usr/bin/chromium").is_file():
        return {"skipped": "no /usr/bin/chromium"}
    flags = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run",
             "--disable-quic"]  # fmt: skip
    out: dict[str, Any] = {}
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=flags)
        context = chromium.new_context(viewport={"width": 1366, "height": 900})
        context.add_cookies([{"name": "trainyard_session", "value": cookie, "url": url}])
        page = context.new_page()
        for path in PAGES:
            loads = []
            for _ in range(repeat):
                page.goto(url + path, wait_until="load")
                nav = page.evaluate(
                    "() => { const n = performance.getEntriesByType('navigation')[0];"
                    " return [n.domContentLoadedEventEnd, n.loadEventEnd]; }"
                )
                loads.append(float(nav[1]))
            out[path] = {"load_ms": _stats(loads)}
        chromium.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queued", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=8, help="nodes of 8 GPUs, all busy")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--db", help="database URL [SQLite in a temporary directory]")
    parser.add_argument("--no-browser", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or f"sqlite:///{Path(tmp) / 'trainyard.db'}"
        began = time.perf_counter()
        engine, token = populate(db, args.queued, args.nodes)
        populated_s = time.perf_counter() - began
        app = create_app(engine, max_queued=None)  # the probes come on top of --queued
        with serving(app) as url, httpx.Client(base_url=url, timeout=60) as client:
            login = client.get(f"/?token={token}", follow_redirects=False)
            assert login.status_code == 303, login.text
            cookie = login.cookies["trainyard_session"]
            client.cookies.set("trainyard_session", cookie)
            result = {
                "benchmark": "console",
                "queued_jobs": args.queued,
                "nodes": args.nodes,
                "gpus": args.nodes * 8,
                "database": "sqlite" if db.startswith("sqlite") else "postgresql",
                "machine": f"{platform.machine()}, {platform.python_implementation()} "
                f"{platform.python_version()}",
                "populate_s": round(populated_s, 2),
                "pages": pages(client, args.repeat),
                "updates": updates(app, client, token, args.repeat),
            }
            if not args.no_browser:
                result["browser"] = browser(url, cookie, max(3, args.repeat // 4))
        engine.dispose()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
