"""LocalExecutor with real subprocesses: environment, logs, success and failure, stop with a
grace period, no orphans, adoption by a new executor (a restarted server), lost runs."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from exec_helpers import wait_for

from trainyard.exec import procfs
from trainyard.exec.local import (
    WRAPPER_ENV,
    LaunchSpec,
    LocalExecutor,
    RunHandle,
    RunStatus,
    split_devices,
)

PY = sys.executable
ENV_SCRIPT = "import json, os; print(json.dumps(dict(os.environ)))"
IGNORE_TERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
    " print('ready', flush=True); time.sleep(60)"
)
SLEEP_THEN = "import sys, time; print('ready', flush=True); time.sleep({s}); sys.exit({rc})"


def settle(ex: LocalExecutor, h: RunHandle, timeout_s: float = 10.0) -> RunStatus:
    wait_for(lambda: ex.poll(h).settled, timeout_s)
    return ex.poll(h)


def logged(ex: LocalExecutor, job: str, rank: int, text: str) -> Callable[[], bool]:
    return lambda: any(text in line for line in ex.logs(job, rank=rank))


def all_pids(h: RunHandle) -> list[tuple[int, int | None]]:
    """Wrappers and the commands they started."""
    out = [(r.pid, r.start_time) for r in h.ranks]
    for r in h.ranks:
        rec = procfs.read_json(h.pid_file(r.rank))
        if rec:
            out.append((rec["pid"], rec["start_time"]))
    return out


def gone(pid: int) -> bool:
    """No such process, or only a zombie waiting for its new parent (init) to reap it."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    fields = procfs.stat_fields(pid)
    return fields is None or fields[0] == "Z"


def test_environment_per_rank(executor: LocalExecutor, tmp_path: Path) -> None:
    spec = LaunchSpec(
        "envjob",
        [PY, "-c", ENV_SCRIPT],
        attempt=2,
        workers=2,
        devices=(4, 5, 6, 7),
        env={"NCCL_ALGO": "Ring"},
        cwd=tmp_path,
        token="tok-123",
        virtual_gpus=True,
    )
    h = executor.launch(spec)
    assert settle(executor, h).state == "succeeded"
    ckpt = str((tmp_path / "root" / "jobs" / "envjob" / "checkpoints").resolve())
    ports = set()
    for rank, devices in ((0, "0,1"), (1, "2,3")):  # positions in CUDA_VISIBLE_DEVICES
        (line,) = list(executor.logs("envjob", rank=rank))
        env = json.loads(line)
        assert env["RANK"] == env["LOCAL_RANK"] == env["ROLE_RANK"] == str(rank)
        assert env["WORLD_SIZE"] == env["LOCAL_WORLD_SIZE"] == "2"
        assert env["GROUP_RANK"] == "0" and env["MASTER_ADDR"] == "127.0.0.1"
        # torchrun's way: every rank sees the job's devices; LOCAL_RANK (one GPU per rank)
        # or TRAINYARD_RANK_DEVICES (several) picks its own among them
        assert env["CUDA_VISIBLE_DEVICES"] == "4,5,6,7" and env["TRAINYARD_VIRTUAL_GPUS"] == "1"
        assert env["TRAINYARD_RANK_DEVICES"] == devices
        assert env["TRAINYARD_NOTICE_FILE"].endswith("/jobs/envjob/notice")
        assert env["TORCHELASTIC_RESTART_COUNT"] == env["TRAINYARD_ATTEMPT"] == "2"
        assert env["TRAINYARD_JOB_ID"] == "envjob" and env["TRAINYARD_TOKEN"] == "tok-123"
        assert env["TRAINYARD_API_URL"] == "http://127.0.0.1:8080"
        assert env["TRAINYARD_CHECKPOINT_DIR"] == ckpt and os.path.isdir(ckpt)
        assert env["NCCL_ALGO"] == "Ring" and env["PYTHONUNBUFFERED"] == "1"
        ports.add(env["MASTER_PORT"])
    assert ports == {str(h.port)}
    log = tmp_path / "root" / "jobs" / "envjob" / "logs" / "attempt-2" / "rank-1.log"
    assert log.is_file() and h.ranks[1].log == log


