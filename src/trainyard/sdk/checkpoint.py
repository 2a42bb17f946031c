"""Checkpoints written in the background: `AsyncCheckpointer`, and where they go (`Storage`).

This module owns the checkpoint file format and naming (``step-000000123.pt``, written by
``torch.save``), the snapshot taken at `AsyncCheckpointer.save` (so training may go on while
the file is written), atomic writes (`LocalDirectory`), pruning to the newest ``keep`` and
finding the latest complete checkpoint to resume from.

Atomicity: a checkpoint is written to a temporary file in the same directory, flushed and
fsynced, then renamed over its final name with ``os.replace`` and the directory fsynced. A
reader, or a restart after ``kill -9`` mid-write, therefore sees either the whole file under
its final name or nothing; a temporary file left by a killed writer is never listed and is
removed by the next write from the same host.

Loading: `AsyncCheckpointer.load` uses ``torch.load(weights_only=True)`` by default: tensors,
numbers, strings, None, bools, ``torch.dtype``/``torch.Size`` and dicts, lists and tuples of
them load (a model's and an optimizer's ``state_dict()``, ``torch.get_rng_state()`` and
``random.getstate()`` all do), and nothing in the file can run code. A state holding other
objects (numpy arrays, custom classes) needs ``load(weights_only=False)``, which unpickles
arbitrary objects: acceptable only for files this job wrote itself into its own checkpoint
directory (trainyard's is private to the job's user), never for files from elsewhere.

torch is imported when a checkpoint is saved or loaded, not when this module is imported.
"""

from __future__ import annotations

import contextlib
import copy
import os
import pickle
import re
import socket
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Protocol

from trainyard.sdk import env

NAME = re.compile(r"^step-(\d+)\.pt$")
TMP_MARK = ".tmp-"


def checkpoint_name(step: int) -> str:
    """The file name of the checkpoint of `step`: ``step-000000123.pt``."""
    return f"step-{step:09d}.pt"


def parse_name(name: str) -> int | None:
    """The step of a checkpoint file name, None for any other name."""
    match = NAME.match(name)
    return int(match.group(1)) if match else None


class CheckpointError(RuntimeError):
    """A checkpoint could not be written or read."""


class Storage(Protocol):
    """Where checkpoints are kept. `write` must be atomic: `list` and `open_read` see a name
    only once its whole content is there."""

    def write(self, name: str, writer: Callable[[IO[bytes]], None]) -> None:
        """Store `name` with the bytes `writer` writes to the binary file it is given."""
        ...

    def list(self) -> list[str]:
        """The names of every complete object (no temporary or partial ones)."""
        ...

    def open_read(self, name: str) -> contextlib.AbstractContextManager[IO[bytes]]:
        """A binary file open on `name`'s content."""
        ...

    def delete(self, name: str) -> None:
        """Remove `name`; one that is already gone is not an error."""
        ...


class LocalDirectory:
    """A `Storage` on a local (or shared, POSIX) directory, created on the first write."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"LocalDirectory({str(self.path)!r})"

    def write(self, name: str, writer: Callable[[IO[bytes]], None]) -> None:
        _check_name(name)
        self.path.mkdir(parents=True, exist_ok=True)
        tag = f"{_host()}-{os.getpid()}-{threading.get_ident()}"
        tmp = self.path / f".{name}{TMP_MARK}{tag}"
        try:
            with open(tmp, "wb") as handle:
                writer(handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path / name)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        _fsync_dir(self.path)
        self._remove_abandoned()

    def list(self) -> list[str]:
        try:
            entries = os.listdir(self.path)
        except FileNotFoundError:
            return []
        return sorted(e for e in entries if not e.startswith(".") and TMP_MARK not in e)

    def open_read(self, name: str) -> contextlib.AbstractContextManager[IO[bytes]]:
        _check_name(name)
        return open(self.path / name, "rb")

    def delete(self, name: str) -> None:
        _check_name(name)
        with contextlib.suppress(FileNotFoundError):
            (self.path / name).unlink()

    def _remove_abandoned(self) -> None:
        """Remove temporary files left by writers on this host whose process is gone."""
        prefix = f"{TMP_MARK}{_host()}-"
        for entry in os.listdir(self.path):
            at = entry.find(prefix)
            if not entry.startswith(".") or at < 0:
                continue
            pid = entry[at + len(prefix) :].split("-", 1)[0]
            if pid.isdigit() and not _alive(int(pid)):
                with contextlib.suppress(OSError):
                    (self.path / entry).unlink()


def _check_name(name: str) -> None:
    if not name or "/" in name or os.sep in name or name in (".", ".."):
        raise ValueError(f"checkpoint name {name!r}: expected a plain file name")


def _host() -> str:
    return socket.gethostname().replace("-", "_") or "host"


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, another user's
        return True
    return True


def _fsync_dir(path: Path) -> None:
    """Make the rename durable (POSIX); a platform that cannot open directories skips it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def snapshot(state: Any) -> Any:
    """A deep copy of `state` that shares nothing with it: every tensor detached and copied to
    CPU memory (never a view of a live parameter, also for tensors already on the CPU),
    dicts (their type kept, e.g. ``OrderedDict``), lists and tuples copied item by item, any
    other value ``copy.deepcopy``-ed. A tensor reached twice stays one tensor (tied weights)."""
    torch = sys.modules.get("torch")
    tensor_type: type[Any] | None = getattr(torch, "Tensor", None) if torch is not None else None
    memo: dict[int, Any] = {}

    def walk(value: Any) -> Any:
        key = id(value)
        if key in memo:
            return memo[key]
        out: Any
        if tensor_type is not None and isinstance(value, tensor_type):
            out = value.detach().to("cpu", copy=True)
        elif isinstance(value, dict):
            out = copy.copy(value)  # the same type, e.g. OrderedDict, with its attributes
            out.clear()
            for k, v in value.items():
                out[k] = walk(v)
        elif isinstance(value, list):
            out = [walk(v) for v in value]
        elif type(value) is tuple:
            out = tuple(walk(v) for v in value)
        else:
            out = copy.deepcopy(value, memo)
        memo[key] = out
        return out

    return walk(state)


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise CheckpointError("checkpoints need torch: pip install torch") from None
    return torch


