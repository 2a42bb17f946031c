"""An elastic PyTorch DDP job built on `trainyard.sdk`: it resumes at whatever world size it
is relaunched with, and the optimisation does not depend on that size.

Usage (any launcher that sets the torchrun environment works; without one it runs alone)::

    python -m torch.distributed.run --standalone --nproc-per-node=4 \\
        examples/jobs/elastic/train.py --steps 2000 --checkpoint-every 50
    python examples/jobs/elastic/train.py --steps 200     # world size 1, no launcher needed

Submitted to trainyard as an elastic job (``job.yaml``: ``elastic: {min_gpus: 1, max_gpus:
4}``), the scheduler may start it at any size in that range and resize it while it runs: the
ranks get a notice (``resize`` or ``preempt``) and SIGTERM, save a checkpoint after the step
they are in and exit 85 (`sdk.EXIT_CHECKPOINTED`); the job is relaunched with a new
``WORLD_SIZE`` and resumes from that checkpoint.

Fixed global batch. Every step trains on ``--global-batch`` samples whatever the world size:
the batch of step ``s`` is drawn from a generator seeded with ``(seed, s)`` and rank ``r``
takes the ``r``-th of ``WORLD_SIZE`` equal contiguous slices (``sdk.local_batch``; the
global batch must divide by every world size the job may run at: the default 192 divides by
1 to 4, 6 and 8). DDP averages the ranks' gradients, so each step's update is that of the
whole global batch on one process (up to floating-point summation order): a run resized any
number of times follows the loss curve of an uninterrupted fixed-size run.

Device time. On CPU (virtual GPUs: ``TRAINYARD_VIRTUAL_GPUS=1``, or no CUDA) the model is
tiny and its real compute takes a few milliseconds; ``--device-ms`` (default 60 on CPU, 0 on
real GPUs) adds the time a device would spend on the whole global batch, each rank sleeping
its share (``device_ms x local / global``), so that the job speeds up with more ranks as a
GPU job would, even on a machine with fewer cores than ranks. ``--device-ms 0`` turns it off.

Checkpoints (`sdk.AsyncCheckpointer` in ``$TRAINYARD_CHECKPOINT_DIR``, default
``./checkpoints``; the newest ``--keep`` kept): every ``--checkpoint-every`` steps in the
background (the state is copied to CPU, the loop goes on while another thread writes it), at
the last step, and on a notice (blocking, then exit 85). Every rank loads the latest one on
start. ``--no-checkpoint`` skips the periodic and final ones (to measure their cost); a notice
still saves.

Reports: rank 0 passes every step's time, the global batch and the loss to `sdk.Reporter`,
which POSTs them to the server (a no-op outside trainyard).

Output (rank 0 only, one line each, flushed; ``t=`` is wall-clock Unix time)::

    start world_size=2 backend=gloo device=cpu steps=2000 global_batch=192 local_batch=96
    resumed from step 400 t=1733212345.123
    step 401 loss 0.123456 t=1733212345.201     # the first step of a run, every --log-every, last
    checkpoint step=450
    notice resize at step=517 t=1733212350.002  # then saved and exit 85
    done steps=2000 final_loss=0.012345 train_loss=0.013 mean_step_ms=21.5 median_step_ms=21.1
        save_share=0.00012 train_seconds=30.1                # (one line)

``loss`` and ``train_loss`` are the global batch's mean loss at that step (before its
update); ``final_loss`` is the mean squared error of the final model on the whole dataset.
``mean_step_ms`` and ``median_step_ms`` are over this run's steps after its first five;
``save_share`` is the share of the run's training time spent inside the periodic
``save`` calls (what the asynchronous checkpoint blocks the loop for).

Failures: if a peer dies, gloo's next collective fails; the rank prints the error and exits 1
at once. A hung peer is caught by the process-group timeout (``--pg-timeout``, 30 s).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from datetime import timedelta
from typing import Any, NoReturn

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from trainyard import sdk

INPUT_DIM = 16
HIDDEN = 128
DATASET_SIZE = 4096
WARMUP_STEPS = 5  # not counted in mean_step_ms


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000, help="total optimizer steps")
    parser.add_argument("--checkpoint-every", type=int, default=50, help="0: only at the end")
    parser.add_argument("--no-checkpoint", action="store_true", help="no periodic/final saves")
    parser.add_argument("--global-batch", type=int, default=192, help="samples per step")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--log-every", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--keep", type=int, default=3, help="checkpoints to keep")
    parser.add_argument("--device-ms", type=float, default=None, help="emulated device time")
    parser.add_argument("--pg-timeout", type=float, default=30.0, help="seconds")
    return parser.parse_args(argv)


def make_dataset(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed nonlinear teacher: y = x.w + 0.5 sin(1.5 x.v) plus a little noise."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(DATASET_SIZE, INPUT_DIM, generator=gen)
    w = torch.randn(INPUT_DIM, generator=gen) / math.sqrt(INPUT_DIM)
    v = torch.randn(INPUT_DIM, generator=gen) / math.sqrt(INPUT_DIM)
    y = x @ w + 0.5 * torch.sin(1.5 * (x @ v)) + 0.01 * torch.randn(DATASET_SIZE, generator=gen)
    return x, y.unsqueeze(1)


def make_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(INPUT_DIM, HIDDEN),
        nn.Tanh(),
        nn.Linear(HIDDEN, HIDDEN),
        nn.Tanh(),
        nn.Linear(HIDDEN, 1),
    )


def batch_indices(seed: int, step: int, global_batch: int, rank: int, world: int) -> torch.Tensor:
    """Rank `rank`'s slice of step `step`'s global batch: the same global batch at any world."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + step)
    chosen = torch.randint(0, DATASET_SIZE, (global_batch,), generator=gen)
    local = sdk.local_batch(global_batch, world)
    return chosen[rank * local : (rank + 1) * local]


