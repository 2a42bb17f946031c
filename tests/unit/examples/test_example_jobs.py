"""The example jobs under ``examples/jobs/`` run as real processes with real PyTorch.

The DDP example is launched the way trainyard's executor launches it: one ``subprocess.Popen``
per rank with a torchrun-compatible environment built here (a free port on 127.0.0.1), CPU and
gloo. Runs are shared between assertions to keep this folder fast; every run uses few steps.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from trainyard.jobspec import parse_job_spec

REPO = Path(__file__).resolve().parents[3]
DDP = REPO / "examples" / "jobs" / "ddp" / "train.py"
SINGLE = REPO / "examples" / "jobs" / "single" / "train.py"
FAIL = REPO / "examples" / "jobs" / "fail" / "fail.py"
PY = sys.executable

STEP_LINE = re.compile(r"^step (\d+) loss ([0-9.eE+-]+|nan)$", re.MULTILINE)
CHECKPOINT_LINE = re.compile(r"^checkpoint step=(\d+) ", re.MULTILINE)
RESUMED_LINE = re.compile(r"^resumed from step (\d+)$", re.MULTILINE)
LAUNCHER_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _base_env(checkpoint_dir: Path) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in LAUNCHER_VARS and not key.startswith(("TORCHELASTIC_", "MASTER_"))
    }
    env.update(
        TRAINYARD_CHECKPOINT_DIR=str(checkpoint_dir),
        CUDA_VISIBLE_DEVICES="",  # CPU + gloo, also on a machine with GPUs
        OMP_NUM_THREADS="1",
    )
    return env


def _steps(text: str) -> list[tuple[int, float]]:
    return [(int(step), float(loss)) for step, loss in STEP_LINE.findall(text)]


@dataclass
class Rank:
    proc: subprocess.Popen[bytes]
    out: Path
    err: Path

    def stdout(self) -> str:
        return self.out.read_text()

    def stderr(self) -> str:
        return self.err.read_text()


class Job:
    """The ranks of one DDP run, each a plain process with its own log files."""

    def __init__(self, workdir: Path, name: str, world: int, args: list[str]) -> None:
        checkpoint_dir = workdir / "checkpoints"
        port = _free_port()
        self.ranks: list[Rank] = []
        for rank in range(world):
            env = _base_env(checkpoint_dir)
            env.update(
                RANK=str(rank),
                LOCAL_RANK=str(rank),
                WORLD_SIZE=str(world),
                LOCAL_WORLD_SIZE=str(world),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
            )
            out, err = workdir / f"{name}.rank{rank}.out", workdir / f"{name}.rank{rank}.err"
            with out.open("wb") as stdout, err.open("wb") as stderr:
                proc = subprocess.Popen(
                    [PY, str(DDP), *args],
                    cwd=workdir,
                    env=env,
                    stdout=stdout,
                    stderr=stderr,
                    start_new_session=True,
                )
            self.ranks.append(Rank(proc, out, err))

    def wait(self, timeout: float = 90.0) -> list[int]:
        deadline = time.monotonic() + timeout
        return [r.proc.wait(timeout=max(0.1, deadline - time.monotonic())) for r in self.ranks]

    def wait_for(
        self,
        pattern: re.Pattern[str],
        predicate: Callable[[list[str]], bool],
        timeout: float = 60.0,
    ) -> str:
        """Poll rank 0's stdout until ``predicate(matches)`` holds; return the text."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            exited = any(r.proc.poll() is not None for r in self.ranks)
            text = self.ranks[0].stdout()
            if predicate(pattern.findall(text)):
                return text
            if exited:
                break
            time.sleep(0.02)
        self.kill()
        raise AssertionError(f"rank 0 never got there:\n{self.describe()}")

    def kill(self) -> None:
        for r in self.ranks:
            if r.proc.poll() is None:
                r.proc.kill()
                r.proc.wait()

    def describe(self) -> str:
        return "\n".join(
            f"--- rank {i} rc={r.proc.poll()}\n{r.stdout()[-1500:]}\n{r.stderr()[-1500:]}"
            for i, r in enumerate(self.ranks)
        )


def _checkpoint_steps(directory: Path, suffix: str = ".pt") -> list[int]:
    return sorted(int(p.name[5 : -len(suffix)]) for p in directory.glob(f"ckpt-*{suffix}"))


# --- DDP: train, kill -9 a rank, restart from the checkpoint, SIGTERM, resume at world size 1 --
#
# One story, run once (each launch costs seconds of imports), its phases asserted separately.

EVERY = 25  # --checkpoint-every of the story's 2-rank runs


