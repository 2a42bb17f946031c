"""A single-process training job (numpy only, no torch.distributed): polynomial regression.

Usage::

    python examples/jobs/single/train.py --steps 300 --checkpoint-every 50

It fits y = 1.5 - 2 x + 0.5 x^3 (plus a little noise) on data generated deterministically from
``--seed``, with mini-batch SGD with momentum on the features (1, x, x^2, x^3).

Output (one line each, flushed)::

    start steps=300
    resumed from step 100                       # when a checkpoint was found
    step 10 loss 0.123456                       # step 1, every --log-every steps, last step
    checkpoint step=50 path=checkpoints/ckpt-00000050.pkl
    stopped by SIGTERM at step=93               # only on SIGTERM (exit code 143)
    done steps=300 final_loss=0.001234

Checkpoints follow the same convention as ``examples/jobs/ddp/train.py``: into
``$TRAINYARD_CHECKPOINT_DIR`` (default ``./checkpoints``), every ``--checkpoint-every`` steps,
at the last step and on SIGTERM, as ``ckpt-{step:08d}.pkl`` (weights, momentum, step and the
RNG state), written to a temporary file, fsynced and renamed with ``os.replace``; the last
``--keep`` are kept. On start the job resumes from the latest one and prints
``resumed from step K``. On SIGTERM (or SIGINT) it finishes the current step, checkpoints and
exits with 143; a second signal exits at once.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import pickle
import signal
import sys
from types import FrameType

import numpy as np

EXIT_SIGTERM = 143
DATASET_SIZE = 2048
TRUE_COEFFICIENTS = np.array([1.5, -2.0, 0.0, 0.5])

_stop_requested = False


def _on_signal(signum: int, _frame: FrameType | None) -> None:
    global _stop_requested
    if _stop_requested:
        os._exit(EXIT_SIGTERM)
    _stop_requested = True


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--checkpoint-every", type=int, default=50, help="0: only at the end")
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--keep", type=int, default=3)
    return parser.parse_args(argv)


def features(x: np.ndarray) -> np.ndarray:
    return np.stack([np.ones_like(x), x, x**2, x**3], axis=1)


def make_dataset(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2.0, 2.0, DATASET_SIZE)
    y = features(x) @ TRUE_COEFFICIENTS + 0.05 * rng.standard_normal(DATASET_SIZE)
    return features(x), y


def checkpoint_dir() -> str:
    return os.environ.get("TRAINYARD_CHECKPOINT_DIR") or "checkpoints"


def list_checkpoints(directory: str) -> list[tuple[int, str]]:
    found = []
    for path in glob.glob(os.path.join(directory, "ckpt-*.pkl")):
        stem = os.path.basename(path)[len("ckpt-") : -len(".pkl")]
        if stem.isdigit():
            found.append((int(stem), path))
    return sorted(found)


def save_checkpoint(directory: str, state: dict[str, object], keep: int) -> str:
    os.makedirs(directory, exist_ok=True)
    final = os.path.join(directory, f"ckpt-{state['step']:08d}.pkl")
    tmp = os.path.join(directory, f".{os.path.basename(final)}.tmp-{os.getpid()}")
    with open(tmp, "wb") as handle:
        pickle.dump(state, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, final)
    # Older checkpoints beyond `keep`, and temporary files an earlier attempt left when it was
    # killed while saving (there is one writer at a time).
    stale = glob.glob(os.path.join(directory, ".ckpt-*.pkl.tmp-*"))
    stale += [old for _, old in list_checkpoints(directory)[:-keep]] if keep > 0 else []
    for path in stale:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
    return final


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    print(f"start steps={args.steps}", flush=True)

    x_all, y_all = make_dataset(args.seed)
    rng = np.random.default_rng(args.seed + 1)  # batch sampling
    weights = np.zeros(4)
    velocity = np.zeros(4)
    step = 0
    directory = checkpoint_dir()
    found = list_checkpoints(directory)
    if found:
        with open(found[-1][1], "rb") as handle:
            state = pickle.load(handle)
        weights, velocity, step = state["weights"], state["velocity"], int(state["step"])
        rng.bit_generator.state = state["rng"]
        print(f"resumed from step {step}", flush=True)

    last_loss = float("nan")
    while step < args.steps:
        step += 1
        idx = rng.integers(0, DATASET_SIZE, args.batch_size)
        x, y = x_all[idx], y_all[idx]
        error = x @ weights - y
        last_loss = float(np.mean(error**2))
        gradient = 2.0 * x.T @ error / len(idx)
        velocity = 0.9 * velocity - args.lr * gradient
        weights = weights + velocity
        stopping = _stop_requested
        if step == 1 or step % args.log_every == 0 or step == args.steps or stopping:
            print(f"step {step} loss {last_loss:.6f}", flush=True)
        due = args.checkpoint_every > 0 and step % args.checkpoint_every == 0
        if due or step == args.steps or stopping:
            state = {
                "step": step,
                "weights": weights,
                "velocity": velocity,
                "rng": rng.bit_generator.state,
            }
            path = save_checkpoint(directory, state, args.keep)
            print(f"checkpoint step={step} path={path}", flush=True)
        if stopping:
            print(f"stopped by SIGTERM at step={step}", flush=True)
            return EXIT_SIGTERM
    print(f"done steps={step} final_loss={last_loss:.6f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