class Job:
    """The process group, the model and the SDK's helpers of one rank."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.notices = sdk.Notices()  # first: a SIGTERM from now on is a request, not a death
        torch.set_num_threads(1)  # a tiny model; the ranks share the machine's cores
        # without a launcher (a plain `python train.py`): one rank on this machine
        self.backend = sdk.init_distributed(timeout=timedelta(seconds=args.pg_timeout))
        self.rank, self.world = sdk.rank(), sdk.world_size()
        self.device = sdk.device()
        self.local = sdk.local_batch(args.global_batch, self.world)
        on_gpu = self.device.type == "cuda"
        device_ms = args.device_ms if args.device_ms is not None else (0.0 if on_gpu else 60.0)
        self.sleep_s = device_ms / 1000.0 * self.local / args.global_batch
        self.model = make_model(args.seed).to(self.device)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=args.lr)
        self.ckpt = sdk.AsyncCheckpointer(keep=args.keep)
        self.reporter = sdk.Reporter()
        x, y = make_dataset(args.seed)
        self.x, self.y = x.to(self.device), y.to(self.device)

    def log(self, line: str) -> None:
        if self.rank == 0:
            print(line, flush=True)

    def state(self, step: int, loss: float) -> dict[str, Any]:
        return {
            "step": step,
            "loss": loss,
            "world_size": self.world,
            "model": self.model.state_dict(),
            "opt": self.opt.state_dict(),
        }

    def resume(self) -> tuple[int, float]:
        """(the step to continue after, that step's loss): the latest checkpoint's, else 0."""
        found = self.ckpt.load(map_location=str(self.device))
        if found is None:
            return 0, float("nan")
        step, state = found
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["opt"])
        self.reporter.resume(step, samples=step * self.args.global_batch)
        self.log(f"resumed from step {step} t={time.time():.3f}")
        return step, float(state.get("loss", float("nan")))

    def eval_loss(self) -> float:
        with torch.no_grad():
            return float(nn.functional.mse_loss(self.model(self.x), self.y).item())

    def leave(self, code: int) -> NoReturn:
        """Finish the SDK's threads, leave the process group together and exit `code` at
        once: `os._exit` skips the interpreter's teardown of gloo's threads, which under load
        can abort a rank whose work is done ("terminate called without an active exception")."""
        self.ckpt.close()
        self.reporter.close()
        self.notices.close()
        dist.barrier()
        dist.destroy_process_group()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def train(job: Job) -> NoReturn:
    args = job.args
    job.log(
        f"start world_size={job.world} backend={job.backend} device={job.device} "
        f"steps={args.steps} global_batch={args.global_batch} local_batch={job.local}"
    )
    start, last_loss = job.resume()
    ddp = DistributedDataParallel(
        job.model, device_ids=[job.device.index] if job.backend == "nccl" else None
    )
    loss_fn = nn.MSELoss()
    stats = torch.zeros(1, device=job.device)
    durations: list[float] = []
    saved_s = 0.0  # time the loop spent in periodic `save` calls (the snapshot to CPU)
    started = time.monotonic()
    step = start

    def due(at: int) -> bool:  # a periodic checkpoint after step `at`
        every = args.checkpoint_every
        return not args.no_checkpoint and every > 0 and at % every == 0 and at < args.steps

    while step < args.steps:
        t0 = time.perf_counter()
        step += 1
        idx = batch_indices(args.seed, step, args.global_batch, job.rank, job.world)
        idx = idx.to(job.device)
        job.opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(job.x[idx]), job.y[idx])
        if job.sleep_s > 0:
            time.sleep(job.sleep_s)  # this rank's share of the emulated device time
        loss.backward()
        job.opt.step()
        reason = job.notices.requested_by_any()  # the same answer on every rank
        logged = step == start + 1 or step % args.log_every == 0 or step == args.steps
        if logged or reason is not None or due(step):  # the global batch's mean loss
            stats[0] = loss.detach()
            dist.all_reduce(stats)
            last_loss = stats.item() / job.world
        else:
            last_loss = float(loss.item())  # this rank's share only: for the report
        if logged:
            job.log(f"step {step} loss {last_loss:.6f} t={time.time():.3f}")
        if reason is not None:
            job.log(f"notice {reason} at step={step} t={time.time():.3f}")
            try:
                sdk.exit_after_checkpoint(job.ckpt, step, job.state(step, last_loss))
            except SystemExit as stop:
                job.leave(int(stop.code or 0))
        if due(step):
            saving = time.perf_counter()
            job.ckpt.save(step, job.state(step, last_loss))  # returns once copied to CPU
            saved_s += time.perf_counter() - saving
            job.log(f"checkpoint step={step}")
        elapsed = time.perf_counter() - t0
        if step - start > WARMUP_STEPS:
            durations.append(elapsed)
        left = (args.steps - step) * args.global_batch  # the scheduler weighs jobs by it
        job.reporter.step(elapsed, batch=args.global_batch, loss=last_loss, remaining_samples=left)
    if not args.no_checkpoint and step > start:
        job.ckpt.save(step, job.state(step, last_loss), blocking=True)
        job.log(f"checkpoint step={step}")
    mean_ms = 1000.0 * statistics.fmean(durations) if durations else math.nan
    median_ms = 1000.0 * statistics.median(durations) if durations else math.nan
    seconds = time.monotonic() - started
    job.log(
        f"done steps={step} final_loss={job.eval_loss():.6f} train_loss={last_loss:.6f} "
        f"mean_step_ms={mean_ms:.3f} median_step_ms={median_ms:.3f} "
        f"save_share={saved_s / seconds if seconds > 0 else 0.0:.5f} train_seconds={seconds:.2f}"
    )
    job.leave(0)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    job = Job(args)
    try:
        train(job)
    except (RuntimeError, dist.DistError) as error:
        # Typically a peer died ("Connection closed by peer") or hung (timeout). Exit at once:
        # tearing down a broken process group can block.
        print(f"rank {job.rank}: {error}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
