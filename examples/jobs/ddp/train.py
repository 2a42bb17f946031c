"""A real PyTorch DDP training job: a small MLP learns a fixed nonlinear regression.

Usage (any launcher that sets the torchrun environment works; without one it runs alone)::

    python -m torch.distributed.run --standalone --nproc-per-node=2 \\
        examples/jobs/ddp/train.py --steps 200 --checkpoint-every 20
    python examples/jobs/ddp/train.py --steps 50          # world size 1, no launcher needed

Environment (as torchrun and trainyard's executors set it):

- ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``,
  ``MASTER_PORT``: the process group (``env://``). When ``WORLD_SIZE`` is unset the job runs as
  a single rank on 127.0.0.1 with a free port.
- ``CUDA_VISIBLE_DEVICES``: with CUDA available the backend is NCCL and each rank uses device
  ``LOCAL_RANK % device_count`` (so one device per rank or all devices per rank both work).
  ``TRAINYARD_VIRTUAL_GPUS=1`` means the devices are declared, not real: CPU and gloo are used.
  ``--device cpu`` forces CPU and gloo.
- ``TRAINYARD_CHECKPOINT_DIR``: where checkpoints go (default ``./checkpoints``).
- ``TRAINYARD_TORCH_THREADS``: intra-op threads per rank (default 1: the model is tiny and the
  ranks share the machine's cores).

Data: generated deterministically from ``--seed`` (the same on every rank). The batch of step
``s`` is drawn from a generator seeded with ``(seed, s)``: ``--batch-size`` samples per rank,
rank ``r`` taking every ``WORLD_SIZE``-th sample from ``r`` of the global batch. A run resumed
at the same world size therefore sees the same data as an uninterrupted one.

Output (rank 0 only, one line each, flushed; other ranks print errors only)::

    start world_size=2 backend=gloo device=cpu steps=200
    resumed from step 40                          # when a checkpoint was found
    step 60 loss 0.123456                         # step 1, every --log-every steps, last step
    checkpoint step=80 path=checkpoints/ckpt-00000080.pt
    stopped by SIGTERM at step=93                 # only on SIGTERM
    done steps=200 final_loss=0.012345 train_seconds=2.05

``loss`` is the mean over ranks of the step's training loss (before that step's update).

Checkpoints: every ``--checkpoint-every`` steps, at the last step and on SIGTERM, rank 0 writes
``ckpt-{step:08d}.pt`` holding the model, the optimizer, the step, the RNG states and the world
size. It is written to a temporary file in the same directory, fsynced, then renamed with
``os.replace``, so a reader (or a restart after ``kill -9``) never sees a partial file. The last
``--keep`` checkpoints are kept. On start rank 0 finds the latest complete checkpoint and
broadcasts its step; every rank loads that file (the directory must be shared, as on one
machine), prints ``resumed from step K`` and continues from step K + 1. A checkpoint written at
one world size resumes at another (the model state is that of the unwrapped module and the
optimizer state is identical on every rank). A run whose checkpoint already reached ``--steps``
prints ``done`` at once, with the loss of that step (kept in the checkpoint).

Benchmarks: ``--step-sleep S`` makes every step take S seconds longer (a stand-in for a
bigger model); ``--trace FILE`` makes rank 0 append ``{"attempt", "step", "t", "world"}`` as one
JSON line per step (``t``: wall-clock seconds after the step; ``attempt``:
``TRAINYARD_ATTEMPT``), flushed, so that recovery can be timed from outside.
``--report-every S`` sends training progress to the server through ``trainyard.sdk.Reporter``
at most every S seconds (the platform then knows the run is healthy, and hung if reports
stop).

Signals: on SIGTERM each rank sets a flag; the flag is summed across ranks with the step's loss,
so every rank stops after the same step, rank 0 checkpoints it and every rank exits with code
143 (128 + SIGTERM: "stopped on request, resumable", distinct from success). A second SIGTERM,
or one that arrives before training started (e.g. while waiting for peers), exits at once with
143 without a checkpoint. SIGINT behaves the same.

Failures: if a peer dies, gloo's next collective fails at once ("Connection closed by peer");
the rank prints the error to stderr and exits 1. A hung peer is detected by the process-group
timeout (``--pg-timeout``, default 20 s, instead of PyTorch's 30 minutes).
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import math
import os
import random
import signal
import socket
import sys
import time
from datetime import timedelta
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

EXIT_SIGTERM = 143
INPUT_DIM = 16
DATASET_SIZE = 4096

_stop_requested = False
_training = False  # before the loop there is nothing to save: a signal exits at once


def _on_signal(signum: int, _frame: FrameType | None) -> None:
    global _stop_requested
    if _stop_requested or not _training:  # a second signal, or nothing to checkpoint yet
        print(f"stopped by signal {signum} before a checkpoint", file=sys.stderr, flush=True)
        os._exit(EXIT_SIGTERM)
    _stop_requested = True


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="total optimizer steps")
    parser.add_argument("--checkpoint-every", type=int, default=20, help="0: only at the end")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--batch-size", type=int, default=64, help="samples per rank per step")
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--keep", type=int, default=3, help="checkpoints to keep")
    parser.add_argument("--pg-timeout", type=float, default=20.0, help="seconds")
    parser.add_argument("--device", choices=["auto", "cpu"], default="auto")
    parser.add_argument(
        "--step-sleep", type=float, default=0.0, help="seconds added to each step (a bigger model)"
    )
    parser.add_argument(
        "--report-every",
        type=float,
        default=0.0,
        help="seconds between progress reports to trainyard (trainyard.sdk.Reporter; 0: none)",
    )
    parser.add_argument(
        "--trace", default="", help="rank 0 appends one JSON line per step here (benchmarks)"
    )
    return parser.parse_args(argv)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value else default


def choose_device(args: argparse.Namespace, local_rank: int) -> tuple[str, torch.device]:
    virtual = os.environ.get("TRAINYARD_VIRTUAL_GPUS", "0") not in ("", "0")
    if args.device == "auto" and not virtual and torch.cuda.is_available():
        index = local_rank % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return "nccl", torch.device("cuda", index)
    return "gloo", torch.device("cpu")


def make_dataset(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed nonlinear teacher: y = x.w + 0.5 sin(1.5 x.v) with a little noise (var(y) ~ 1)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(DATASET_SIZE, INPUT_DIM, generator=gen)
    w = torch.randn(INPUT_DIM, generator=gen) / math.sqrt(INPUT_DIM)
    v = torch.randn(INPUT_DIM, generator=gen) / math.sqrt(INPUT_DIM)
    y = x @ w + 0.5 * torch.sin(1.5 * (x @ v)) + 0.01 * torch.randn(DATASET_SIZE, generator=gen)
    return x, y.unsqueeze(1)


def make_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(INPUT_DIM, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1)
    )


def batch_indices(seed: int, step: int, per_rank: int, rank: int, world: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed * 1_000_003 + step)
    global_batch = torch.randint(0, DATASET_SIZE, (per_rank * world,), generator=gen)
    return global_batch[rank::world]


# --- checkpoints ---------------------------------------------------------------------------


def checkpoint_dir() -> str:
    return os.environ.get("TRAINYARD_CHECKPOINT_DIR") or "checkpoints"


def _checkpoint_path(directory: str, step: int) -> str:
    return os.path.join(directory, f"ckpt-{step:08d}.pt")


def list_checkpoints(directory: str) -> list[tuple[int, str]]:
    found = []
    for path in glob.glob(os.path.join(directory, "ckpt-*.pt")):
        stem = os.path.basename(path)[len("ckpt-") : -len(".pt")]
        if stem.isdigit():
            found.append((int(stem), path))
    return sorted(found)


def save_checkpoint(
    directory: str,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    world: int,
    keep: int,
    loss: float,
) -> str:
    os.makedirs(directory, exist_ok=True)
    rng: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    state = {
        "step": step,
        "loss": loss,  # the mean loss of that step, reported again by a run resumed there
        "world_size": world,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "rng": rng,
    }
    final = _checkpoint_path(directory, step)
    tmp = os.path.join(directory, f".{os.path.basename(final)}.tmp-{os.getpid()}")
    with open(tmp, "wb") as handle:
        torch.save(state, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, final)
    # Older checkpoints beyond `keep`, and temporary files an earlier attempt left when it was
    # killed while saving (there is one writer at a time).
    stale = glob.glob(os.path.join(directory, ".ckpt-*.pt.tmp-*"))
    stale += [old for _, old in list_checkpoints(directory)[:-keep]] if keep > 0 else []
    for path in stale:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
    return final


def load_checkpoint(
    path: str, model: nn.Module, optimizer: torch.optim.Optimizer
) -> tuple[int, float]:
    """Restore `path` into the model and optimizer; (its step, that step's mean loss)."""
    state: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng"]["torch"])
    python_state = state["rng"]["python"]
    random.setstate((python_state[0], tuple(python_state[1]), python_state[2]))
    if "cuda" in state["rng"] and torch.cuda.is_available():
        cuda_states = state["rng"]["cuda"]
        if len(cuda_states) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda_states)
    return int(state["step"]), float(state.get("loss", float("nan")))


