"""`trainyard.sdk.env` (the job's variables and their defaults) and `trainyard.sdk.scaling`
(batch and learning-rate arithmetic); the SDK imports without torch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import trainyard
from trainyard import sdk
from trainyard.sdk import env

SRC = str(Path(trainyard.__file__).resolve().parents[1])


def test_defaults_are_a_plain_single_process() -> None:
    assert (sdk.rank(), sdk.world_size(), sdk.local_rank(), sdk.local_world_size()) == (0, 1, 0, 1)
    assert (sdk.node_rank(), sdk.nodes(), sdk.attempt(), sdk.job_id()) == (0, 1, 0, None)
    assert sdk.checkpoint_dir() == Path("checkpoints")
    assert not sdk.under_trainyard() and not sdk.virtual_gpus()
    assert env.gpus_per_rank() == 1 and env.notice_file() is None


def test_the_executor_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    values = {
        "RANK": "3",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "4",
        "GROUP_RANK": "1",
        "GROUP_WORLD_SIZE": "2",
        "TRAINYARD_JOB_ID": "j-42",
        "TRAINYARD_ATTEMPT": "2",
        "TRAINYARD_CHECKPOINT_DIR": str(tmp_path),
        "TRAINYARD_API_URL": "http://127.0.0.1:9/",
        "TRAINYARD_VIRTUAL_GPUS": "1",
        "CUDA_VISIBLE_DEVICES": "4,5",
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    assert (sdk.rank(), sdk.world_size(), sdk.local_rank(), sdk.local_world_size()) == (3, 8, 1, 4)
    assert (sdk.node_rank(), sdk.nodes(), sdk.attempt(), sdk.job_id()) == (1, 2, 2, "j-42")
    assert sdk.checkpoint_dir() == tmp_path and env.api_url() == "http://127.0.0.1:9"
    assert sdk.under_trainyard() and sdk.virtual_gpus()
    assert env.visible_devices() == ("4", "5") and env.gpus_per_rank() == 2
    # virtual GPUs: CPU and gloo, whatever torch finds
    assert sdk.backend() == "gloo" and str(sdk.device()) == "cpu"
    monkeypatch.setenv("TRAINYARD_RANK_DEVICES", "1")  # every rank sees the node's devices
    assert env.rank_devices() == (1,) and env.gpus_per_rank() == 1
    monkeypatch.setenv("TRAINYARD_VIRTUAL_GPUS", "0")
    assert not sdk.virtual_gpus()


def test_under_trainyard_needs_both_the_job_and_the_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRAINYARD_JOB_ID", "j-1")
    assert not sdk.under_trainyard()
    monkeypatch.setenv("TRAINYARD_API_URL", "")
    assert not sdk.under_trainyard()
    monkeypatch.setenv("TRAINYARD_API_URL", "http://h:1")
    assert sdk.under_trainyard()


def test_a_malformed_integer_names_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(ValueError, match="WORLD_SIZE='two'"):
        sdk.world_size()


def test_local_batch() -> None:
    assert sdk.local_batch(256, 8) == 32
    with pytest.raises(ValueError, match="global batch 100 is not divisible by world size 8"):
        sdk.local_batch(100, 8)
    with pytest.raises(ValueError, match="world"):
        sdk.local_batch(8, 0)


@pytest.mark.parametrize(
    ("global_batch", "world", "max_local", "expected"),
    [(256, 8, 64, (32, 1)), (256, 2, 64, (64, 2)), (256, 1, 100, (64, 4)), (96, 1, 40, (32, 3))],
)
def test_accumulation_keeps_the_global_batch(
    global_batch: int, world: int, max_local: int, expected: tuple[int, int]
) -> None:
    local, steps = sdk.accumulation(global_batch, world, max_local)
    assert (local, steps) == expected
    assert local * steps * world == global_batch and local <= max_local


def test_accumulation_always_fits() -> None:
    for per_rank in range(1, 200):
        for max_local in range(1, 50):
            local, steps = sdk.accumulation(per_rank * 3, 3, max_local)
            assert local * steps == per_rank and local <= max_local


def test_scale_lr() -> None:
    assert sdk.scale_lr(0.1, 8, 16) == pytest.approx(0.2)
    assert sdk.scale_lr(0.1, 4, 16, rule="sqrt") == pytest.approx(0.2)
    assert sdk.scale_lr(0.1, 8, 8, rule="sqrt") == pytest.approx(0.1)
    with pytest.raises(ValueError, match="rule"):
        sdk.scale_lr(0.1, 1, 2, rule="cubic")  # type: ignore[arg-type]


NO_TORCH = """
import sys

class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch is not installed here")
        return None

sys.meta_path.insert(0, NoTorch())
from trainyard import sdk
assert "torch" not in sys.modules
print(sdk.rank(), sdk.world_size(), sdk.backend(), sdk.local_batch(64, 2))
sdk.Reporter()  # outside trainyard: off, one line on stderr
sdk.Notices().close()
try:
    sdk.AsyncCheckpointer(directory=sys.argv[1]).save(1, {"a": 1})
except sdk.CheckpointError as error:
    print("checkpoint:", error)
"""


def test_the_sdk_imports_and_works_without_torch(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", NO_TORCH, str(tmp_path)],
        env={**os.environ, "PYTHONPATH": SRC},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "0 1 gloo 32",
        "checkpoint: checkpoints need torch: pip install torch",
    ]
    assert result.stderr.splitlines() == [
        "trainyard.sdk: not running under trainyard; reports are off"
    ]


PLAIN = """
import torch
import torch.distributed as dist
from trainyard import sdk

print(sdk.init_distributed(), dist.get_world_size(), dist.get_rank())
total = torch.ones(1)
dist.all_reduce(total)
print(int(total.item()))
dist.destroy_process_group()
"""


def test_init_distributed_runs_a_plain_script_as_rank_0_of_1() -> None:
    """Found by an outside review: docs/sdk.md promised that a script using the SDK runs
    unchanged when started plainly, yet `init_process_group`'s env:// rendezvous stops
    without `RANK`. `sdk.init_distributed` sets one rank's variables where none are set."""
    clean = {k: v for k, v in os.environ.items()
             if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                          "MASTER_ADDR", "MASTER_PORT")}  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-c", PLAIN],
        env={**clean, "PYTHONPATH": SRC, "CUDA_VISIBLE_DEVICES": ""},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["gloo", "1", "0", "1"]
