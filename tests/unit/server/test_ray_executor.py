"""The Ray executor on a real Ray cluster of three nodes (`ray_cluster.py`): discovery, ranks
on the nodes and devices asked for with torchrun's multi-node environment, logs relayed to the
server's files, a killed rank (the job's failure) against a lost node (the infrastructure's),
stop with a notice, adoption by a new executor, and fencing of an older attempt."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trainyard.exec import procfs
from trainyard.exec.run import Host, LaunchSpec, RunHandle, RunStatus

ENV_DUMP = (
    "import json, os, time; keys = ('RANK', 'LOCAL_RANK', 'NODE_RANK', 'GROUP_RANK', "
    "'WORLD_SIZE', 'LOCAL_WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT', 'CUDA_VISIBLE_DEVICES', "
    "'TRAINYARD_NODE', 'TRAINYARD_RANK_DEVICES', 'TRAINYARD_VIRTUAL_GPUS'); "
    "print(json.dumps({k: os.environ.get(k) for k in keys}), flush=True); "
    "time.sleep(float(os.environ.get('NAP', '0')))"
)
SLEEPER = "import time; print('up', flush=True); time.sleep(120)"


@pytest.fixture
def executor(ray_nodes: Any, tmp_path: Path) -> Iterator[Any]:
    from trainyard.exec.ray import RayExecutor

    ex = RayExecutor(tmp_path / "runs", address=ray_nodes.address, virtual_gpus=True, grace_s=2.0)
    try:
        yield ex
    finally:
        for handle in ex.handles():
            ex.stop(handle, grace_s=0.5, reason="test teardown")
        ex.close()


def _spec(job: str, code: str, hosts: tuple[Host, ...], **kw: Any) -> LaunchSpec:
    return LaunchSpec(job, [sys.executable, "-c", code], hosts=hosts, virtual_gpus=True, **kw)


def _settle(ex: Any, handle: RunHandle, timeout_s: float = 60.0) -> RunStatus:
    deadline = time.monotonic() + timeout_s
    while True:
        status: RunStatus = ex.poll(handle)
        if status.settled:
            return status
        assert time.monotonic() < deadline, status
        time.sleep(0.05)


def _wait_output(ex: Any, handle: RunHandle, rank: int, text: str, timeout_s: float = 60.0) -> None:
    log = next(r.log for r in handle.ranks if r.rank == rank)
    deadline = time.monotonic() + timeout_s
    while text not in log.read_text():
        assert time.monotonic() < deadline, log.read_text()
        ex.poll(handle)
        time.sleep(0.05)


def test_nodes_come_from_ray_with_their_gpus_and_racks(executor: Any) -> None:
    nodes = {n.name: n for n in executor.nodes() if n.alive}
    assert sorted(nodes) == ["w1", "w2", "w3"]  # the head offers no GPU: not a node of ours
    for name, node in nodes.items():
        assert (node.gpus, node.gpu_type, node.virtual) == (4, "virtual", True)
        assert node.topology == ({"w1": "r1", "w2": "r1", "w3": "r2"}[name],)
        assert node.engine_id and node.address == "127.0.0.1"


def test_ranks_run_on_the_nodes_and_devices_asked_with_torchrun_env(executor: Any) -> None:
    hosts = (Host("w2", (2, 3), 2), Host("w1", (0, 1), 2))
    handle = executor.launch(_spec("j-env", ENV_DUMP, hosts))
    status = _settle(executor, handle)
    assert status.state == "succeeded" and status.exit_codes == {0: 0, 1: 0, 2: 0, 3: 0}
    seen = {r.rank: json.loads(r.log.read_text().splitlines()[0]) for r in handle.ranks}
    assert [r.node for r in handle.ranks] == ["w2", "w2", "w1", "w1"]  # rank 0's node first
    port = seen[0]["MASTER_PORT"]
    for rank, env in seen.items():
        node_rank, local = divmod(rank, 2)
        assert env["RANK"] == str(rank) and env["LOCAL_RANK"] == str(local)
        assert env["NODE_RANK"] == env["GROUP_RANK"] == str(node_rank)
        assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == ("4", "2")
        assert env["MASTER_ADDR"] == "127.0.0.1" and env["MASTER_PORT"] == port
        assert env["TRAINYARD_NODE"] == hosts[node_rank].node
        # torchrun's view: every rank sees its node's devices of the job, LOCAL_RANK picks
        assert env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, hosts[node_rank].devices))
        assert env["TRAINYARD_RANK_DEVICES"] == str(local)
        assert env["TRAINYARD_VIRTUAL_GPUS"] == "1"
    record = json.loads((handle.run_dir / "run.json").read_text())
    assert [r["node"] for r in record["ranks"]] == ["w2", "w2", "w1", "w1"]


def test_a_killed_rank_is_the_jobs_failure_and_stops_the_others(executor: Any) -> None:
    handle = executor.launch(_spec("j-kill", SLEEPER, (Host("w1", (0,), 1), Host("w3", (0,), 1))))
    _wait_output(executor, handle, 1, "up")
    os.kill(handle.ranks[1].pid, signal.SIGKILL)
    status = _settle(executor, handle)
    assert (status.state, status.first_failed_rank, status.infra) == ("failed", 1, False)
    assert status.exit_codes[1] == -signal.SIGKILL and status.exit_codes[0] == -signal.SIGTERM
    assert "killed by signal 9" in status.reason
    assert not any(procfs.alive(r.pid, None) for r in handle.ranks)


def test_a_command_that_cannot_start_fails_for_good_naming_why(executor: Any) -> None:
    # as the local executor (outside review 12, F4): not an exit code 127 retried with back-off
    spec = LaunchSpec(
        "j-nocmd", ["/nonexistent/train"], hosts=(Host("w2", (0,), 1),), virtual_gpus=True
    )
    handle = executor.launch(spec)
    status = _settle(executor, handle)
    assert (status.state, status.final, status.infra) == ("failed", True, False)
    assert status.reason.startswith("rank 0 could not start on node w2: cannot start")
    assert "No such file" in status.reason
    kept = procfs.read_json(handle.exit_file(0))  # on disk: a restarted server reads the same
    assert isinstance(kept, dict) and kept["error"].startswith("on node w2: cannot start")


def test_a_run_ends_when_its_ranks_exited_not_when_the_server_looked(executor: Any) -> None:
    """A server that polls late (it was restarting, its database was away) bills and blames
    by when each rank exited on its node (outside review 10: a 6 s job was billed 24 s)."""
    code = (
        "import os, sys, time; print('up', flush=True); "
        "time.sleep(1.5 + 1.0 * int(os.environ['RANK'])); sys.exit(3)"
    )
    launched = time.time()
    handle = executor.launch(_spec("j-late", code, (Host("w1", (0,), 1), Host("w2", (0,), 1))))
    _wait_output(executor, handle, 1, "up")
    time.sleep(5.0)  # both ranks have exited meanwhile (rank 0 first); nobody polled
    looked = time.time()
    status = _settle(executor, handle)
    assert status.state == "failed" and status.exit_codes == {0: 3, 1: 3}
    assert status.first_failed_rank == 0  # it exited first, though both were seen at once
    assert status.ended_at is not None and launched < status.ended_at < looked - 2.0


def test_a_lost_node_is_an_infrastructure_failure(executor: Any, ray_nodes: Any) -> None:
    handle = executor.launch(_spec("j-node", SLEEPER, (Host("w1", (0,), 1), Host("w3", (1,), 1))))
    _wait_output(executor, handle, 1, "up")
    ray_nodes.remove("w3")
    status = _settle(executor, handle)
    assert (status.state, status.first_failed_rank, status.infra) == ("failed", 1, True)
    assert "node w3" in status.reason and status.exit_codes[1] is None
    deadline = time.monotonic() + 30
    while any(n.name == "w3" and n.alive for n in executor.nodes()):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert not any(procfs.alive(r.pid, None) for r in handle.ranks)  # nothing left behind


def test_stop_writes_the_notice_then_signals(executor: Any) -> None:
    code = (
        "import os, signal, sys, time\n"
        "def bye(*_):\n"
        "    print('notice', open(os.environ['TRAINYARD_NOTICE_FILE']).read(), flush=True)\n"
        "    sys.exit(85)\n"
        "signal.signal(signal.SIGTERM, bye)\nprint('up', flush=True)\ntime.sleep(60)\n"
    )
    handle = executor.launch(_spec("j-stop", code, (Host("w2", (1,), 1),)))
    _wait_output(executor, handle, 0, "up")
    status = executor.stop(handle, reason="preempt")
    assert status.state == "stopped" and status.settled and status.exit_codes == {0: 85}
    assert "preempt" in handle.ranks[0].log.read_text()


def test_a_new_executor_adopts_a_live_run_and_fences_it_before_the_next_attempt(
    executor: Any, ray_nodes: Any, tmp_path: Path
) -> None:
    from trainyard.exec.ray import RayExecutor

    hosts = (Host("w1", (2,), 1), Host("w2", (2,), 1))
    first = executor.launch(_spec("j-fence", SLEEPER, hosts))
    _wait_output(executor, first, 0, "up")
    again = RayExecutor(tmp_path / "runs", address=ray_nodes.address, virtual_gpus=True)
    adopted = again.adopt("j-fence")
    assert adopted is not None and adopted.attempt == 0 and adopted.adopted
    assert again.poll(adopted).state == "running"
    # attempt 1 starts only once every rank of attempt 0 is gone
    second = again.launch(_spec("j-fence", SLEEPER, hosts, attempt=1))
    assert not any(procfs.alive(r.pid, None) for r in first.ranks)
    _wait_output(again, second, 0, "up")
    assert again.poll(second).state == "running"
    again.stop(second, grace_s=0.5)
    again.close()


def test_output_read_by_a_server_that_died_is_read_again_by_the_next(
    executor: Any, ray_nodes: Any, tmp_path: Path
) -> None:
    """A read in flight when the server died emptied the actor's buffer, and that output
    never reached the log (outside review 10, F7: a line went missing across a crash)."""
    from trainyard.exec.ray import RayExecutor

    code = (
        "import time\nfor i in range(300):\n    print(f'line {i}', flush=True)\n"
        "    time.sleep(0.01)\ntime.sleep(1)"
    )
    handle = executor.launch(_spec("j-reread", code, (Host("w1", (3,), 1),)))
    _wait_output(executor, handle, 0, "line 50")
    executor.poll(handle)  # a read is in flight: its output is never written by this server
    time.sleep(0.5)
    again = RayExecutor(tmp_path / "runs", address=ray_nodes.address, virtual_gpus=True)
    try:
        adopted = again.adopt("j-reread")
        assert adopted is not None
        status = _settle(again, adopted)
        assert status.state == "succeeded"
        lines = handle.ranks[0].log.read_text().splitlines()
        seen = {int(line.split()[1]) for line in lines if line.startswith("line ")}
        assert seen == set(range(300)), sorted(set(range(300)) - seen)
    finally:
        again.close()


def test_gpu_probes_run_on_each_node_and_say_why_checks_are_off(
    ray_nodes: Any, tmp_path: Path
) -> None:
    from trainyard.exec.ray import RayExecutor

    # declared GPUs are not probed unless asked: nothing to read there
    plain = RayExecutor(tmp_path / "a", address=ray_nodes.address, virtual_gpus=True)
    plain.nodes()
    assert plain.gpu_problems() == {} and plain.gpu_checks_off() == {}
    plain.close()
    # asked: a probe actor on every node opens NVML there (the real pynvml; no driver here)
    ex = RayExecutor(tmp_path / "b", address=ray_nodes.address, virtual_gpus=True, gpu_checks=True)
    try:
        ex.nodes()
        deadline = time.monotonic() + 60
        while len(ex.gpu_checks_off()) < 3:
            found = ex.gpu_problems()  # probes still starting answer at a later call
            assert all(v == [] for v in found.values()), found
            assert time.monotonic() < deadline, ex.gpu_checks_off()
        off = ex.gpu_checks_off()
        assert sorted(off) == ["w1", "w2", "w3"]
        assert all(why.startswith("NVML:") for why in off.values()), off
        assert all(v == [] for v in ex.gpu_problems().values())
    finally:
        ex.close()


def _ppid(pid: int) -> int:
    fields = procfs.stat_fields(pid)
    assert fields is not None
    return int(fields[1])


def test_a_stop_reaches_a_rank_whose_supervisor_does_not_answer(executor: Any) -> None:
    """Outside review 6 (M3): a cancel while the rank's supervisor actor hung left the rank
    running and its GPUs held for good; a requested stop now ends, as a failing run's does,
    with Ray killing the actors that do not answer (the rank dies with its actor)."""
    handle = executor.launch(_spec("j-hung", SLEEPER, (Host("w1", (3,), 1),)))
    _wait_output(executor, handle, 0, "up")
    rank = handle.ranks[0].pid
    supervisor = _ppid(rank)
    os.kill(supervisor, signal.SIGSTOP)
    try:
        executor.request_stop(handle, reason="cancelled by its user")
        status = _settle(executor, handle, timeout_s=90.0)
        assert status.settled and status.exit_codes[0] is None  # its actor was killed
        deadline = time.monotonic() + 10
        while procfs.alive(rank, None):
            assert time.monotonic() < deadline, "the rank outlived its killed supervisor"
            time.sleep(0.05)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(supervisor, signal.SIGCONT)


def test_a_rank_nobody_can_reach_stops_when_the_next_attempt_is_fenced(
    executor: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside review 6 (H2): a node frozen or cut off is declared dead by Ray while its
    ranks live on, out of reach of the actor kills that fence an old attempt. Here the kills
    are switched off, as if Ray no longer listed the actors: the rank of attempt 0 reads the
    job's fence in the shared directory and is gone before attempt 1 starts beside it."""
    first = executor.launch(_spec("j-cut", SLEEPER, (Host("w1", (2,), 1),)))
    _wait_output(executor, first, 0, "up")
    monkeypatch.setattr(executor, "_fence", lambda job_id, attempt: None)
    second = executor.launch(_spec("j-cut", SLEEPER, (Host("w2", (2,), 1),), attempt=1))
    assert not procfs.alive(first.ranks[0].pid, None)  # gone before attempt 1 started
    status = _settle(executor, first)
    assert status.exit_codes == {0: -signal.SIGKILL}
    _wait_output(executor, first, 0, "attempt 1 of this job started: this rank was killed")
    _wait_output(executor, second, 0, "up")
    assert executor.poll(second).state == "running"


