"""Acceptance 1 of the platform, end to end as a user meets it: what `make up` runs.

`trainyard up --virtual-gpus 4 --submit <the three examples>` in its own process (from the
repository root, as `make up` does), on SQLite and on PostgreSQL (`db_url`); then the real
CLI in separate processes, logged in by `up` itself: `trainyard jobs`, `describe`, `logs`.
The 2-worker DDP example must finish with its loss falling, its logs readable per rank,
and `describe` must list every transition; the single-process job succeeds; the failing job
is retried `max_restarts` times (the first at once, then `--restart-backoff`) and ends
FAILED with its exit code. SIGTERM stops the server
cleanly. Only waits have timeouts; nothing asserts on durations.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from live_server import free_port
from pg_server import required

import trainyard

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[3]
EXAMPLES = ["ddp", "single", "fail"]
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}
LOSS = re.compile(r"^step (\d+) loss ([0-9.]+)$", re.MULTILINE)


class Up:
    """`trainyard up` as `make up` starts it, plus the CLI pointed at it."""

    def __init__(
        self, tmp_path: Path, db_url: str, home: Path, examples: list[str] = EXAMPLES
    ) -> None:
        self.tmp_path = tmp_path
        self.log = tmp_path / "up.log"
        self.env = dict(os.environ)
        self.env["TRAINYARD_HOME"] = str(home)
        self.env["TRAINYARD_CONFIG"] = str(tmp_path / "credentials.json")
        self.env.pop("TRAINYARD_URL", None)
        self.env.pop("TRAINYARD_TOKEN", None)
        package_root = str(Path(trainyard.__file__).resolve().parents[1])
        self.env["PYTHONPATH"] = os.pathsep.join(
            [package_root, *(p for p in self.env.get("PYTHONPATH", "").split(os.pathsep) if p)]
        )
        argv = [sys.executable, "-m", "trainyard.cli.main", "up", "--db", db_url]
        argv += ["--port", str(free_port()), "--virtual-gpus", "4", "--interval", "0.2"]
        argv += ["--restart-backoff", "1"]
        for name in examples:
            argv += ["--submit", f"examples/jobs/{name}/job.yaml"]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                argv, cwd=REPO, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "trainyard.cli.main", *args],
            env=self.env, capture_output=True, text=True, timeout=120, cwd=self.tmp_path,
        )  # fmt: skip
        if check:
            assert done.returncode == 0, f"{args}: {done.stderr}\n{self.output()}"
        return done

    def jobs(self) -> list[dict[str, Any]]:
        out = self.cli("jobs", "--json", check=False)
        if out.returncode != 0:
            return []
        jobs: list[dict[str, Any]] = json.loads(out.stdout)["jobs"]
        return jobs

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture
def up(tmp_path: Path, db_url: str) -> Iterator[Up]:
    # The home is made under /tmp, not in tmp_path (below a 0700 directory): as root, the
    # examples then run as uids of their own, as `make up` runs them (docs/security.md).
    home = Path(tempfile.mkdtemp(prefix="trainyard-up-", dir="/tmp"))
    server = Up(tmp_path, db_url, home)
    try:
        yield server
    finally:
        server.stop()
        print(server.output())
        print_job_logs(home)  # shown when the test failed: why a run failed under load
        shutil.rmtree(home, ignore_errors=True)


def print_job_logs(home: Path, lines: int = 25) -> None:
    """The last lines of every rank's log of every attempt under `home`."""
    for path in sorted(home.glob("**/attempt-*/**/*.log")):
        tail = path.read_text(errors="replace").splitlines()[-lines:]
        print(f"--- {path.relative_to(home)}", *tail, sep="\n")


