"""Live resize on a whole running server (issue 15), real processes, SQLite and PostgreSQL.

Rules shown:
- a running elastic job grows into GPUs that became idle: RUNNING -> RESIZING (event
  `resize 1 -> 2`) -> STARTING (`resized 1 -> 2`) -> RUNNING, relaunched at the new world
  size; its run is told why it stops (`TRAINYARD_NOTICE_FILE` says `resize` before SIGTERM)
  and exits 85 after saving; the resize is not a failure (`restart_count` stays 0);
- every rank sees all of the job's devices on its node, as torchrun gives them
  (`CUDA_VISIBLE_DEVICES` the same on every rank, `LOCAL_RANK` picking one);
- a job's report (`POST /v1/jobs/{id}/reports` with its own token) is stored and shown by
  `describe` (measured step time per size).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

import httpx
from cli_servers import Cli, RunningServer

from trainyard.core.framework import get_profile

# Each rank: print its view, report one step (rank 0), then run until SIGTERM, then print
# the notice, "save" and exit 85 (the SDK's EXIT_CHECKPOINTED).
WORKER = r"""
import json, os, signal, sys, time, urllib.request
env = {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE",
       "CUDA_VISIBLE_DEVICES", "TRAINYARD_ATTEMPT")}
print("VIEW " + json.dumps(env), flush=True)
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
if env["RANK"] == "0":
    body = {"attempt": int(env["TRAINYARD_ATTEMPT"]), "gpus": int(env["WORLD_SIZE"]),
            "nodes": 1, "world_size": int(env["WORLD_SIZE"]), "batch": 64,
            "step_time": 0.5 / int(env["WORLD_SIZE"]), "steps": 10, "step": 10,
            "samples": 640, "loss": 1.5}
    req = urllib.request.Request(
        os.environ["TRAINYARD_API_URL"] + "/v1/jobs/" + os.environ["TRAINYARD_JOB_ID"]
        + "/reports", data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": "Bearer " + os.environ["TRAINYARD_TOKEN"],
                 "Content-Type": "application/json"})
    print("REPORT", urllib.request.urlopen(req, timeout=30).status, flush=True)
while not stop:
    time.sleep(0.05)
notice = open(os.environ["TRAINYARD_NOTICE_FILE"]).read().strip()
print("NOTICE " + notice, flush=True)
sys.exit(85)
"""


def _post(running: RunningServer, path: str, body: Any = None) -> dict[str, Any]:
    answer = httpx.post(
        f"{running.url}{path}", json=body, timeout=30,
        headers={"Authorization": f"Bearer {running.admin_token}"},
    )  # fmt: skip
    assert answer.status_code < 300, answer.text
    out: dict[str, Any] = answer.json()
    return out


def _until(read: Callable[[], dict[str, Any]], done: Callable[[dict[str, Any]], bool]) -> Any:
    """`read()` once `done` holds of it (generous: no timing is tested)."""
    for _ in range(900):
        value = read()
        if done(value):
            return value
        time.sleep(0.2)
    raise AssertionError(f"never reached: {value}")


def _views(cli: Cli, running: RunningServer, job: str, attempt: int) -> list[dict[str, Any]]:
    out = cli("logs", job, "--attempt", str(attempt), token=running.admin_token).stdout
    return [json.loads(line.split("VIEW ", 1)[1]) for line in out.splitlines() if "VIEW " in line]


def test_an_elastic_job_grows_into_idle_gpus_live(running_server: RunningServer, cli: Cli) -> None:
    platform = running_server.server.platform
    assert platform is not None
    # resize soon after a start (the default waits a minute: a resize costs a restart)
    platform.profile = get_profile("default").with_overrides(
        resize_hold_s=1.0, resize_restart_s=1.0
    )
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    blocker = _post(running_server, "/v1/jobs", {"name": "blocker", "gpus": 1, "command": sleeper})
    blocker = blocker["id"]
    running_server.wait(blocker, {"RUNNING"})
    spec = {
        "name": "grow", "gpus": 2, "workers": 2, "command": [sys.executable, "-c", WORKER],
        "elastic": {"min_gpus": 1, "max_gpus": 2, "batch_size": 64}, "max_restarts": 0,
    }  # fmt: skip
    job = _post(running_server, "/v1/jobs", spec)["id"]
    first = running_server.wait(job, {"RUNNING"})
    assert first["gpus"] == 1  # one GPU was free: it started small
    _post(running_server, f"/v1/jobs/{blocker}/cancel")

    def resized(detail: dict[str, Any]) -> bool:
        relaunched = any(e["reason"].startswith("resized") for e in detail["events"])
        return relaunched and detail["state"] == "RUNNING"

    detail = _until(lambda: running_server.job(job), resized)
    assert detail["state"] == "RUNNING" and detail["gpus"] == 2, detail
    reasons = [(e["from_state"], e["to_state"], e["reason"]) for e in detail["events"]]
    assert ("RUNNING", "RESIZING", "resize 1 -> 2") in reasons, reasons
    assert ("RESIZING", "STARTING", "resized 1 -> 2") in reasons, reasons
    assert detail["restart_count"] == 0  # a resize is not a failure
    assert detail["attempt"] == 2

    old_run = cli("logs", job, "--attempt", "0", token=running_server.admin_token).stdout
    assert "NOTICE resize" in old_run and "REPORT 202" in old_run
    (view,) = _views(cli, running_server, job, 0)
    assert view["WORLD_SIZE"] == "1"
    views = _views(cli, running_server, job, 1)
    assert sorted(v["RANK"] for v in views) == ["0", "1"]
    assert {v["WORLD_SIZE"] for v in views} == {"2"}
    # as torchrun: both ranks see both devices, LOCAL_RANK picks one
    (devices,) = {v["CUDA_VISIBLE_DEVICES"] for v in views}
    assert len(devices.split(",")) == 2 and {v["LOCAL_RANK"] for v in views} == {"0", "1"}

    # the job's reports are kept per size and shown by describe
    progress = _until(
        lambda: running_server.job(job).get("progress") or {},
        lambda p: len(p.get("observed", [])) == 2,
    )
    observed = {o["gpus"]: o for o in progress["observed"]}
    assert set(observed) == {1, 2} and observed[1]["step_time"] == 0.5
    assert observed[2]["samples_per_s"] == 64 / 0.25
    shown = cli("describe", job, "--json", token=running_server.admin_token)
    assert json.loads(shown.stdout)["progress"]["world_size"] == 2


# A rank that counts steps, saves its step on SIGTERM (exit 85) and resumes from it.
COUNTER = r"""
import os, pathlib, signal, sys, time
ckpt = pathlib.Path(os.environ["TRAINYARD_CHECKPOINT_DIR"], "step")
step = int(ckpt.read_text()) if ckpt.exists() else 0
print(f"START world={os.environ['WORLD_SIZE']} resumed={step}", flush=True)
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
while not stop:
    time.sleep(0.05)
    step += 1
