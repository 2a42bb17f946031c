"""The elastic DDP example (``examples/jobs/elastic/train.py``) as real processes, real PyTorch.

Rules shown:
- at world 2, a notice (``resize`` in ``TRAINYARD_NOTICE_FILE``) and SIGTERM mid-run make
  every rank stop after the same step, save a checkpoint the SDK can load and exit 85
  (`sdk.EXIT_CHECKPOINTED`);
- that checkpoint resumes at world 1 (no launcher: the script's own fallback), from the saved
  step, to the end; with the global batch fixed, the result is that of an uninterrupted run;
- SIGTERM to one rank alone stops both ranks after the same step (`requested_by_any`);
- a run with every core kept busy by other processes still ends cleanly (exit 0);
- `job.yaml` asks for 1 to 4 GPUs, one rank each, with a global batch every size divides.

Ranks are launched as trainyard's executor launches them: one process per rank with the
torchrun environment (a free port on 127.0.0.1), CPU and gloo. Little emulated device time
(``--device-ms``) keeps each run to a few seconds of training; timeouts are generous and no
timing is asserted.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainyard.jobspec import parse_job_spec
from trainyard.sdk import EXIT_CHECKPOINTED, AsyncCheckpointer

REPO = Path(__file__).resolve().parents[3]
TRAIN = REPO / "examples" / "jobs" / "elastic" / "train.py"
LAUNCHER_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK")
STEP = re.compile(r"^step (\d+) loss (\S+) t=", re.MULTILINE)
DONE = re.compile(r"^done steps=(\d+) final_loss=(\S+) ", re.MULTILINE)
FAST = ["--device-ms", "10", "--log-every", "5", "--checkpoint-every", "10"]
TIMEOUT = 300.0  # seconds; a busy 2-core machine is slow, nothing here is timed


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env(workdir: Path) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in LAUNCHER_VARS
        and not key.startswith(("TORCHELASTIC_", "MASTER_", "TRAINYARD_"))
    }
    env.update(
        TRAINYARD_CHECKPOINT_DIR=str(workdir / "checkpoints"),
        CUDA_VISIBLE_DEVICES="",  # CPU + gloo, also on a machine with GPUs
        OMP_NUM_THREADS="1",
    )
    return env


class Run:
    """One run of the example: `world` rank processes (none of the launcher's variables for a
    world of 1 with `launcher=False`), each with its own output files."""

    def __init__(
        self,
        workdir: Path,
        name: str,
        world: int,
        args: list[str],
        launcher: bool = True,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        env = {**_env(workdir), **(extra_env or {})}
        port = str(_free_port())
        self.procs: list[subprocess.Popen[bytes]] = []
        self.outs: list[Path] = []
        for rank in range(world):
            rank_env = dict(env)
            if launcher:
                rank_env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world))
                rank_env.update(LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1")
                rank_env["MASTER_PORT"] = port
            out = workdir / f"{name}-rank{rank}.out"
            with out.open("wb") as stdout:
                proc = subprocess.Popen(
                    [sys.executable, str(TRAIN), *args],
                    cwd=workdir, env=rank_env, stdout=stdout, stderr=subprocess.STDOUT,
                )  # fmt: skip
            self.procs.append(proc)
            self.outs.append(out)

    def output(self, rank: int = 0) -> str:
        return self.outs[rank].read_text()

    def wait(self) -> list[int]:
        try:
            return [proc.wait(TIMEOUT) for proc in self.procs]
        finally:
            self.kill()

    def kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def until_step(self, step: int) -> None:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            steps = [int(s) for s, _loss in STEP.findall(self.output())]
            if steps and steps[-1] >= step:
                return
            if any(proc.poll() is not None for proc in self.procs):
                raise AssertionError(f"a rank ended early:\n{self.output()}")
            time.sleep(0.1)
        raise AssertionError(f"step {step} never logged:\n{self.output()}")


def _done(text: str) -> tuple[int, float]:
    found = DONE.search(text)
    assert found is not None, text
    return int(found[1]), float(found[2])


def test_notice_checkpoints_and_exits_85_then_resumes_at_world_1(tmp_path: Path) -> None:
    notice = tmp_path / "notice"
    env = {"TRAINYARD_NOTICE_FILE": str(notice)}
    run = Run(tmp_path, "w2", 2, ["--steps", "100000", *FAST], extra_env=env)
    try:
        run.until_step(20)
        notice.write_text("resize\n")  # as the executor does: the reason first, then SIGTERM
        for proc in run.procs:
            proc.send_signal(signal.SIGTERM)
        codes = run.wait()
    finally:
        run.kill()
    out = run.output()
    assert codes == [EXIT_CHECKPOINTED, EXIT_CHECKPOINTED], out + run.output(1)
    found = re.search(r"^notice (\w+) at step=(\d+) ", out, re.MULTILINE)
    assert found is not None, out
    assert found[1] == "resize"
    stopped = int(found[2])
    assert stopped >= 20
    latest = AsyncCheckpointer(tmp_path / "checkpoints").load()
    assert latest is not None
    step, state = latest
    assert step == stopped and state["step"] == stopped and state["world_size"] == 2
    assert set(state) >= {"model", "opt", "loss"}

    total = stopped + 15
    resumed = Run(tmp_path, "w1", 1, ["--steps", str(total), *FAST], launcher=False)
    assert resumed.wait() == [0], resumed.output()
    text = resumed.output()
    assert "start world_size=1 " in text
    assert f"resumed from step {stopped} " in text
    assert next(int(s) for s, _loss in STEP.findall(text)) == stopped + 1
    steps, final_loss = _done(text)
    assert steps == total

    # the same global batch every step: as if it had run at world 1 from the start
    fresh_dir = tmp_path / "fresh"
    fresh_dir.mkdir()
    args = ["--steps", str(total), "--no-checkpoint", *FAST]
    fresh = Run(fresh_dir, "fresh", 1, args, launcher=False)
    assert fresh.wait() == [0], fresh.output()
    fresh_steps, fresh_loss = _done(fresh.output())
    assert fresh_steps == total and fresh_loss == pytest.approx(final_loss, rel=1e-3)


def test_a_signal_to_one_rank_stops_every_rank_after_the_same_step(tmp_path: Path) -> None:
    run = Run(tmp_path, "one", 2, ["--steps", "100000", *FAST])
    try:
        run.until_step(10)
        run.procs[1].send_signal(signal.SIGTERM)  # rank 0 is not told: the ranks agree
        codes = run.wait()
    finally:
        run.kill()
    assert codes == [EXIT_CHECKPOINTED, EXIT_CHECKPOINTED], run.output() + run.output(1)
    found = re.search(r"^notice stop at step=(\d+) ", run.output(), re.MULTILINE)
    assert found is not None, run.output()  # SIGTERM without a notice file: "stop"
    latest = AsyncCheckpointer(tmp_path / "checkpoints").latest()
    assert latest is not None and latest[0] == int(found[1])


def test_a_run_under_cpu_stress_ends_cleanly(tmp_path: Path) -> None:
    burn = "while True: pass"
    burners = [subprocess.Popen([sys.executable, "-c", burn]) for _ in range(os.cpu_count() or 2)]
    try:
        run = Run(tmp_path, "stress", 2, ["--steps", "40", *FAST])
        codes = run.wait()
    finally:
        for proc in burners:
            proc.kill()
            proc.wait()
    assert codes == [0, 0], run.output() + run.output(1)
    assert _done(run.output())[0] == 40
    latest = AsyncCheckpointer(tmp_path / "checkpoints").latest()
    assert latest is not None and latest[0] == 40


def test_the_job_spec_is_elastic_from_1_to_4_with_a_batch_every_size_divides() -> None:
    spec = parse_job_spec((TRAIN.parent / "job.yaml").read_text())
    assert spec.command[0] == "python"
    assert (REPO / spec.command[1]) == TRAIN  # paths are relative to the repository root
    assert spec.gpus == spec.workers == 4  # one rank per GPU at every size
    elastic = spec.elastic
    assert elastic is not None and (elastic.min_gpus, elastic.max_gpus) == (1, 4)
    assert elastic.batch_size is not None
    assert all(elastic.batch_size % world == 0 for world in range(1, 5))