class AsyncCheckpointer:
    """Saves training state in the background: `save` copies the state to CPU memory and
    returns; one thread writes the file, then prunes all but the newest `keep` checkpoints.

    Only the rank `writer_rank` (the process's ``RANK`` when the checkpointer is made) writes;
    on every other rank `save` returns at once having done nothing, so a DDP job can call it
    on all ranks (the model is the same everywhere). Every rank can `latest` and `load`. At
    most one write is in flight: a `save` while one is being written first waits for it.

    `directory` (default `env.checkpoint_dir`, i.e. ``TRAINYARD_CHECKPOINT_DIR``) is used
    through `LocalDirectory`; pass `storage` instead for another `Storage`. The writing thread
    is not a daemon: an interpreter that exits normally first finishes the write.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        keep: int = 3,
        storage: Storage | None = None,
        writer_rank: int = 0,
    ) -> None:
        if keep < 1:
            raise ValueError(f"keep: expected >= 1, got {keep}")
        if storage is not None and directory is not None:
            raise ValueError("pass directory or storage, not both")
        self.storage: Storage = (
            storage if storage is not None else LocalDirectory(directory or env.checkpoint_dir())
        )
        self.keep = keep
        self.writer_rank = writer_rank
        self.is_writer = env.rank() == writer_rank
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()  # one save at a time, also from several threads

    def __repr__(self) -> str:
        return f"AsyncCheckpointer({self.storage!r}, keep={self.keep})"

    def __enter__(self) -> AsyncCheckpointer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def save(self, step: int, state: Any, blocking: bool = False) -> None:
        """Checkpoint `state` as that of `step`. The state (nested dicts, lists and tuples of
        tensors and plain values) is copied to CPU memory before this returns, so the caller
        may change the model at once; the file is written by a background thread, or before
        this returns with `blocking`. Waits first for a write still in flight (and raises its
        error, if it failed). On a rank other than `writer_rank` it does nothing."""
        if not self.is_writer:
            return
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"step: expected an integer >= 0, got {step!r}")
        torch = _torch()
        with self._lock:
            self._join()
            copied = snapshot(state)
            name = checkpoint_name(step)
            self._thread = threading.Thread(
                target=self._write,
                args=(torch, name, copied),
                name=f"trainyard-checkpoint-{step}",
                daemon=False,
            )
            self._thread.start()
            if blocking:
                self._join()

    def wait(self) -> None:
        """Block until the write in flight (if any) is done; raise its error if it failed."""
        with self._lock:
            self._join()

    def close(self) -> None:
        """Wait for the write in flight (see `wait`)."""
        self.wait()

    def checkpoints(self) -> list[tuple[int, str]]:
        """Every complete checkpoint as (step, name), oldest step first."""
        found = []
        for name in self.storage.list():
            step = parse_name(name)
            if step is not None:
                found.append((step, name))
        return sorted(found)

    def latest(self) -> tuple[int, str] | None:
        """(step, name) of the newest complete checkpoint, None when there is none."""
        found = self.checkpoints()
        return found[-1] if found else None

    def load(
        self, map_location: Any = "cpu", *, weights_only: bool = True
    ) -> tuple[int, Any] | None:
        """(step, state) of the newest checkpoint, None when there is none. See the module's
        docstring for `weights_only` (False only for files this job wrote)."""
        latest = self.latest()
        if latest is None:
            return None
        step, name = latest
        torch = _torch()
        with self.storage.open_read(name) as handle:
            try:
                state = torch.load(handle, map_location=map_location, weights_only=weights_only)
            except pickle.UnpicklingError as error:
                if not weights_only:
                    raise
                raise CheckpointError(
                    f"{name}: holds objects that weights_only=True refuses ({error}); if this "
                    "job wrote it, load(weights_only=False) loads it"
                ) from error
        return step, state

    def _join(self) -> None:
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        error, self._error = self._error, None
        if error is not None:
            raise CheckpointError(f"writing a checkpoint failed: {error}") from error

    def _write(self, torch: Any, name: str, state: Any) -> None:
        try:
            self.storage.write(name, lambda handle: torch.save(state, handle))
            for _, old in self.checkpoints()[: -self.keep]:
                self.storage.delete(old)
        except BaseException as error:
            self._error = error