@dataclass
class Story:
    checkpoints: Path
    killed: Job
    survivor_seconds: float
    checkpoint_before_kill: int
    restart: Job
    resumed_after_kill: int
    stopped: int
    single: Job
    again: Job
    seconds: float


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Story]:
    workdir = tmp_path_factory.mktemp("ddp")
    checkpoints = workdir / "checkpoints"
    args = ["--steps", "1000000", "--checkpoint-every", str(EVERY), "--log-every", "1"]
    started = time.monotonic()
    jobs: list[Job] = []
    try:
        # 1. Two ranks train until two checkpoints exist, then rank 1 is killed with SIGKILL.
        killed = Job(workdir, "killed", 2, args)
        jobs.append(killed)
        killed.wait_for(CHECKPOINT_LINE, lambda found: len(found) >= 2)
        killed.ranks[1].proc.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        killed.ranks[0].proc.wait(timeout=15)
        survivor_seconds = time.monotonic() - killed_at
        killed.ranks[1].proc.wait(timeout=5)
        before_kill = int(CHECKPOINT_LINE.findall(killed.ranks[0].stdout())[-1])

        # 2. The executor restarts the job; once it trains again it is stopped with SIGTERM.
        # A partial file of a writer killed while saving is never taken for a checkpoint.
        (checkpoints / ".ckpt-99999999.pt.tmp-4242").write_bytes(b"partial")
        restart = Job(workdir, "restart", 2, args)
        jobs.append(restart)
        text = restart.wait_for(STEP_LINE, lambda found: len(found) >= 5)
        resumed = int(RESUMED_LINE.findall(text)[0])
        for rank in restart.ranks:
            rank.proc.send_signal(signal.SIGTERM)
        restart.wait(timeout=30)
        found = re.findall(r"^stopped by SIGTERM at step=(\d+)$", restart.ranks[0].stdout(), re.M)
        assert found, restart.describe()
        stopped = int(found[0])

        # 3. The 2-rank checkpoint resumes at world size 1 and runs to the end.
        single = Job(workdir, "single", 1, ["--steps", str(stopped + 20)])
        jobs.append(single)
        single.wait()
        seconds = time.monotonic() - started  # the story of phases 1-3

        # 4. Two ranks started again on the finished checkpoint have nothing left to train.
        again = Job(workdir, "again", 2, ["--steps", str(stopped + 20)])
        jobs.append(again)
        again.wait()
        yield Story(
            checkpoints,
            killed,
            survivor_seconds,
            before_kill,
            restart,
            resumed,
            stopped,
            single,
            again,
            seconds,
        )
    finally:
        for job in jobs:
            job.kill()


def test_ddp_two_ranks_train_log_and_checkpoint(story: Story) -> None:
    out = story.killed.ranks[0].stdout()
    assert "start world_size=2 backend=gloo device=cpu steps=1000000" in out
    steps = _steps(out)
    assert [s for s, _ in steps] == list(range(1, len(steps) + 1))  # --log-every 1
    assert steps[0][1] > 2 * steps[-1][1], out  # the loss clearly falls
    assert [int(s) for s in CHECKPOINT_LINE.findall(out)][:2] == [EVERY, 2 * EVERY]
    assert story.killed.ranks[1].stdout() == ""  # only rank 0 logs
    # Written aside and renamed into place; stale partial files are removed by the next save.
    assert not list(story.checkpoints.glob(".*tmp*"))


def test_ddp_peer_killed_survivor_exits_nonzero_at_once(story: Story) -> None:
    assert story.killed.ranks[1].proc.returncode == -signal.SIGKILL
    assert story.killed.ranks[0].proc.returncode != 0, story.killed.describe()
    assert story.survivor_seconds < 5  # gloo notices the dead peer at once
    assert "failed" in story.killed.ranks[0].stderr()


def test_ddp_restart_resumes_losing_at_most_one_checkpoint_interval(story: Story) -> None:
    last_step = _steps(story.killed.ranks[0].stdout())[-1][0]
    assert story.resumed_after_kill >= story.checkpoint_before_kill
    assert last_step - story.resumed_after_kill <= EVERY
    steps = _steps(story.restart.ranks[0].stdout())
    assert steps[0][0] == story.resumed_after_kill + 1  # continued, did not start over
    first_loss = _steps(story.killed.ranks[0].stdout())[0][1]
    assert all(loss < first_loss / 2 for _, loss in steps)  # the trained model was loaded


def test_ddp_sigterm_finishes_the_step_checkpoints_and_exits_143(story: Story) -> None:
    assert [r.proc.returncode for r in story.restart.ranks] == [143, 143]
    assert story.stopped > story.resumed_after_kill
    assert _steps(story.restart.ranks[0].stdout())[-1][0] == story.stopped
    assert f"checkpoint step={story.stopped} " in story.restart.ranks[0].stdout()


