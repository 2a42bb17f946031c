"""Fault-tolerance acceptance tests, end to end with real processes (no mocks), on SQLite and
on PostgreSQL (`db_url`).

The server is `trainyard up` in its own OS process (`live_server.Cluster`), driven through its
REST API; the jobs are the real 2-worker PyTorch DDP example (gloo on CPU, checkpoints in
`$TRAINYARD_CHECKPOINT_DIR`) and small "sentinel" jobs that wait for a file and then exit with
a chosen code. The scenarios:

- `kill -9` of one worker's training process: the job fails (the rank and its exit code on
  the FAILED event), is restarted as a new attempt, resumes from its latest checkpoint losing
  at most one checkpoint interval, and succeeds.
- `kill -9` of the server while jobs run: a new server on the same home and database keeps
  every job row and launches no run twice (the same processes, found through `/proc`, before
  and after), re-adopts the running jobs (no failure in their events; they succeed), records
  the real outcome of jobs that ended while no server ran, and schedules the job that was
  PENDING before the crash.
- `kill -9` of the server, then of a worker while no server runs: the next server records the
  failure (rank, exit code) from the wrapper's exit file and restarts the job from its
  checkpoint.

Waits have generous timeouts; nothing asserts on durations.
"""

from __future__ import annotations

import functools
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from live_server import Cluster, Job, LiveServer, wait_until

pytestmark = pytest.mark.slow  # each test starts servers and PyTorch jobs: about 30 s

REPO = Path(__file__).resolve().parents[3]
DDP = "examples/jobs/ddp/train.py"  # relative to the repository root, the job's working_dir
EVERY = 25  # --checkpoint-every of the killed-worker job
LONG = 4000  # --steps of the DDP job that outlives a server restart
STEP = re.compile(r"^step (\d+) loss ", re.MULTILINE)
CHECKPOINT = re.compile(r"^checkpoint step=(\d+) ", re.MULTILINE)
RESUMED = re.compile(r"^resumed from step (\d+)$", re.MULTILINE)
UNINTERRUPTED = ["PENDING", "STARTING", "RUNNING", "SUCCEEDED"]
SENTINEL = (
    "import os, sys, time\n"
    "while not os.path.exists(sys.argv[1]):\n"
    "    time.sleep(0.05)\n"
    "print('released', flush=True)\n"
    "sys.exit(int(sys.argv[2]))\n"
)


@pytest.fixture
def cluster(db_url: str, tmp_path: Path) -> Iterator[Cluster]:
    live = Cluster(tmp_path, db_url, virtual_gpus=4)
    try:
        yield live
    finally:
        live.close()  # kills every server and job process, prints the servers' output


def ddp_spec(name: str, steps: int, every: int, log_every: int, max_restarts: int) -> Job:
    command = ["python", DDP, "--steps", str(steps), "--checkpoint-every", str(every)]
    return {
        "name": name,
        "queue": "default",
        "command": [*command, "--log-every", str(log_every)],
        "workers": 2,
        "gpus": 2,
        "max_restarts": max_restarts,
        "working_dir": str(REPO),
    }


def sentinel_spec(name: str, release: Path, code: int, gpus: int) -> Job:
    return {
        "name": name,
        "command": ["python", "-c", SENTINEL, str(release), str(code)],
        "workers": 1,
        "gpus": gpus,
        "max_restarts": 0,
    }


def states(job: Job) -> list[str]:
    return [e["to_state"] for e in job["events"]]


def describe(cluster: Cluster, server: LiveServer, *job_ids: str) -> str:
    lines = []
    for job_id in job_ids:
        try:
            job = server.job(job_id)
            lines.append(
                f"job {job_id}: {job['state']} ({job['pending_reason']}) events {states(job)}"
            )
            lines += [f"    {e}" for e in job["events"]]
        except Exception as error:  # the server may be down: say so, keep the rest
            lines.append(f"job {job_id}: cannot describe ({error})")
    return "\n".join(lines) + "\n" + cluster.output()


def wait_state(
    cluster: Cluster, server: LiveServer, job_id: str, state: str, timeout: float = 240.0
) -> Job:
    """The job once it is in `state`; fails at once when it ends in another state."""

    def reached() -> Job | None:
        job = server.job(job_id)
        final = job["state"] in ("SUCCEEDED", "CANCELLED") or (
            job["state"] == "FAILED" and job["restart_count"] >= job["max_restarts"]
        )
        assert job["state"] == state or not final, describe(cluster, server, job_id)
        return job if job["state"] == state else None

    result: Job = wait_until(
        f"job {job_id} to be {state}", reached, timeout, lambda: describe(cluster, server, job_id)
    )
    return result


def started(cluster: Cluster, server: LiveServer, job_id: str, ranks: int) -> bool:
    """RUNNING, and every rank's command has started (its wrapper recorded its pid)."""
    if server.job(job_id)["state"] != "RUNNING":
        return False
    return all(cluster.command_pid(job_id, 0, r) is not None for r in range(ranks))


def steps_of(text: str) -> list[int]:
    return [int(s) for s in STEP.findall(text)]