def test_the_jobs_environment_reaches_its_command_only(
    executor: LocalExecutor, tmp_path: Path
) -> None:
    """The rank wrapper runs as the server's user (root under `--job-user dynamic`) until its
    child's exec: a job's LD_PRELOAD in the wrapper's environment would run the job's code as
    that user. The wrapper's environment is the executor's fixed one; the job's reaches the
    command alone, loader variables included (the loader names a preload it cannot open,
    once per process that has it)."""
    go = tmp_path / "go"
    script = (
        "import os, time\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.01)\n"
        "print('mark', os.environ['JOB_MARK'], os.environ['LD_PRELOAD'], flush=True)"
    )
    preload = str(tmp_path / "missing-preload.so")
    spec = LaunchSpec(
        "preload", [PY, "-c", script], env={"LD_PRELOAD": preload, "JOB_MARK": "job-only"}
    )
    h = executor.launch(spec)
    with open(f"/proc/{h.ranks[0].pid}/environ", "rb") as f:  # the wrapper's
        wrapper_env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if item)
    go.touch()
    assert settle(executor, h).state == "succeeded"
    assert wrapper_env == {k.encode(): v.encode() for k, v in WRAPPER_ENV.items()}
    lines = list(executor.logs("preload", rank=0))
    assert f"mark job-only {preload}" in lines
    assert sum("cannot be preloaded" in line for line in lines) == 1, lines  # the command's


def test_rank_visibility_shows_each_rank_only_its_own_devices(
    executor: LocalExecutor, tmp_path: Path
) -> None:
    """`visible_devices: rank`: each rank sees only its own devices, indexed from 0."""
    spec = LaunchSpec(
        "rankvis", [PY, "-c", ENV_SCRIPT], workers=2, devices=(4, 5, 6, 7), cwd=tmp_path,
        visible_devices="rank",
    )  # fmt: skip
    assert settle(executor, executor.launch(spec)).state == "succeeded"
    for rank, devices in ((0, "4,5"), (1, "6,7")):
        (line,) = list(executor.logs("rankvis", rank=rank))
        env = json.loads(line)
        assert env["CUDA_VISIBLE_DEVICES"] == devices and env["TRAINYARD_RANK_DEVICES"] == "0,1"


def test_cpu_job_sees_no_device_and_no_virtual_flag(executor: LocalExecutor) -> None:
    h = executor.launch(LaunchSpec("cpu", [PY, "-c", ENV_SCRIPT]))
    settle(executor, h)
    env = json.loads(next(executor.logs("cpu")))
    assert env["CUDA_VISIBLE_DEVICES"] == "" and "TRAINYARD_VIRTUAL_GPUS" not in env


def test_logs_per_rank_and_follow(executor: LocalExecutor) -> None:
    script = (
        "import os, sys, time\nr = os environ".replace(" environ", ".environ['RANK']")
        + "\nfor i in range(3):\n    print(f'r{r} line {i}'); time.sleep(0.1)\n"
        "print('to stderr', file=sys.stderr); sys.stdout.write('no newline')\n"
    )
    executor.launch(LaunchSpec("logjob", [PY, "-c", script], workers=2))
    followed = list(executor.follow("logjob", interval_s=0.05))
    assert "[rank 1] r1 line 2" in followed and "[rank 0] no newline" in followed
    assert list(executor.logs("logjob", rank=0)) == [
        "r0 line 0",
        "r0 line 1",
        "r0 line 2",
        "to stderr",
        "no newline",
    ]
    assert list(executor.follow("logjob", rank=1))[-1] == "no newline"  # ended: returns at once
    assert list(executor.logs("nosuchjob")) == []


def test_one_rank_fails_and_the_others_are_stopped(executor: LocalExecutor, tmp_path: Path) -> None:
    go = tmp_path / "go"
    script = (
        "import os, sys, time\nprint('ready', flush=True)\n"
        f"while os.environ['RANK'] == '1' and not os.path.exists({str(go)!r}): time.sleep(0.01)\n"
        "time.sleep(0 if os.environ['RANK'] == '1' else 60); sys.exit(3)\n"
    )
    h = executor.launch(LaunchSpec("fail", [PY, "-c", script], workers=3))
    for rank in (0, 1, 2):
        wait_for(logged(executor, "fail", rank, "ready"))
    go.touch()
    wait_for(lambda: executor.poll(h).state != "running")
    st = settle(executor, h, timeout_s=5)
    assert st.state == "failed" and st.first_failed_rank == 1
    assert st.exit_codes == {0: -signal.SIGTERM, 1: 3, 2: -signal.SIGTERM}
    assert "rank 1 exited with code 3" in st.reason
    assert not any(procfs.alive(pid, t) for pid, t in all_pids(h))


