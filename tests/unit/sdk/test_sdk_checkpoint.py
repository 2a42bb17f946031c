"""`AsyncCheckpointer` and `LocalDirectory`: atomic files, keep-K pruning, resume from the
latest, a snapshot that never aliases the live model, one writer rank. Nothing is timed: a
write is held mid-way with events where a test needs it to be in flight."""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest
import torch
from torch import nn

from trainyard import sdk
from trainyard.sdk.checkpoint import LocalDirectory, _host, checkpoint_name, snapshot

WAIT_S = 120.0  # generous: a busy 2-core machine


class HeldStorage:
    """A `LocalDirectory` whose writes stop after the bytes are written, before the rename,
    until `release` is set; `started` is set when a write reaches that point."""

    def __init__(self, path: Path) -> None:
        self.inner = LocalDirectory(path)
        self.started = threading.Event()
        self.release = threading.Event()

    def write(self, name: str, writer: Callable[[IO[bytes]], None]) -> None:
        def held(handle: IO[bytes]) -> None:
            writer(handle)
            handle.flush()
            self.started.set()
            assert self.release.wait(WAIT_S)

        self.inner.write(name, held)

    def list(self) -> list[str]:
        return self.inner.list()

    def open_read(self, name: str) -> contextlib.AbstractContextManager[IO[bytes]]:
        return self.inner.open_read(name)

    def delete(self, name: str) -> None:
        self.inner.delete(name)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))


def _state(model: nn.Module, opt: torch.optim.Optimizer) -> dict[str, object]:
    return {
        "model": model.state_dict(),
        "opt": opt.state_dict(),
        "rng": {"torch": torch.get_rng_state(), "python": random.getstate()},
        "history": [1.5, 2.5],
    }


def _train(model: nn.Module, opt: torch.optim.Optimizer, steps: int) -> None:
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(16, 4)).pow(2).mean().backward()
        opt.step()


def test_names_and_an_empty_directory(tmp_path: Path) -> None:
    assert checkpoint_name(123) == "step-000000123.pt"
    ckpt = sdk.AsyncCheckpointer(tmp_path / "none-yet")
    assert ckpt.latest() is None and ckpt.load() is None
    ckpt.close()


def test_resume_from_the_latest(tmp_path: Path) -> None:
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    with sdk.AsyncCheckpointer(tmp_path, keep=5) as ckpt:
        for step in (10, 20, 30):
            _train(model, opt, 2)
            ckpt.save(step, _state(model, opt))
    expected = {k: v.clone() for k, v in model.state_dict().items()}

    again = sdk.AsyncCheckpointer(tmp_path)  # a new attempt
    assert again.latest() == (30, "step-000000030.pt")
    found = again.load()
    assert found is not None
    step, state = found
    assert step == 30 and state["history"] == [1.5, 2.5]
    restored = _model()
    restored.load_state_dict(state["model"])
    for name, value in restored.state_dict().items():
        assert torch.equal(value, expected[name]), name
    opt2 = torch.optim.Adam(restored.parameters(), lr=1e-2)
    opt2.load_state_dict(state["opt"])  # the optimizer's state loads too (weights_only)
    assert opt2.state_dict()["state"][0]["step"] == opt.state_dict()["state"][0]["step"]
    random.setstate(state["rng"]["python"])


def test_keep_prunes_all_but_the_newest(tmp_path: Path) -> None:
    with sdk.AsyncCheckpointer(tmp_path, keep=3) as ckpt:
        for step in range(1, 8):
            ckpt.save(step, {"w": torch.full((2,), float(step))})
    assert sorted(os.listdir(tmp_path)) == [checkpoint_name(s) for s in (5, 6, 7)]


def test_no_partial_file_is_ever_visible_under_the_final_name(tmp_path: Path) -> None:
    storage = HeldStorage(tmp_path)
    ckpt = sdk.AsyncCheckpointer(storage=storage, keep=3)
    ckpt.save(1, {"w": torch.zeros(3)}, blocking=False)
    storage.release.set()
    ckpt.wait()
    storage.release.clear()
    storage.started.clear()

    ckpt.save(2, {"w": torch.ones(1000)})  # returns; the write is held before its rename
    assert storage.started.wait(WAIT_S)
    names = os.listdir(tmp_path)
    assert checkpoint_name(2) not in names  # all bytes written, still not under its name
    assert any(n.startswith(".step-000000002.pt.tmp-") for n in names)
    assert storage.list() == [checkpoint_name(1)] and ckpt.latest() == (1, checkpoint_name(1))
    storage.release.set()
    ckpt.wait()
    assert sorted(os.listdir(tmp_path)) == [checkpoint_name(1), checkpoint_name(2)]
    found = ckpt.load()
    assert found is not None and torch.equal(found[1]["w"], torch.ones(1000))