def test_ddp_two_rank_checkpoint_resumes_at_world_size_one(story: Story) -> None:
    assert story.single.ranks[0].proc.returncode == 0, story.single.describe()
    out = story.single.ranks[0].stdout()
    assert "start world_size=1 backend=gloo" in out
    assert RESUMED_LINE.findall(out) == [str(story.stopped)]
    end = story.stopped + 20
    logged = [s for s, _ in _steps(out)]
    assert logged == [s for s in range(story.stopped + 1, end + 1) if s % 10 == 0 or s == end]
    assert re.search(rf"^done steps={end} final_loss=", out, re.MULTILINE)
    assert _checkpoint_steps(story.checkpoints)[-1] == end
    assert len(_checkpoint_steps(story.checkpoints)) <= 3  # --keep 3
    assert story.seconds < 90


def test_ddp_resumed_at_its_last_step_reports_the_real_loss_and_succeeds(story: Story) -> None:
    """A run whose checkpoint already holds the last step trains nothing, reports that step's
    loss (kept in the checkpoint, not nan) and both ranks exit 0 (a clean teardown)."""
    assert [r.proc.returncode for r in story.again.ranks] == [0, 0], story.again.describe()
    end = story.stopped + 20
    final = re.compile(rf"^done steps={end} final_loss=(\S+) ", re.MULTILINE)
    first = final.findall(story.single.ranks[0].stdout())
    second = final.findall(story.again.ranks[0].stdout())
    assert first and second == first, story.again.describe()
    assert second[0] != "nan"
    assert story.again.ranks[1].stderr() == ""


# --- DDP under real torchrun -----------------------------------------------------------------


def test_ddp_under_torchrun(tmp_path: Path) -> None:
    env = _base_env(tmp_path / "checkpoints")
    torchrun = [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    result = subprocess.run(
        [*torchrun, str(DDP), "--steps", "30", "--checkpoint-every", "10"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "start world_size=2 backend=gloo" in result.stdout
    steps = _steps(result.stdout)
    assert [s for s, _ in steps] == [1, 10, 20, 30]
    assert steps[0][1] > 2 * steps[-1][1]
    assert "done steps=30 " in result.stdout
    assert _checkpoint_steps(tmp_path / "checkpoints") == [10, 20, 30]


# --- single-process and failing examples -----------------------------------------------------


def _run(script: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, str(script), *args],
        cwd=cwd,
        env=_base_env(cwd / "checkpoints"),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_single_process_trains_and_resumes(tmp_path: Path) -> None:
    first = _run(SINGLE, ["--steps", "100", "--checkpoint-every", "50"], tmp_path)
    assert first.returncode == 0, first.stderr
    steps = _steps(first.stdout)
    assert steps[0][0] == 1 and steps[-1][0] == 100
    assert steps[0][1] > 10 * steps[-1][1]
    assert _checkpoint_steps(tmp_path / "checkpoints", ".pkl") == [50, 100]

    again = _run(SINGLE, ["--steps", "150", "--checkpoint-every", "50"], tmp_path)
    assert again.returncode == 0, again.stderr
    assert RESUMED_LINE.findall(again.stdout) == ["100"]
    resumed = _steps(again.stdout)
    assert resumed[0][0] == 110 and resumed[-1][0] == 150
    assert all(loss < steps[0][1] / 10 for _, loss in resumed)
    assert "done steps=150 " in again.stdout


def test_single_process_sigterm_checkpoints_and_exits_143(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [PY, str(SINGLE), "--steps", "100000000", "--checkpoint-every", "0"],
        cwd=tmp_path,
        env=_base_env(tmp_path / "checkpoints"),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("start")
        assert proc.stdout.readline().startswith("step 1 ")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert proc.returncode == 143
    stopped = int(re.findall(r"^stopped by SIGTERM at step=(\d+)$", out, re.MULTILINE)[0])
    assert _checkpoint_steps(tmp_path / "checkpoints", ".pkl") == [stopped]


def test_fail_example_exits_3_with_its_output(tmp_path: Path) -> None:
    result = _run(FAIL, ["--after-steps", "2"], tmp_path)
    assert result.returncode == 3
    assert result.stdout.splitlines() == [
        "start after_steps=2",
        "step 1",
        "step 2",
        "failing on purpose after 2 steps",
    ]
    assert result.stderr.strip() == "error: simulated failure (exit code 3)"


# --- the job specs ---------------------------------------------------------------------------


@pytest.mark.parametrize("folder", ["ddp", "single", "fail"])
def test_job_spec_is_valid_and_runs_the_example(folder: str) -> None:
    spec = parse_job_spec((REPO / "examples" / "jobs" / folder / "job.yaml").read_text())
    assert spec.queue == "default"
    assert spec.command[0] == "python"
    assert (REPO / spec.command[1]).is_file()  # paths are relative to the repository root
    assert spec.workers == (2 if folder == "ddp" else 1)
    assert spec.gpus == {"ddp": 2, "single": 1, "fail": 0}[folder]