if os.environ["RANK"] == "0":
    tmp = ckpt.with_suffix(".tmp")
    tmp.write_text(str(step))
    os.replace(tmp, ckpt)
    print(f"SAVED {step}", flush=True)
sys.exit(85)
"""


def test_a_rank_killed_after_a_resize_recovers_from_the_checkpoint(
    running_server: RunningServer, cli: Cli
) -> None:
    """A resize that fails mid-way: after the relaunch at the new size one rank is killed.
    That is a failure of the job (restart_count 1, the resize itself counted nothing); it
    restarts and resumes from the checkpoint its resize saved."""
    platform = running_server.server.platform
    assert platform is not None
    platform.profile = get_profile("default").with_overrides(
        resize_hold_s=1.0, resize_restart_s=1.0
    )
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    blocker = _post(running_server, "/v1/jobs", {"name": "blocker", "gpus": 1, "command": sleeper})
    running_server.wait(blocker["id"], {"RUNNING"})
    spec = {
        "name": "counter", "gpus": 2, "workers": 2, "command": [sys.executable, "-c", COUNTER],
        "elastic": {"min_gpus": 1, "max_gpus": 2}, "max_restarts": 2,
    }  # fmt: skip
    job = _post(running_server, "/v1/jobs", spec)["id"]
    running_server.wait(job, {"RUNNING"})
    _post(running_server, f"/v1/jobs/{blocker['id']}/cancel")
    grown = _until(
        lambda: running_server.job(job),
        lambda d: d["state"] == "RUNNING" and d["attempt"] == 2,
    )
    assert grown["gpus"] == 2 and grown["restart_count"] == 0
    saved = cli("logs", job, "--attempt", "0", token=running_server.admin_token).stdout
    step = int(saved.split("SAVED ", 1)[1].split()[0])

    handle = _until(lambda: {"h": platform._runs.get(job)}, lambda h: h["h"] is not None)["h"]
    pid_file = handle.pid_file(1)
    _until(lambda: {"ok": pid_file.exists()}, lambda x: x["ok"])
    os.kill(json.loads(pid_file.read_text())["pid"], signal.SIGKILL)

    again = _until(
        lambda: running_server.job(job),
        lambda d: d["state"] == "RUNNING" and d["attempt"] == 3,
    )
    assert again["restart_count"] == 1  # the kill is a failure; the resize was not
    reasons = [e["reason"] for e in again["events"]]
    assert any(r.startswith("rank 1 exited") or "signal" in r for r in reasons), reasons
    token = running_server.admin_token
    resumed = _until(
        lambda: {"out": cli("logs", job, "--attempt", "2", token=token).stdout},
        lambda x: "START" in x["out"],
    )["out"]
    # the last checkpoint: the one the resize saved, or a later one rank 0 saved when the
    # failed run was stopped (its peers get SIGTERM once a rank fails)
    failed_run = cli("logs", job, "--attempt", "1", token=token).stdout
    last = int(failed_run.split("SAVED ", 1)[1].split()[0]) if "SAVED " in failed_run else step
    assert f"resumed={step}" in failed_run and last >= step
    assert f"resumed={last}" in resumed and "world=2" in resumed
