"""A job's processes that leave its process group (`setsid` and fork) do not outlive it when
it runs as a uid of its own (the server is root): without cgroups, signals to the group miss
them, and such a process went on running after its job was cancelled while the job's GPUs
were given to another. Every process of the job's uid is the job's: the executor counts them
as the run's (the run is not over, its devices stay booked, while one lives) and kills them
with it, also when the ranks end by themselves (a rank ends with its command even while such
a process holds its output open). And the command enters its working directory as that
uid, not as the root wrapper."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from exec_helpers import wait_for

from trainyard.exec import procfs
from trainyard.exec.identity import JobUsers
from trainyard.exec.local import LaunchSpec, LocalExecutor, RunHandle

# forks a process of a new session that sleeps, its output still the rank's pipe; records it
DAEMON = (
    "import os, pathlib, sys, time\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    "        pathlib.Path(os.environ['TRAINYARD_CHECKPOINT_DIR'], 'daemon').write_text(\n"
    "            str(os.getpid()))\n"
    "        time.sleep(600)\n"
    "    os._exit(0)\n"
    "os.wait()\n"
    "print('forked', flush=True)\n"
    "time.sleep(float(sys.argv[1]))\n"
)


@pytest.fixture
def root_executor() -> Iterator[LocalExecutor]:
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("the uid tests must run as root in CI", pytrace=False)
        pytest.skip("running jobs as other uids needs root")
    top = Path(tempfile.mkdtemp(prefix="trainyard-strays-", dir="/tmp"))
    top.chmod(0o755)  # the jobs' uids pass through to their own directories
    runs = top / "runs"
    ex = LocalExecutor(runs, grace_s=1.0, users=JobUsers.create("dynamic", runs))
    yield ex
    for h in ex.handles():
        ex.stop(h, grace_s=0.5)
    shutil.rmtree(top, ignore_errors=True)  # made outside pytest's tmp_path: ours to remove


def _daemon(ex: LocalExecutor, h: RunHandle) -> int:
    path = ex.job_dir(h.job_id) / "checkpoints" / "daemon"
    wait_for(lambda: path.exists() and path.read_text().strip(), 20)
    pid = int(path.read_text())
    assert procfs.alive(pid, None) and procfs.process_group(pid) != h.pgid  # out of the group
    return pid


def test_a_cancelled_jobs_escaped_process_is_killed_and_holds_its_devices(
    root_executor: LocalExecutor,
) -> None:
    ex = root_executor
    h = ex.launch(LaunchSpec("escapes", [sys.executable, "-P", "-c", DAEMON, "600"],
                             devices=(0, 1), workers=1))  # fmt: skip
    daemon = _daemon(ex, h)
    assert ex.device_holders() == {0: [("escapes", 0)], 1: [("escapes", 0)]}
    status = ex.stop(h, grace_s=0.5)
    assert status.settled and status.state == "stopped"
    assert not procfs.alive(daemon, None)
    assert ex.device_holders() == {}


def test_a_job_that_ends_leaving_a_process_behind_ends_and_the_process_goes(
    root_executor: LocalExecutor,
) -> None:
    ex = root_executor
    h = ex.launch(LaunchSpec("leaves", [sys.executable, "-P", "-c", DAEMON, "0"],
                             devices=(2,), workers=1))  # fmt: skip
    daemon = _daemon(ex, h)
    start = time.monotonic()
    wait_for(lambda: ex.poll(h).settled, 30)
    status = ex.poll(h)
    assert status.state == "succeeded", status
    assert time.monotonic() - start < 20  # the rank ended with its command, not the daemon
    assert not procfs.alive(daemon, None)
    assert "forked" in "".join(ex.logs("leaves"))
    assert ex.device_holders() == {}


def test_the_command_enters_its_working_directory_as_the_jobs_user(
    root_executor: LocalExecutor,
) -> None:
    """The root wrapper does not enter the job's working directory for it: a directory the
    job's user may not enter (a link swapped in after submit, to the server's state) stops
    the command, one it may enter is its working directory."""
    ex = root_executor
    top = ex.root_dir.parent
    private, shared = top / "private", top / "shared"
    private.mkdir(mode=0o700)
    shared.mkdir(mode=0o755)
    where = "import os; print('cwd', os.getcwd())"
    refused = ex.launch(LaunchSpec("private", [sys.executable, "-P", "-c", where], cwd=private))
    wait_for(lambda: ex.poll(refused).settled, 30)
    assert ex.poll(refused).state == "failed"
    assert any("may not enter" in line for line in ex.logs("private"))
    ran = ex.launch(LaunchSpec("shared", [sys.executable, "-P", "-c", where], cwd=shared))
    wait_for(lambda: ex.poll(ran).settled, 30)
    assert ex.poll(ran).state == "succeeded" and f"cwd {shared}" in list(ex.logs("shared"))