def wait_for(what: str, check: Any, up: Up, timeout: float = 300.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert up.proc.poll() is None, f"trainyard up exited: {up.output()}"
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n{up.output()}")
        time.sleep(0.5)


def test_make_up_runs_the_examples_end_to_end(up: Up) -> None:
    def finished() -> list[dict[str, Any]] | None:
        jobs = up.jobs()
        done = len(jobs) == 3 and all(j["state"] in TERMINAL for j in jobs)
        return jobs if done else None

    jobs = {j["name"]: j for j in wait_for("the examples to finish", finished, up)}
    banner = up.output()
    assert "4 VIRTUAL GPUs (declared, not real" in banner
    if os.geteuid() == 0 and required():  # CI: the DDP job ran as a uid of its own
        assert "jobs run as uids of their own" in banner, banner
    assert "the CLI is logged in as admin" in banner
    assert {n: j["state"] for n, j in jobs.items()} == {
        "ddp-mlp": "SUCCEEDED",
        "single-regression": "SUCCEEDED",
        "always-fails": "FAILED",
    }

    ddp = jobs["ddp-mlp"]["id"]
    detail = json.loads(up.cli("describe", ddp, "--json").stdout)
    states = [e["to_state"] for e in detail["events"]]
    assert states == ["PENDING", "STARTING", "RUNNING", "SUCCEEDED"]
    assert detail["placement"] and sum(len(p["devices"]) for p in detail["placement"]) == 2
    text = up.cli("describe", ddp).stdout
    for state in states:
        assert state in text
    assert "VIRTUAL" in text

    rank0 = up.cli("logs", ddp, "--rank", "0").stdout
    losses = [float(m.group(2)) for m in LOSS.finditer(rank0)]
    assert len(losses) >= 5 and losses[-1] < losses[0] * 0.5, rank0  # it really learns
    assert "world_size=2" in rank0 and "backend=gloo" in rank0
    assert "done steps=200" in rank0
    both = up.cli("logs", ddp).stdout
    assert "[rank 0] done steps=200" in both  # all ranks: prefixed (rank 1 prints errors only)
    followed = up.cli("logs", ddp, "-f", "--rank", "0").stdout  # a finished job: ends
    assert followed == rank0

    fail = json.loads(up.cli("describe", jobs["always-fails"]["id"], "--json").stdout)
    assert fail["restart_count"] == fail["max_restarts"] == 2
    assert [e["to_state"] for e in fail["events"]].count("FAILED") == 3
    assert fail["exit_code"] == 3
    backoffs = [
        round(e["details"]["next_retry_at"] - e["time"], 3) if e["details"]["next_retry_at"] else 0
        for e in fail["events"]
        if e["from_state"] == "FAILED" and e["to_state"] == "PENDING"
    ]
    assert backoffs == [0, 1.0]  # the first restart at once, then --restart-backoff 1

    up.proc.send_signal(signal.SIGTERM)
    assert up.proc.wait(timeout=60) == 0
    assert "server stopped" in up.output()
    # The progress lines tell each attempt in order (ends and requeues before the relaunch).
    fail_id = jobs["always-fails"]["id"]
    said = re.findall(rf"job {fail_id} \(fail\): (\w+)", up.output())
    assert said == ["launched", "failed", "requeued"] * 2 + ["launched", "failed"], said


RANK_REPORT = (
    "import os; print('world', os.environ['WORLD_SIZE'], 'rank', os.environ['RANK'], "
    "'devices', os.environ['CUDA_VISIBLE_DEVICES'], flush=True)"
)


def test_nodes_means_distinct_nodes_or_the_spec_is_refused(tmp_path: Path, db_url: str) -> None:
    """Issue 11 item 5: `nodes: 2` on this one machine used to run as one rank on one node
    and succeed. The local executor runs every rank here, so `nodes` above 1 is refused at
    submit, naming the field; `nodes: 1, workers: 2` runs two ranks on this node's devices."""
    up = Up(tmp_path, db_url, tmp_path / "home", examples=[])
    try:
        wait_for("the server", lambda: up.cli("whoami", check=False).returncode == 0, up)
        two_nodes = tmp_path / "two-nodes.yaml"
        two_nodes.write_text(
            "name: two-nodes\n"
            f"command: [{sys.executable!r}, -c, {RANK_REPORT!r}]\n"
            "nodes: 2\nworkers: 1\ngpus: 2\n"
        )
        refused = up.cli("submit", str(two_nodes), check=False)
        assert refused.returncode != 0
        assert "nodes" in refused.stderr and "at most 1" in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr
        assert up.jobs() == []  # nothing stored
        one_node = tmp_path / "one-node.yaml"
        one_node.write_text(
            "name: one-node\n"
            f"command: [{sys.executable!r}, -c, {RANK_REPORT!r}]\n"
            "nodes: 1\nworkers: 2\ngpus: 2\n"
        )
        up.cli("submit", str(one_node))

        def finished() -> list[dict[str, Any]] | None:
            jobs = up.jobs()
            return jobs if jobs and all(j["state"] in TERMINAL for j in jobs) else None

        (job,) = wait_for("the job to finish", finished, up)
        assert job["state"] == "SUCCEEDED"
        logs = up.cli("logs", job["id"]).stdout
        ranks = sorted(re.findall(r"world (\d+) rank (\d+) devices (\S+)", logs))
        assert [(w, r) for w, r, _d in ranks] == [("2", "0"), ("2", "1")], logs
        # as torchrun: both ranks see the job's two devices on this node (LOCAL_RANK picks)
        (seen,) = {d for _w, _r, d in ranks}
        assert len(seen.split(",")) == 2
    finally:
        up.stop()