def test_a_failed_write_leaves_nothing_and_wait_raises(tmp_path: Path) -> None:
    ckpt = sdk.AsyncCheckpointer(tmp_path)
    ckpt.save(1, {"w": torch.zeros(2)}, blocking=True)
    bad = LocalDirectory(tmp_path)

    def half_then_fail(handle: IO[bytes]) -> None:
        handle.write(b"x" * 1000)
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        bad.write(checkpoint_name(2), half_then_fail)
    assert os.listdir(tmp_path) == [checkpoint_name(1)]  # no final name, no temporary left

    class Failing(HeldStorage):
        def write(self, name: str, writer: Callable[[IO[bytes]], None]) -> None:
            self.inner.write(name, half_then_fail)

    failing = sdk.AsyncCheckpointer(storage=Failing(tmp_path))
    failing.save(3, {"w": torch.zeros(2)})
    with pytest.raises(sdk.CheckpointError, match="disk full"):
        failing.wait()
    failing.wait()  # the error is raised once
    assert ckpt.latest() == (1, checkpoint_name(1))


def test_a_killed_writers_temporary_file_is_ignored_then_removed(tmp_path: Path) -> None:
    ckpt = sdk.AsyncCheckpointer(tmp_path)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    pid = int(dead.stdout)

    left = tmp_path / f".step-000000009.pt.tmp-{_host()}-{pid}-1"
    left.write_bytes(b"half a checkpoint")
    assert ckpt.latest() is None and ckpt.load() is None
    ckpt.save(3, {"w": torch.zeros(1)}, blocking=True)
    assert os.listdir(tmp_path) == [checkpoint_name(3)]


def test_changing_the_model_after_save_does_not_change_the_file(tmp_path: Path) -> None:
    model = _model()
    extra = {"scale": [torch.ones(2)], "meta": {"tags": ["a"]}}
    before = {k: v.clone() for k, v in model.state_dict().items()}
    storage = HeldStorage(tmp_path)
    ckpt = sdk.AsyncCheckpointer(storage=storage)
    ckpt.save(7, {"model": model.state_dict(), "extra": extra})
    assert storage.started.wait(WAIT_S)  # torch.save has run; the rename is still to come
    with torch.no_grad():
        for p in model.parameters():
            p.add_(100.0)
    extra["scale"][0].mul_(5)
    extra["meta"]["tags"].append("b")  # type: ignore[index]
    storage.release.set()
    ckpt.wait()
    found = ckpt.load()
    assert found is not None
    state = found[1]
    for name, value in state["model"].items():
        assert torch.equal(value, before[name]), name
    assert torch.equal(state["extra"]["scale"][0], torch.ones(2))
    assert state["extra"]["meta"] == {"tags": ["a"]}


def test_the_snapshot_shares_no_memory_and_keeps_ties() -> None:
    weight = nn.Parameter(torch.ones(3))
    state = {"a": weight, "b": weight, "t": (weight, 2), "n": None}
    copied = snapshot(state)
    assert copied["a"] is copied["b"] and copied["t"][0] is copied["a"]
    assert copied["a"].data_ptr() != weight.data_ptr() and not copied["a"].requires_grad
    assert type(copied["a"]) is torch.Tensor and copied["t"][1] == 2 and copied["n"] is None


def test_a_save_waits_for_the_one_in_flight(tmp_path: Path) -> None:
    storage = HeldStorage(tmp_path)
    ckpt = sdk.AsyncCheckpointer(storage=storage)
    ckpt.save(1, {"w": torch.zeros(1)})
    assert storage.started.wait(WAIT_S)
    second = threading.Thread(target=ckpt.save, args=(2, {"w": torch.ones(1)}))
    second.start()
    second.join(timeout=0.5)
    assert second.is_alive()  # held behind the first write
    storage.release.set()
    second.join(WAIT_S)
    ckpt.close()
    assert storage.list() == [checkpoint_name(1), checkpoint_name(2)]


def test_only_the_writer_rank_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    ckpt = sdk.AsyncCheckpointer(tmp_path / "ckpt")
    ckpt.save(5, {"w": torch.zeros(1)}, blocking=True)
    ckpt.save(6, {"w": torch.zeros(1)})
    ckpt.close()
    assert not (tmp_path / "ckpt").exists() and ckpt.latest() is None
    writer = sdk.AsyncCheckpointer(tmp_path / "ckpt", writer_rank=1)
    writer.save(5, {"w": torch.zeros(1)}, blocking=True)
    assert ckpt.latest() == (5, checkpoint_name(5))  # every rank reads


@dataclass
class Custom:
    value: int


def test_weights_only_refuses_arbitrary_objects_unless_asked(tmp_path: Path) -> None:
    ckpt = sdk.AsyncCheckpointer(tmp_path)
    ckpt.save(1, {"custom": Custom(3)}, blocking=True)
    with pytest.raises(sdk.CheckpointError, match="weights_only=False"):
        ckpt.load()
    found = ckpt.load(weights_only=False)
    assert found is not None and found[1]["custom"] == Custom(3)


def test_the_default_directory_is_trainyards(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINYARD_CHECKPOINT_DIR", str(tmp_path))
    ckpt = sdk.AsyncCheckpointer()
    ckpt.save(2, {"w": torch.zeros(1)}, blocking=True)
    assert os.listdir(tmp_path) == [checkpoint_name(2)]
    with pytest.raises(ValueError, match="keep"):
        sdk.AsyncCheckpointer(keep=0)
    with pytest.raises(ValueError, match="step"):
        ckpt.save(-1, {})
