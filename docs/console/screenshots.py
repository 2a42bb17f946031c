"""Take the screenshots of docs/console.md: a real `trainyard up` (4 virtual GPUs) with the
DDP example reporting its steps, a long job, a job that waits, another tenant's job, usage
and a simulator report, photographed by Debian's chromium through Playwright.

Run from the repository root: .venv/bin/python docs/console/screenshots.py (about a minute).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

from trainyard.exec.procfs import free_port
from trainyard.server.db import make_engine, make_session_factory
from trainyard.server.services import admin

OUT = Path(__file__).resolve().parent
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]  # fmt: skip
TICK = "import time\nfor i in range(10**6):\n    print(f'step {i}', flush=True); time.sleep(0.5)\n"


def main() -> None:
    home = Path(tempfile.mkdtemp(prefix="trainyard-shots-", dir="/tmp"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, TRAINYARD_CONFIG=str(home / "credentials.json"))
    log = (home / "up.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "trainyard.cli.main", "up", "--home", str(home), "--port",
         str(port), "--virtual-gpus", "4", "--job-user", "server"],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
    )  # fmt: skip
    try:
        while "console:" not in (home / "up.log").read_text():
            time.sleep(0.2)
        link = re.search(r"console: (\S+)", (home / "up.log").read_text()).group(1)  # type: ignore[union-attr]
        token = (home / "admin-token").read_text().strip()
        engine = make_engine(home / "trainyard.db")
        with make_session_factory(engine)() as s:
            admin.create_tenant(s, "acme", now=time.time())
            admin.create_user(s, "acme", "ada", "member", now=time.time())
            ada = admin.issue_user_token(s, "ada", now=time.time()).token
            s.commit()
        engine.dispose()
        api = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"})
        ddp = {"name": "ddp-mlp", "workers": 2, "gpus": 2, "cpus": 0.5, "memory_gb": 1,
               "command": ["python", "examples/jobs/ddp/train.py", "--steps", "100000",
                           "--report-every", "1", "--step-sleep", "0.02"]}  # fmt: skip
        ddp_id = api.post("/v1/jobs", json=ddp).json()["id"]
        api.post("/v1/jobs", json={"name": "eval", "gpus": 1, "cpus": 0.2, "memory_gb": 0.2,
                                   "command": ["python", "-c", TICK]})  # fmt: skip
        waiting = api.post("/v1/jobs", json={"name": "big-sweep", "gpus": 4, "cpus": 0.2,
                                             "memory_gb": 0.2, "command": ["true"]}).json()["id"]  # fmt: skip
        httpx.post(f"{url}/v1/jobs", headers={"Authorization": f"Bearer {ada}"},
                   json={"name": "acme-run", "gpus": 1, "cpus": 0.2, "memory_gb": 0.2,
                         "command": ["python", "-c", TICK]})  # fmt: skip
        reports = home / "sim-reports" / "philly-week"
        subprocess.run([sys.executable, "-m", "trainyard.cli.main", "simulate", "-w",
                        "synthetic:300", "--compare", "fifo,tiresias,default", "--report",
                        str(reports)], check=True, capture_output=True)  # fmt: skip
        time.sleep(45)  # the DDP job trains and reports for a while
        with sync_playwright() as p:
            chromium = p.chromium.launch(executable_path="/usr/bin/chromium", args=FLAGS)
            page = chromium.new_page(viewport={"width": 1366, "height": 860})
            page.goto(link)
            shots = [("cluster", "/"), ("queues", "/queues"), ("jobs", "/jobs"),
                     ("job", f"/jobs/{ddp_id}"), ("pending", f"/jobs/{waiting}"),
                     ("usage", "/usage?window=1h&by=user"), ("tokens", "/tokens"),
                     ("tenant", "/admin"), ("simulation", "/simulations/philly-week"),
                     ("submit", "/submit")]  # fmt: skip
            for name, path in shots:
                page.goto(url + path)
                page.wait_for_timeout(2500)
                if name == "cluster":
                    page.locator("a.gpu.busy").first.focus()
                page.screenshot(path=str(OUT / f"{name}.png"), full_page=name != "job")
            page.goto(f"{url}/submit")
            page.fill("#s-name", "typo")
            page.fill("#s-command", "python train.py")
            page.fill("#s-gpus", "-2")
            page.locator("form.submit button[type=submit]").click()
            page.wait_for_timeout(1000)
            page.screenshot(path=str(OUT / "field-error.png"))
            chromium.close()
        for client in (api, httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ada}"})):
            for job in client.get("/v1/jobs").json()["jobs"]:  # (jobs outlive the server)
                client.post(f"/v1/jobs/{job['id']}/cancel")
    finally:
        server.terminate()
        server.wait(timeout=60)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