# --- the job --------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    torch.set_num_threads(max(1, _env_int("TRAINYARD_TORCH_THREADS", 1)))

    if "WORLD_SIZE" not in os.environ:  # no launcher: one rank on this machine
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1")
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
    rank = _env_int("RANK", 0)
    local_rank = _env_int("LOCAL_RANK", 0)
    world = _env_int("WORLD_SIZE", 1)
    backend, device = choose_device(args, local_rank)
    dist.init_process_group(
        backend=backend,
        init_method="env://",
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=args.pg_timeout),
    )

    def log(line: str) -> None:  # rank 0 reports; flushed, so log files are live
        if rank == 0:
            print(line, flush=True)

    log(f"start world_size={world} backend={backend} device={device} steps={args.steps}")

    model = make_model(args.seed).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    directory = checkpoint_dir()

    # Rank 0 picks the checkpoint; everyone loads the same one before DDP starts.
    latest = torch.tensor([-1], dtype=torch.long, device=device)
    if rank == 0:
        found = list_checkpoints(directory)
        if found:
            latest[0] = found[-1][0]
    dist.broadcast(latest, src=0)
    start_step = 0
    last_loss = float("nan")
    if latest.item() >= 0:
        start_step, last_loss = load_checkpoint(
            _checkpoint_path(directory, int(latest.item())), model, optimizer
        )
        log(f"resumed from step {start_step}")

    ddp = DistributedDataParallel(model, device_ids=[device.index] if backend == "nccl" else None)
    x_all, y_all = make_dataset(args.seed)
    x_all, y_all = x_all.to(device), y_all.to(device)
    loss_fn = nn.MSELoss()

    global _training
    _training = True
    step = start_step
    started = time.monotonic()
    trace = open(args.trace, "a", buffering=1) if args.trace and rank == 0 else None  # noqa: SIM115
    attempt = _env_int("TRAINYARD_ATTEMPT", 0)
    reporter = None
    if args.report_every > 0:
        from trainyard import sdk

        reporter = sdk.Reporter(min_interval_s=args.report_every)
        reporter.resume(start_step)  # reported steps go on from the checkpoint's
    step_began = time.monotonic()
    try:
        while step < args.steps:
            step += 1
            idx = batch_indices(args.seed, step, args.batch_size, rank, world).to(device)
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(ddp(x_all[idx]), y_all[idx])
            loss.backward()
            optimizer.step()
            # One small collective per step: the loss for the log and the stop flag, so that
            # every rank stops after the same step.
            stats = torch.tensor([loss.item(), 1.0 if _stop_requested else 0.0], device=device)
            dist.all_reduce(stats)
            last_loss = stats[0].item() / world
            stopping = stats[1].item() > 0
            if args.step_sleep > 0:
                time.sleep(args.step_sleep)
            if trace is not None:
                record = {"attempt": attempt, "step": step, "t": time.time(), "world": world}
                trace.write(json.dumps(record) + "\n")
            if reporter is not None:
                now = time.monotonic()
                reporter.step(now - step_began, batch=args.batch_size * world, loss=last_loss)
                step_began = now
            if step == 1 or step % args.log_every == 0 or step == args.steps or stopping:
                log(f"step {step} loss {last_loss:.6f}")
            due = args.checkpoint_every > 0 and step % args.checkpoint_every == 0
            if rank == 0 and (due or step == args.steps or stopping):
                path = save_checkpoint(
                    directory, step, model, optimizer, world, args.keep, last_loss
                )
                log(f"checkpoint step={step} path={path}")
            if stopping:
                log(f"stopped by SIGTERM at step={step}")
                _leave(EXIT_SIGTERM)
    except (RuntimeError, dist.DistError) as error:
        # Typically a peer died ("Connection closed by peer") or hung (timeout). Exit at once:
        # tearing down a broken process group can block.
        print(f"rank {rank}: step {step} failed: {error}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(1)

    elapsed = time.monotonic() - started
    log(f"done steps={step} final_loss={last_loss:.6f} train_seconds={elapsed:.2f}")
    _leave(0)
    return 0


def _leave(code: int) -> None:
    """Leave the process group together, then exit with `code` at once.

    The barrier means every rank has finished (and rank 0 has written its checkpoint) before
    any rank goes. Exiting with `os._exit` after it skips the interpreter's teardown of gloo's
    C++ threads: under load a rank could otherwise die in it ("terminate called without an
    active exception") after its work was done, turning a finished run into a failed one."""
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