# --- kill -9 of one worker ----------------------------------------------------------------


def test_killed_worker_fails_the_attempt_and_the_job_resumes_from_its_checkpoint(
    cluster: Cluster,
) -> None:
    server = cluster.start()
    total = 1000  # each attempt: ~20 s to start (torch, gloo), then a few seconds of steps
    job_id = server.submit(ddp_spec("ddp-kill", total, EVERY, 1, max_restarts=2))

    def two_checkpoints() -> str | None:
        state = server.job(job_id)["state"]
        assert state in ("PENDING", "STARTING", "RUNNING"), describe(cluster, server, job_id)
        if state != "RUNNING":
            return None
        text = server.logs(job_id, rank=0, attempt=0)
        return text if len(CHECKPOINT.findall(text)) >= 2 else None

    wait_until("two checkpoints", two_checkpoints, 120, lambda: describe(cluster, server, job_id))
    checkpointed = int(CHECKPOINT.findall(server.logs(job_id, rank=0, attempt=0))[-1])
    worker = cluster.command_pid(job_id, 0, 1)
    assert worker is not None
    processes = cluster.processes(job_id)
    assert worker in processes, f"attempt 0 ended before the kill: more --steps? {processes}"
    assert DDP in processes[worker], processes  # the training process itself, not its wrapper
    os.kill(worker, signal.SIGKILL)

    job = wait_state(cluster, server, job_id, "SUCCEEDED")
    story = describe(cluster, server, job_id)
    assert states(job) == [
        "PENDING", "STARTING", "RUNNING", "FAILED", "PENDING", "STARTING", "RUNNING", "SUCCEEDED"
    ], story  # fmt: skip
    failed = job["events"][3]
    assert failed["details"]["rank"] == 1, story
    assert failed["details"]["exit_code"] == -signal.SIGKILL, story
    assert failed["reason"] == "rank 1 exited with code -9", story
    assert job["events"][4]["reason"] == "restart after failure", story
    assert (job["restart_count"], job["attempt"], job["exit_code"]) == (1, 2, 0), story
    assert cluster.attempts(job_id) == [0, 1]
    exits = [cluster.exit_record(job_id, 0, rank)["returncode"] for rank in (0, 1)]
    assert exits[1] == -signal.SIGKILL and exits[0] not in (0, None), exits  # the survivor failed

    first = server.logs(job_id, rank=0, attempt=0)
    second = server.logs(job_id, rank=0, attempt=1)
    latest = int(CHECKPOINT.findall(first)[-1])  # the last checkpoint before the failure
    assert latest >= checkpointed
    assert RESUMED.findall(first) == []
    assert [int(k) for k in RESUMED.findall(second)] == [latest], second
    lost = steps_of(first)[-1] - latest
    assert 0 <= lost <= EVERY, (steps_of(first)[-1], latest)
    assert steps_of(second)[0] == latest + 1  # continued, did not start over
    assert steps_of(second)[-1] == total
    assert f"done steps={total} " in second
    assert cluster.processes(job_id) == {}


# --- kill -9 of the server ------------------------------------------------------------------