UID_PROBE = (
    "import os, sys\n"
    "open(os.path.join(os.environ['TRAINYARD_CHECKPOINT_DIR'], 'r' + os.environ['RANK']), 'w')"
    ".write('x')\n"
    "print(os.getuid(), os.getgid(), os.getgroups(), oct(os.umask(0)), flush=True)\n"
    "try:\n    open(sys.argv[1]).read()\n    print('read it', flush=True)\n"
    "except OSError as error:\n    print('denied', error.errno, flush=True)\n"
)


# A rank that starts a process in a session of its own (it escapes the rank's process group),
# says so, and sleeps.
ESCAPEE = (
    "import subprocess, sys, time; "
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], "
    "start_new_session=True); print('escaped', flush=True); time.sleep(600)"
)


def test_with_dynamic_job_users_ranks_run_as_the_jobs_own_uid(ray_nodes: Any) -> None:
    """`--job-user dynamic` on Ray (outside review 6, H1: every rank ran as the Ray workers'
    root and read what root reads): each rank of a two-node job runs as the job's uid, with
    no supplementary group and umask 077, writes its checkpoints folder (chowned to it) and
    cannot read a file private to the server's user."""
    from trainyard.exec.identity import JobUsers
    from trainyard.exec.ray import RayExecutor

    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("the uid tests must run as root in CI", pytrace=False)
        pytest.skip("running jobs as other uids needs root")
    top = Path(tempfile.mkdtemp(prefix="trainyard-rayuid-", dir="/tmp"))
    try:
        top.chmod(0o755)  # the job's uid passes through to its own folders
        secret = top / "secret"
        secret.write_text("the server's")
        secret.chmod(0o600)
        runs = top / "runs"
        users = JobUsers.create("dynamic", runs)
        ex = RayExecutor(runs, address=ray_nodes.address, virtual_gpus=True, users=users)
        try:
            spec = LaunchSpec(
                "j-uid", [sys.executable, "-c", UID_PROBE, str(secret)],
                hosts=(Host("w1", (1,), 1), Host("w3", (1,), 1)), virtual_gpus=True,
            )  # fmt: skip
            handle = ex.launch(spec)
            status = _settle(ex, handle)
            assert status.state == "succeeded", [r.log.read_text() for r in handle.ranks]
            uid = int((ex.job_dir("j-uid") / "uid").read_text())
            assert uid != 0
            for rank in handle.ranks:
                lines = rank.log.read_text().splitlines()
                assert lines[0] == f"{uid} {uid} [] 0o77" and lines[1] == "denied 13", lines
                assert (ex.job_dir("j-uid") / "checkpoints" / f"r{rank.rank}").exists()
            assert (ex.job_dir("j-uid") / "checkpoints").stat().st_uid == uid
            assert any("ranks run as uids of their own" in n for n in handle.notes)
            # a process that leaves the rank's session (setsid) dies with the run too, as on
            # the local executor (outside review 10: it outlived cancel, as the job's uid)
            escape = LaunchSpec(
                "j-escape", [sys.executable, "-c", ESCAPEE],
                hosts=(Host("w2", (0,), 1),), virtual_gpus=True,
            )  # fmt: skip
            handle = ex.launch(escape)
            _wait_output(ex, handle, 0, "escaped")
            escapee_uid = int((ex.job_dir("j-escape") / "uid").read_text())
            assert len(procfs.pids_of_uid(escapee_uid)) >= 2  # the rank and its escapee
            ex.stop(handle, grace_s=0.5, reason="cancelled")
            _settle(ex, handle)
            deadline = time.monotonic() + 10
            while procfs.pids_of_uid(escapee_uid):
                assert time.monotonic() < deadline, procfs.pids_of_uid(escapee_uid)
                time.sleep(0.1)
        finally:
            ex.close()
    finally:
        shutil.rmtree(top, ignore_errors=True)  # made outside pytest's tmp_path: ours to remove


def test_an_exit_reads_as_code_and_time_and_a_bare_code_of_an_older_actor() -> None:
    from trainyard.exec.ray.runs import exit_of

    assert exit_of({"code": -9, "at": 1000.0}) == (-9, 1000.0)
    _code, ahead = exit_of({"code": 0, "at": time.time() + 3600})
    assert ahead is not None and ahead <= time.time()  # not ahead of the server's clock
    assert exit_of(3) == (3, None)  # an actor of a server before this one: no time
