"""Job isolation end to end (issue 14, acceptance 1), on SQLite and PostgreSQL.

A real `trainyard up` runs as root with `--job-user dynamic` and a secret in its environment.
An admin of the `default` tenant runs a victim job; a member of another tenant (`globex`)
then runs a probe that tries to read what it must not: the admin token, the SQLite database
(or PostgreSQL over TCP without the password), the victim's log, run record and checkpoints,
the victim's and the server's `/proc/<pid>/environ`, and to signal the victim. The probe
reports what it got; the test asserts every attempt was refused, that it ran as a uid of its
own (not root, not the victim's), that its environment holds nothing of the server's, that
its job token cannot read the victim through the API, and that the state files are private.

Needs root (to run jobs as other uids): skipped otherwise, a failure in CI. The server's
home is made under /tmp (a pytest tmp_path lies under a 0700 directory no job could enter)
and the interpreter must be reachable by other uids (`.ci/run` grants traverse on its
directories; `trainyard up` says so when it is not).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from live_server import Cluster, LiveServer, wait_until
from pg_server import required

from trainyard.server.db import init_db, make_session_factory
from trainyard.server.services import admin as svc

pytestmark = pytest.mark.slow
SECRET = "server-secret-7f3a"
PRELOAD = "/nonexistent-trainyard/preload.so"  # a job's LD_PRELOAD (the loader says it is missing)
VICTIM = (
    "import os, time, pathlib\n"
    "pathlib.Path(os.environ['TRAINYARD_CHECKPOINT_DIR'], 'ckpt').write_text('weights')\n"
    "print('victim log line', flush=True)\n"
    "time.sleep(600)\n"
)
PROBE = r"""
import json, os, socket
targets = json.loads(os.environ["PROBE_TARGETS"])
out = {"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(), "env": dict(os.environ)}
def attempt(name, fn):
    try:
        fn()
        out[name] = "GOT IT"
    except Exception as error:
        out[name] = type(error).__name__
for name, path in targets["read"].items():
    attempt(name, lambda path=path: open(path, "rb").read(1))
attempt("list_victim_dir", lambda: os.listdir(targets["victim_dir"]))
attempt("write_victim_ckpt", lambda: open(targets["victim_ckpt"] + "/x", "w").write("x"))
attempt("signal_victim", lambda: os.kill(targets["victim_pid"], 0))
if targets.get("pg_port"):
    import psycopg
    attempt("postgres", lambda: psycopg.connect(
        f"host=127.0.0.1 port={targets['pg_port']} user=postgres dbname=postgres",
        connect_timeout=5))
import urllib.request, urllib.error
request = urllib.request.Request(
    os.environ["TRAINYARD_API_URL"] + "/v1/jobs/" + targets["victim_job"],
    headers={"Authorization": "Bearer " + os.environ["TRAINYARD_TOKEN"]})
try:
    urllib.request.urlopen(request, timeout=10)
    out["api_victim"] = 200
except urllib.error.HTTPError as error:
    out["api_victim"] = error.code
try:
    import torch
    out["torch"] = str(torch.tensor([1.0, 2.0]).sum().item())
except Exception as error:
    out["torch"] = repr(error)
print("PROBE " + json.dumps(out), flush=True)
"""
ALLOWED_ENV = {
    "PATH", "HOME", "TMPDIR", "USER", "LOGNAME", "LANG", "PYTHONUNBUFFERED", "RANK",
    "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_RUN_ID", "CUDA_VISIBLE_DEVICES",
    "TRAINYARD_JOB_ID", "TRAINYARD_ATTEMPT", "TRAINYARD_CHECKPOINT_DIR", "TRAINYARD_API_URL",
    "TRAINYARD_TOKEN", "TRAINYARD_VIRTUAL_GPUS", "TRAINYARD_NOTICE_FILE",
    "TRAINYARD_RANK_DEVICES", "PROBE_TARGETS",
}  # fmt: skip


@pytest.fixture
def home() -> Iterator[Path]:
    if os.geteuid() != 0:
        if required():
            pytest.fail("the isolation tests must run as root in CI", pytrace=False)
        pytest.skip("running jobs as other uids needs root")
    path = Path(tempfile.mkdtemp(prefix="trainyard-iso-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _wait_state(server: LiveServer, job_id: str, states: set[str], cluster: Cluster) -> Any:
    return wait_until(
        f"job {job_id} in {states}",
        lambda: server.job(job_id) if server.job(job_id)["state"] in states else None,
        180,
        cluster.output,
    )


def _member(db_url: str) -> str:
    """A member of another tenant, with a queue of its own; returns its token."""
    engine = init_db(db_url)
    try:
        with svc.transaction(make_session_factory(engine)) as s:
            now = time.time()
            svc.create_tenant(s, "globex", now=now)
            svc.create_user(s, "globex", "mallory", "member", now=now)
            svc.create_queue(s, "globex-q", tenant="globex", guaranteed=1, now=now)
            return svc.issue_user_token(s, "mallory", now=now).token
    finally:
        engine.dispose()


def test_a_members_job_reaches_nothing_of_the_server_or_other_jobs(
    db_url: str, tmp_path: Path, home: Path
) -> None:
    sqlite = db_url.startswith("sqlite")
    url = f"sqlite:///{home / 'trainyard.db'}" if sqlite else db_url
    cluster = Cluster(
        tmp_path, url, virtual_gpus=2, home=home, args=("--job-user", "dynamic"),
        env={"SERVER_SECRET": SECRET},
    )  # fmt: skip
    try:
        server = cluster.start()
        # The jobs run in /tmp (world-readable, so that their uids may enter it); `-P` keeps
        # it off their sys.path, so a stray /tmp/grp.py cannot shadow a module they import.
        victim = server.submit(
            {"name": "victim", "command": [sys.executable, "-P", "-c", VICTIM], "gpus": 1,
             "env": {"VICTIM_SECRET": "victim-secret", "LD_PRELOAD": PRELOAD},
             "working_dir": str(home.parent)}
        )  # fmt: skip
        _wait_state(server, victim, {"RUNNING"}, cluster)
        wait_until(
            "the victim's log", lambda: "victim log line" in server.logs(victim), 60,
            cluster.output,
        )  # fmt: skip
        job_dir = home / "runs" / "jobs" / victim
        attempt = max(cluster.attempts(victim))
        victim_pid = cluster.command_pid(victim, attempt, 0)
        assert victim_pid is not None
        # the job's environment, loader variables included, is its command's alone: the
        # wrapper runs as root until the command's exec, so LD_PRELOAD there would run the
        # job's code as root (the loader names a preload it cannot open, once per process)
        wrapper_pid = int(cluster.run_record(victim, attempt)["ranks"][0]["pid"])
        assert b"VICTIM_SECRET" in Path(f"/proc/{victim_pid}/environ").read_bytes()
        wrapper_env = Path(f"/proc/{wrapper_pid}/environ").read_bytes()
        assert b"VICTIM_SECRET" not in wrapper_env and b"LD_PRELOAD" not in wrapper_env
        assert server.logs(victim).count("cannot be preloaded") == 1, server.logs(victim)
        targets: dict[str, Any] = {
            "read": {
                "admin_token": str(home / "admin-token"),
                "victim_log": str(job_dir / "logs" / f"attempt-{attempt}" / "rank-0.log"),
                "victim_run_record": str(job_dir / f"attempt-{attempt}" / "run.json"),
                "victim_ckpt": str(job_dir / "checkpoints" / "ckpt"),
                "victim_environ": f"/proc/{victim_pid}/environ",
                "server_environ": f"/proc/{server.proc.pid}/environ",
                "uid_counter": str(home / "runs" / "next-uid"),
            },
            "victim_dir": str(job_dir / f"attempt-{attempt}"),
            "victim_ckpt": str(job_dir / "checkpoints"),
            "victim_pid": victim_pid,
            "victim_job": victim,
        }
        if sqlite:
            targets["read"]["database"] = str(home / "trainyard.db")
        else:
            targets["pg_port"] = int(url.rsplit(":", 1)[1].split("/")[0])
        token = _member(url)
        member = httpx.Client(
            base_url=server.url, timeout=30, headers={"Authorization": f"Bearer {token}"}
        )
        answer = member.post("/v1/jobs", json={
            "name": "probe", "queue": "globex-q", "command": [sys.executable, "-P", "-c", PROBE],
            "gpus": 1, "env": {"PROBE_TARGETS": json.dumps(targets)},
            "working_dir": str(home.parent),
        })  # fmt: skip
        assert answer.status_code == 201, answer.text
        probe = answer.json()["id"]
        done = wait_until(
            "the probe to finish",
            lambda: (
                (j := member.get(f"/v1/jobs/{probe}").json())["state"] in ("SUCCEEDED", "FAILED")
                and j
            ),
            180,
            cluster.output,
        )
        text = member.get(f"/v1/jobs/{probe}/logs").text
        assert done["state"] == "SUCCEEDED", text
        report = json.loads(text.split("PROBE ", 1)[1])
    finally:
        cluster.close()
    refused = {k: v for k, v in report.items() if k not in ("uid", "gid", "groups", "env")}
    got = {k: v for k, v in refused.items() if v == "GOT IT"}
    assert not got, f"the member's job reached {sorted(got)}"
    assert report["api_victim"] == 404  # its token reads its own job only
    assert report["torch"] == "3.0"  # the job's uid can use the server's interpreter
    assert report["uid"] != 0 and report["gid"] != 0 and 0 not in report["groups"]
    record = cluster.run_record(victim, attempt)
    assert any("runs as uid" in note for note in record["notes"])
    victim_uid = (home / "runs" / "jobs" / victim / "checkpoints").stat().st_uid
    assert victim_uid not in (0, report["uid"])
    env = report["env"]
    assert set(env) <= ALLOWED_ENV, sorted(set(env) - ALLOWED_ENV)
    assert SECRET not in json.dumps(env) and "TRAINYARD_DB" not in env
    assert env["HOME"].startswith(str(home / "runs" / "jobs" / probe))
    for path, mode in (
        (home, 0o711),
        (home / "admin-token", 0o600),
        (home / "runs" / "jobs" / victim / "logs", 0o700),
        (home / "runs" / "jobs" / victim / "logs" / f"attempt-{attempt}" / "rank-0.log", 0o600),
    ):
        assert stat.S_IMODE(path.stat().st_mode) == mode, path
    if sqlite:
        assert stat.S_IMODE((home / "trainyard.db").stat().st_mode) == 0o600
