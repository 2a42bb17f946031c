"""Requests from the scheduler to stop: `Notices`, and the exit code that answers them.

This module owns how a job learns that it should checkpoint and leave, and how it says it
did. The executor sends SIGTERM (stop) or SIGUSR1 (a notice), and may first write the reason
to the file named by ``TRAINYARD_NOTICE_FILE``: its first line is ``preempt`` (the job's
devices are taken back; it will be restarted), ``resize`` (it will be restarted at another
size) or ``stop``. The training loop polls `Notices.requested` once per step (a signal only
sets a flag; a ``stat`` of the file is the cost of a poll) and, when it is not None, saves a
checkpoint and exits with `EXIT_CHECKPOINTED` (`exit_after_checkpoint` does both).

`EXIT_CHECKPOINTED` (85) means "stopped cleanly on request after saving a checkpoint:
restart me from it". The executor treats it as such, not as a failure (issue 15); any other
non-zero code is a failure.
"""

from __future__ import annotations

import contextlib
import signal
from types import FrameType
from typing import Any, Final, Literal, NoReturn

from trainyard.sdk import env
from trainyard.sdk.checkpoint import AsyncCheckpointer, CheckpointError

Reason = Literal["preempt", "resize", "stop"]
REASONS: Final[tuple[Reason, ...]] = ("resize", "preempt", "stop")  # mildest first
EXIT_CHECKPOINTED: Final = 85
SIGNALS: Final = (signal.SIGTERM, signal.SIGUSR1)

_Handler = Any  # what signal.signal returns: a callable, an int, a Handlers value or None


class Notices:
    """Installs handlers for SIGTERM and SIGUSR1 (in the main thread, as Python requires)
    and reports what was asked: see `requested`. `close` puts the previous handlers back."""

    def __init__(self) -> None:
        self._received: int | None = None
        self._previous: dict[int, _Handler] = {}
        for signum in SIGNALS:
            self._previous[signum] = signal.signal(signum, self._on_signal)

    def __enter__(self) -> Notices:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        # SIGTERM wins over a notice received before or after it
        if self._received != signal.SIGTERM:
            self._received = signum

    @property
    def requested(self) -> Reason | None:
        """None, or why the job is asked to stop: the first line of the notice file when it
        exists and names a reason, else ``stop`` after SIGTERM and ``preempt`` after SIGUSR1
        (a notice whose file is missing)."""
        reason = read_notice_file()
        if reason is not None:
            return reason
        if self._received == signal.SIGTERM:
            return "stop"
        if self._received == signal.SIGUSR1:
            return "preempt"
        return None

    def requested_by_any(self) -> Reason | None:
        """`requested` agreed across the ranks: when torch.distributed is initialised, every
        rank calls this at the same step and all get the strongest reason any rank has
        (``stop`` > ``preempt`` > ``resize``), so all stop after the same step. One small
        all-reduce; without a process group it is `requested`."""
        mine = self.requested
        try:
            import torch
            import torch.distributed as dist
        except ImportError:
            return mine
        if not (dist.is_available() and dist.is_initialized()):
            return mine
        code = 0 if mine is None else REASONS.index(mine) + 1
        flag = torch.tensor([code], dtype=torch.int32, device=_collective_device(dist))
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        agreed = int(flag.item())
        return REASONS[agreed - 1] if agreed else None

    def close(self) -> None:
        """Put back the handlers that were there before."""
        previous, self._previous = self._previous, {}
        for signum, handler in previous.items():
            with contextlib.suppress(TypeError, ValueError):  # None: not set from Python
                signal.signal(signum, handler)


def _collective_device(dist: Any) -> Any:
    return env.device() if dist.get_backend() == "nccl" else "cpu"


def read_notice_file() -> Reason | None:
    """The reason written to ``TRAINYARD_NOTICE_FILE``, None when it is unset, missing or
    does not start with a known reason."""
    path = env.notice_file()
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            first = handle.readline().strip().lower()
    except OSError:
        return None
    for reason in REASONS:
        if first == reason:
            return reason
    return None


def exit_after_checkpoint(checkpointer: AsyncCheckpointer, step: int, state: Any) -> NoReturn:
    """Save `state` as `step` with `checkpointer`, wait until the file is complete (an
    earlier background write that failed is superseded by this one, not raised) and exit
    with `EXIT_CHECKPOINTED`. Call it on every rank: only the writer rank writes, and when
    torch.distributed is initialised every rank first waits at a barrier for the writer, so
    none leaves before the checkpoint is on disk."""
    with contextlib.suppress(CheckpointError):  # an earlier write failed: this one replaces it
        checkpointer.wait()
    checkpointer.save(step, state, blocking=True)
    checkpointer.wait()
    with contextlib.suppress(ImportError):
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.barrier()
    raise SystemExit(EXIT_CHECKPOINTED)