def test_stop_escalates_to_sigkill_and_leaves_no_orphan(executor: LocalExecutor) -> None:
    h = executor.launch(LaunchSpec("stubborn", [PY, "-c", IGNORE_TERM], workers=2))
    for rank in (0, 1):
        wait_for(logged(executor, "stubborn", rank, "ready"))
    members = all_pids(h)
    assert len(members) == 4 and all(procfs.alive(pid, t) for pid, t in members)
    assert {procfs.process_group(pid) for pid, _ in members} == {h.pgid}
    t0 = time.monotonic()
    st = executor.stop(h, grace_s=0.5, reason="cancelled")
    took = time.monotonic() - t0
    assert 0.5 <= took < 5
    assert st.state == "stopped" and st.settled and "cancelled" in st.reason
    assert set(st.exit_codes.values()) == {-signal.SIGKILL}
    assert all(gone(pid) for pid, _ in members)
    assert executor.stop(h).state == "stopped"  # idempotent


def test_failure_escalates_to_sigkill_for_ranks_ignoring_sigterm(executor: LocalExecutor) -> None:
    executor.grace_s = 0.3
    script = "import os, sys; sys.exit(4) if os.environ['RANK'] == '1' else exec(IGNORE)"
    script = script.replace("IGNORE", repr(IGNORE_TERM))
    h = executor.launch(LaunchSpec("esc", [PY, "-c", script], workers=2))
    wait_for(logged(executor, "esc", 0, "ready"))
    st = settle(executor, h, timeout_s=5)
    assert st.state == "failed" and st.exit_codes == {0: -signal.SIGKILL, 1: 4}
    assert executor.stop(h).state == "failed"  # idempotent, keeps the outcome


def test_grandchildren_are_stopped_with_the_group(executor: LocalExecutor) -> None:
    script = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(p.pid, flush=True); time.sleep(60)\n"
    )
    h = executor.launch(LaunchSpec("tree", [PY, "-c", script]))
    wait_for(lambda: bool(list(executor.logs("tree"))))
    grandchild = int(next(executor.logs("tree")))
    assert procfs.process_group(grandchild) == h.pgid
    executor.stop(h, grace_s=1)
    wait_for(lambda: gone(grandchild), timeout_s=2)


def test_stop_of_a_cooperative_job_is_quick(executor: LocalExecutor) -> None:
    h = executor.launch(LaunchSpec("coop", [PY, "-c", SLEEP_THEN.format(s=60, rc=0)]))
    wait_for(logged(executor, "coop", 0, "ready"))
    t0 = time.monotonic()
    st = executor.stop(h, grace_s=5)
    assert time.monotonic() - t0 < 4 and st.state == "stopped"
    assert st.exit_codes == {0: -signal.SIGTERM}


def test_clean_exit_after_sigterm_is_a_stop_not_a_success(executor: LocalExecutor) -> None:
    script = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
        "print('ready', flush=True); time.sleep(60)\n"
    )
    h = executor.launch(LaunchSpec("preempted", [PY, "-c", script]))
    wait_for(logged(executor, "preempted", 0, "ready"))
    st = executor.stop(h, grace_s=5, reason="preempted")
    assert st.state == "stopped" and st.exit_codes == {0: 0} and "preempted" in st.reason


def test_success_is_kept_when_stopped_afterwards(executor: LocalExecutor) -> None:
    h = executor.launch(LaunchSpec("ok", [PY, "-c", "pass"], workers=2))
    assert settle(executor, h).state == "succeeded"
    assert executor.stop(h).state == "succeeded"
    assert not (h.run_dir / "stop.json").exists()