def test_server_killed_while_jobs_run_loses_and_duplicates_nothing(
    cluster: Cluster, tmp_path: Path
) -> None:
    first = cluster.start()
    release = {name: tmp_path / f"release-{name}" for name in ("alive", "ok", "bad")}
    # 4 virtual GPUs: ddp 2 + ok 1 + bad 1 are placed; "queued" (2 GPUs) must wait.
    jobs = {
        "ddp": first.submit(ddp_spec("ddp-long", LONG, 250, 50, max_restarts=0)),
        "alive": first.submit(sentinel_spec("alive", release["alive"], 0, gpus=0)),
        "ok": first.submit(sentinel_spec("ok", release["ok"], 0, gpus=1)),
        "bad": first.submit(sentinel_spec("bad", release["bad"], 3, gpus=1)),
    }
    ids = list(jobs.values())
    ranks = {"ddp": 2, "alive": 1, "ok": 1, "bad": 1}
    for name, job_id in jobs.items():
        wait_until(
            f"{name} to run",
            functools.partial(started, cluster, first, job_id, ranks[name]),
            120,
            lambda: describe(cluster, first, *ids),
        )
    jobs["queued"] = first.submit(sentinel_spec("queued", tmp_path / "released", 0, gpus=2))
    (tmp_path / "released").touch()  # it exits 0 as soon as it runs
    ids = list(jobs.values())

    def waits_for_gpus() -> Job | None:
        job = first.job(jobs["queued"])
        assert job["state"] == "PENDING", describe(cluster, first, *ids)
        return job if job["pending_reason"] else None

    queued = wait_until("the scheduler to look at it", waits_for_gpus, 60, cluster.output)
    wait_until(
        "ddp to train",
        lambda: steps_of(first.logs(jobs["ddp"], rank=0)),
        120,
        lambda: describe(cluster, first, *ids),
    )
    before = {name: cluster.processes(job_id) for name, job_id in jobs.items()}
    assert {name: len(p) for name, p in before.items()} == {
        "ddp": 4,
        "alive": 2,
        "ok": 2,
        "bad": 2,
        "queued": 0,
    }, before  # a wrapper and its command per rank
    for name in ("ddp", "alive", "ok", "bad"):  # exactly the processes the run records name
        assert set(before[name]) == cluster.recorded_pids(jobs[name], 0), (name, before)
    assert first.job_ids() == sorted(ids)

    first.kill9()
    for name in ("ok", "bad"):  # these end while no server runs
        release[name].touch()
        gone = functools.partial(cluster.no_processes, jobs[name])
        wait_until(f"{name} to exit", gone, 60, cluster.output)
    assert cluster.processes(jobs["ddp"]) == before["ddp"], "ddp ended too soon: more --steps"

    second = cluster.start()
    ids_after = second.job_ids()
    assert ids_after == sorted(ids)  # no job lost, none added
    story = describe(cluster, second, *ids)
    # Applied by the new server's recovery, before it served: the real outcomes.
    ok, bad = second.job(jobs["ok"]), second.job(jobs["bad"])
    assert states(ok) == UNINTERRUPTED and ok["exit_code"] == 0, story
    assert states(bad) == ["PENDING", "STARTING", "RUNNING", "FAILED"], story
    assert bad["exit_code"] == 3 and bad["events"][-1]["details"]["rank"] == 0, story
    assert "released" in second.logs(jobs["bad"])
    # Re-adopted, not launched again: the very same processes, one attempt.
    for name in ("ddp", "alive"):
        job = second.job(jobs[name])
        assert job["state"] == "RUNNING" and job["attempt"] == 1, story
        assert cluster.processes(jobs[name]) == before[name], story
        assert cluster.attempts(jobs[name]) == [0], story

    scheduled = wait_state(cluster, second, jobs["queued"], "SUCCEEDED")
    assert queued["state"] == "PENDING" and states(scheduled) == UNINTERRUPTED
    assert cluster.attempts(jobs["queued"]) == [0]

    release["alive"].touch()
    results = {
        name: wait_state(cluster, second, jobs[name], "SUCCEEDED") for name in ("alive", "ddp")
    }
    story = describe(cluster, second, *ids)
    for name, job in results.items():
        assert states(job) == UNINTERRUPTED, story  # no spurious failure, no restart
        assert (job["attempt"], job["restart_count"], job["exit_code"]) == (1, 0, 0), story
        assert cluster.attempts(jobs[name]) == [0], story
    log = second.logs(jobs["ddp"], rank=0)
    assert RESUMED.findall(log) == [] and f"done steps={LONG} " in log, log[-2000:]
    assert second.job_ids() == sorted(ids)
    assert cluster.processes() == {}
    assert_single_run_records(cluster, jobs)


def assert_single_run_records(cluster: Cluster, jobs: dict[str, str]) -> None:
    """Each job has one run record whose rank pids are distinct and not shared by others."""
    seen: dict[int, str] = {}
    for name, job_id in jobs.items():
        record: dict[str, Any] = cluster.run_record(job_id, 0)
        for rank in record["ranks"]:
            assert rank["pid"] not in seen, (name, seen)
            seen[rank["pid"]] = name


# --- kill -9 of the server, then of a worker, while no server runs ----------------------------


def test_worker_killed_while_no_server_runs_is_seen_and_restarted_by_the_next(
    cluster: Cluster,
) -> None:
    first = cluster.start()
    total = 1000
    job_id = first.submit(ddp_spec("ddp-blip", total, EVERY, 1, max_restarts=2))
    wait_until(
        "two checkpoints",
        lambda: (
            started(cluster, first, job_id, 2)
            and len(CHECKPOINT.findall(first.logs(job_id, rank=0, attempt=0))) >= 2
        ),
        120,
        lambda: describe(cluster, first, job_id),
    )
    first.kill9()
    worker = cluster.command_pid(job_id, 0, 1)
    assert worker is not None and worker in cluster.processes(job_id), "attempt 0 ended early"
    os.kill(worker, signal.SIGKILL)
    gone = functools.partial(cluster.no_processes, job_id)
    wait_until("attempt 0 to end", gone, 60, cluster.output)

    second = cluster.start()
    job = wait_state(cluster, second, job_id, "SUCCEEDED")
    story = describe(cluster, second, job_id)
    assert states(job) == [
        "PENDING", "STARTING", "RUNNING", "FAILED", "PENDING", "STARTING", "RUNNING", "SUCCEEDED"
    ], story  # fmt: skip
    failed = job["events"][3]["details"]
    assert (failed["rank"], failed["exit_code"]) == (1, -signal.SIGKILL), story
    assert (job["restart_count"], job["attempt"]) == (1, 2), story
    assert cluster.attempts(job_id) == [0, 1]
    latest = int(CHECKPOINT.findall(second.logs(job_id, rank=0, attempt=0))[-1])
    log = second.logs(job_id, rank=0, attempt=1)
    assert [int(k) for k in RESUMED.findall(log)] == [latest], log
    assert steps_of(log)[0] == latest + 1 and f"done steps={total} " in log
    assert cluster.processes() == {}
