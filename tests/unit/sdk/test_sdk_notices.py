"""`Notices` (SIGTERM, SIGUSR1 and the notice file) and `exit_after_checkpoint`: in this
process, and in a real training process that is signalled, checkpoints and exits 85."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import trainyard
from trainyard import sdk

SRC = str(Path(trainyard.__file__).resolve().parents[1])
WAIT_S = 300.0  # starting torch on a busy 2-core machine takes a while


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_signals_and_the_notice_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1)}
    notice = tmp_path / "notice"
    monkeypatch.setenv("TRAINYARD_NOTICE_FILE", str(notice))
    notices = sdk.Notices()
    try:
        assert notices.requested is None
        os.kill(os.getpid(), signal.SIGUSR1)  # handled in this (the main) thread
        assert notices.requested == "preempt"  # a notice without a file
        notice.write_text("resize\nmore details\n")
        assert notices.requested == "resize"  # the file says why
        notice.write_text("gibberish\n")
        assert notices.requested == "preempt"
        notice.unlink()
        os.kill(os.getpid(), signal.SIGTERM)
        assert notices.requested == "stop"
        os.kill(os.getpid(), signal.SIGUSR1)
        assert notices.requested == "stop"  # SIGTERM is not taken back
        assert notices.requested_by_any() == "stop"  # no process group: this rank's
    finally:
        notices.close()
    assert {s: signal.getsignal(s) for s in before} == before


def test_a_file_alone_is_a_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINYARD_NOTICE_FILE", str(tmp_path / "notice"))
    (tmp_path / "notice").write_text("Preempt\n")
    with sdk.Notices() as notices:
        assert notices.requested == "preempt"


def test_requested_by_any_in_a_process_group(monkeypatch: pytest.MonkeyPatch) -> None:
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1
    )
    try:
        with sdk.Notices() as notices:
            assert notices.requested_by_any() is None
            os.kill(os.getpid(), signal.SIGUSR1)
            assert notices.requested_by_any() == "preempt"
    finally:
        dist.destroy_process_group()


def test_exit_after_checkpoint(tmp_path: Path) -> None:
    ckpt = sdk.AsyncCheckpointer(tmp_path)
    with pytest.raises(SystemExit) as exited:
        sdk.exit_after_checkpoint(ckpt, 4, {"w": torch.ones(2)})
    assert exited.value.code == sdk.EXIT_CHECKPOINTED == 85
    assert ckpt.latest() == (4, "step-000000004.pt")


TRAINING = """
import time, torch
from trainyard import sdk

ckpt = sdk.AsyncCheckpointer(keep=2)
notices = sdk.Notices()
w = torch.zeros(10_000)
step = 0
print("ready", flush=True)
while True:
    step += 1
    w += 1
    state = {"w": w, "step": step}
    if notices.requested:
        print("reason", notices.requested, flush=True)
        sdk.exit_after_checkpoint(ckpt, step, {**state, "reason": notices.requested})
    if step % 20 == 0:
        ckpt.save(step, state)
    time.sleep(0.002)
"""


@pytest.mark.parametrize(
    ("signum", "notice", "reason"),
    [(signal.SIGTERM, None, "stop"), (signal.SIGUSR1, "preempt", "preempt")],
)
def test_a_signalled_job_checkpoints_and_exits_85(
    tmp_path: Path, signum: int, notice: str | None, reason: str
) -> None:
    ckpt_dir, notice_file = tmp_path / "checkpoints", tmp_path / "notice"
    env = {
        **os.environ,
        "PYTHONPATH": SRC,
        "TRAINYARD_CHECKPOINT_DIR": str(ckpt_dir),
        "TRAINYARD_NOTICE_FILE": str(notice_file),
        "OMP_NUM_THREADS": "1",
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", TRAINING],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        if notice is not None:
            notice_file.write_text(f"{notice}\n")  # the executor writes it, then signals
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 85, err
    assert out.splitlines() == [f"reason {reason}"]
    assert sorted(p.name for p in ckpt_dir.iterdir() if p.name.startswith(".")) == []
    found = sdk.AsyncCheckpointer(ckpt_dir).load()
    assert found is not None
    step, state = found
    assert state["reason"] == reason and state["step"] == step
    assert torch.equal(state["w"], torch.full((10_000,), float(step)))  # complete, consistent
    assert len(list(ckpt_dir.iterdir())) <= 2