def test_adopt_after_a_server_restart(executor: LocalExecutor, tmp_path: Path) -> None:
    # each rank waits for its own file, so the test decides the order in which they end
    script = (
        "import os, sys, time\nr = os.environ['RANK']\nprint('ready', flush=True)\n"
        f"while not os.path.exists(os.path.join({str(tmp_path)!r}, 'go' + r)): time.sleep(0.01)\n"
        "sys.exit(0 if r == '0' else 5)\n"
    )
    h = executor.launch(LaunchSpec("adopt", [PY, "-c", script], workers=2))
    for rank in (0, 1):
        wait_for(logged(executor, "adopt", rank, "ready"))
    restarted = LocalExecutor(tmp_path / "root", grace_s=1.0)  # a new server, same root
    assert restarted.adopt("nothing-here") is None
    h2 = restarted.adopt("adopt")
    assert h2 is not None and h2.adopted and h2.pids == h.pids and h2.pgid == h.pgid
    assert h2.port == h.port and not h2.procs
    assert restarted.poll(h2).state == "running"
    (tmp_path / "go0").touch()
    wait_for(lambda: restarted.poll(h2).exit_codes[0] == 0)
    assert restarted.poll(h2).state == "running"
    (tmp_path / "go1").touch()
    st = settle(restarted, h2)
    # learnt from the wrappers' exit files, not from waiting on its own children
    assert st.state == "failed" and st.exit_codes == {0: 0, 1: 5} and st.first_failed_rank == 1
    assert restarted.known_jobs() == ["adopt"]


def test_adopted_run_can_be_stopped(executor: LocalExecutor, tmp_path: Path) -> None:
    h = executor.launch(LaunchSpec("adoptstop", [PY, "-c", IGNORE_TERM]))
    wait_for(logged(executor, "adoptstop", 0, "ready"))
    restarted = LocalExecutor(tmp_path / "root")
    h2 = restarted.adopt("adoptstop")
    assert h2 is not None
    st = restarted.stop(h2, grace_s=0.3)
    assert st.state == "stopped" and st.settled
    assert not any(procfs.alive(pid, t) for pid, t in all_pids(h))


def test_vanished_run_is_lost(executor: LocalExecutor, tmp_path: Path) -> None:
    h = executor.launch(LaunchSpec("vanish", [PY, "-c", IGNORE_TERM], workers=2))
    for rank in (0, 1):
        wait_for(logged(executor, "vanish", rank, "ready"))
    os.killpg(h.pgid, signal.SIGKILL)  # everything dies at once; nothing is deleted
    wait_for(lambda: not any(procfs.alive(pid, t) for pid, t in all_pids(h)))
    h2 = LocalExecutor(tmp_path / "root").adopt("vanish")
    assert h2 is not None
    st = LocalExecutor(tmp_path / "root").poll(h2)
    assert st.state == "lost" and st.settled and st.exit_codes == {0: None, 1: None}
    # the executor that launched it still knows the wrappers' exit status, once it has
    # reaped both (on a busy machine the first poll may have seen only one of them)
    st = settle(executor, h)
    assert st.state == "failed" and st.exit_codes == {0: -9, 1: -9}


def test_killed_worker_fails_the_job(executor: LocalExecutor) -> None:
    h = executor.launch(LaunchSpec("kill1", [PY, "-c", SLEEP_THEN.format(s=60, rc=0)], workers=2))
    for rank in (0, 1):
        wait_for(logged(executor, "kill1", rank, "ready"))
    child = procfs.read_json(h.pid_file(1))
    assert isinstance(child, dict)
    os.kill(child["pid"], signal.SIGKILL)  # kill -9 of one worker
    st = settle(executor, h)
    assert st.state == "failed" and st.first_failed_rank == 1
    assert st.exit_codes[1] == -signal.SIGKILL and "SIGKILL" in st.reason


def test_killed_wrapper_leaves_no_orphan(executor: LocalExecutor) -> None:
    h = executor.launch(LaunchSpec("killw", [PY, "-c", SLEEP_THEN.format(s=60, rc=0)]))
    wait_for(logged(executor, "killw", 0, "ready"))
    child = procfs.read_json(h.pid_file(0))
    assert isinstance(child, dict)
    os.kill(h.pids[0], signal.SIGKILL)
    st = settle(executor, h)
    assert st.state == "failed" and st.exit_codes == {0: -signal.SIGKILL}
    assert not procfs.alive(child["pid"], child["start_time"])


def test_missing_command_and_checkpoints_across_attempts(executor: LocalExecutor) -> None:
    h = executor.launch(LaunchSpec("retry", ["/nonexistent/cmd"]))
    st = settle(executor, h)
    assert st.state == "failed" and st.exit_codes == {0: 127}
    assert any("cannot start" in line for line in executor.logs("retry"))
    with pytest.raises(FileExistsError):
        executor.launch(LaunchSpec("retry", ["/nonexistent/cmd"]))
    h1 = executor.launch(LaunchSpec("retry", [PY, "-c", ENV_SCRIPT], attempt=1))
    settle(executor, h1)
    env0 = json.loads(next(executor.logs("retry", attempt=1)))
    assert env0["TRAINYARD_CHECKPOINT_DIR"].endswith("jobs/retry/checkpoints")
    assert executor.adopt("retry").attempt == 1  # type: ignore[union-attr]


def test_bad_specs(executor: LocalExecutor) -> None:
    with pytest.raises(ValueError, match="job id"):
        executor.launch(LaunchSpec("../etc", [PY]))
    with pytest.raises(ValueError, match="split evenly"):
        executor.launch(LaunchSpec("j", [PY], workers=2, devices=(0, 1, 2)))
    with pytest.raises(ValueError, match="command"):
        executor.launch(LaunchSpec("j", []))
    with pytest.raises(ValueError, match="workers"):
        executor.launch(LaunchSpec("j", [PY], workers=0))
    missing = Path("/nonexistent-trainyard/dir")  # before anything of the run exists
    with pytest.raises(ValueError, match=f"working_dir: {missing} is not a directory"):
        executor.launch(LaunchSpec("nodir", [PY], cwd=missing))
    assert not executor.job_dir("nodir").exists()
    assert split_devices((), 3) == [(), (), ()]
    assert split_devices((0, 1, 2, 3, 4, 5), 3) == [(0, 1), (2, 3), (4, 5)]


def test_run_json_is_complete(executor: LocalExecutor) -> None:
    h = executor.launch(LaunchSpec("rj", [PY, "-c", "pass"], workers=2, devices=(0, 1)))
    data = json.loads((h.run_dir / "run.json").read_text())
    assert data["pgid"] == h.pgid == h.pids[0] and data["port"] == h.port
    assert [r["pid"] for r in data["ranks"]] == h.pids
    assert all(isinstance(r["start_time"], int) for r in data["ranks"])
    assert [r["devices"] for r in data["ranks"]] == [[0], [1]]
    settle(executor, h)


def test_launch_cut_short_by_a_crash_is_a_failed_run(
    executor: LocalExecutor, tmp_path: Path
) -> None:
    # A server killed between starting rank 0 and rank 1 leaves a record of one rank of two:
    # the run must not pass for a 1-rank job (it would hang or "succeed" with a rank missing).
    h = executor.launch(LaunchSpec("partial", [PY, "-c", IGNORE_TERM], workers=2))
    for rank in (0, 1):
        wait_for(logged(executor, "partial", rank, "ready"))
    record = json.loads((h.run_dir / "run.json").read_text())
    assert record["workers"] == 2
    os.kill(h.ranks[1].pid, signal.SIGKILL)  # rank 1 "was never started"
    rec1 = procfs.read_json(h.pid_file(1))
    assert isinstance(rec1, dict)
    os.kill(int(rec1["pid"]), signal.SIGKILL)
    record["ranks"] = record["ranks"][:1]
    procfs.write_json_atomic(h.run_dir / "run.json", record)
    restarted = LocalExecutor(tmp_path / "root", grace_s=0.3)
    h2 = restarted.adopt("partial")
    assert h2 is not None and not h2.complete and h2.workers == 2
    st = restarted.poll(h2)
    assert st.state == "failed" and "launch interrupted: 1 of 2 ranks" in st.reason
    st = settle(restarted, h2)  # what did start is stopped
    assert st.state == "failed" and st.settled
    assert not any(procfs.alive(pid, t) for pid, t in all_pids(h))


def test_record_written_before_any_rank_starts(executor: LocalExecutor, tmp_path: Path) -> None:
    # a crash before the first rank started: the record says 0 of N, never "succeeded"
    h = executor.launch(LaunchSpec("norank", [PY, "-c", "pass"], workers=2))
    settle(executor, h)
    record = json.loads((h.run_dir / "run.json").read_text())
    record["ranks"], record["pgid"] = [], 0
    procfs.write_json_atomic(h.run_dir / "run.json", record)
    h2 = LocalExecutor(tmp_path / "root").adopt("norank")
    assert h2 is not None and not h2.complete
    st = LocalExecutor(tmp_path / "root").poll(h2)
    assert st.state == "failed" and st.settled and "0 of 2" in st.reason
