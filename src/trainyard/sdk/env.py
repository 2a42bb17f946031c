"""The job's environment as trainyard's executors (and torchrun) set it, read by name.

This module owns the meaning of every variable a rank receives and its default when the
variable is absent, which is that of a plain single process: rank 0 of a world of 1 on one
node, attempt 0, checkpoints under ``./checkpoints``. Nothing here imports torch at import
time; `device` imports it when called.

Variables: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK`` (the
node's index), ``GROUP_WORLD_SIZE`` (nodes), ``CUDA_VISIBLE_DEVICES``, ``TRAINYARD_JOB_ID``,
``TRAINYARD_ATTEMPT``, ``TRAINYARD_CHECKPOINT_DIR``, ``TRAINYARD_API_URL``,
``TRAINYARD_TOKEN``, ``TRAINYARD_VIRTUAL_GPUS`` (the devices are declared, not real),
``TRAINYARD_RANK_DEVICES`` (this rank's devices among the visible ones) and
``TRAINYARD_NOTICE_FILE`` (see `trainyard.sdk.notices`). A variable set to an empty string
counts as absent; one that should be an integer and is not raises `ValueError` naming it.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

DEFAULT_CHECKPOINT_DIR = "checkpoints"


def _text(name: str) -> str | None:
    value = os.environ.get(name, "").strip()
    return value or None


def _int(name: str, default: int) -> int:
    value = _text(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r}: expected an integer") from None


def rank() -> int:
    """This process's global rank (``RANK``, default 0)."""
    return _int("RANK", 0)


def world_size() -> int:
    """How many ranks the job has (``WORLD_SIZE``, default 1)."""
    return _int("WORLD_SIZE", 1)


def local_rank() -> int:
    """This process's rank on its node (``LOCAL_RANK``, default 0)."""
    return _int("LOCAL_RANK", 0)


def local_world_size() -> int:
    """How many ranks run on this node (``LOCAL_WORLD_SIZE``, default 1)."""
    return _int("LOCAL_WORLD_SIZE", 1)


def node_rank() -> int:
    """This node's index in the job (``GROUP_RANK``, default 0)."""
    return _int("GROUP_RANK", 0)


def nodes() -> int:
    """How many nodes the job spans (``GROUP_WORLD_SIZE``, default 1)."""
    return _int("GROUP_WORLD_SIZE", 1)


def job_id() -> str | None:
    """The trainyard job id (``TRAINYARD_JOB_ID``), None outside trainyard."""
    return _text("TRAINYARD_JOB_ID")


def attempt() -> int:
    """Which attempt of the job this is, 0 for the first (``TRAINYARD_ATTEMPT``)."""
    return _int("TRAINYARD_ATTEMPT", 0)


def checkpoint_dir() -> Path:
    """Where checkpoints go: ``TRAINYARD_CHECKPOINT_DIR`` (the same directory for every
    attempt of the job), else ``./checkpoints``."""
    return Path(_text("TRAINYARD_CHECKPOINT_DIR") or DEFAULT_CHECKPOINT_DIR)


def api_url() -> str | None:
    """The trainyard server's base URL (``TRAINYARD_API_URL``), None outside trainyard."""
    value = _text("TRAINYARD_API_URL")
    return value.rstrip("/") if value else None


def token() -> str | None:
    """The job's bearer token for the server (``TRAINYARD_TOKEN``)."""
    return _text("TRAINYARD_TOKEN")


def notice_file() -> Path | None:
    """The file the executor writes a notice's reason to (``TRAINYARD_NOTICE_FILE``)."""
    value = _text("TRAINYARD_NOTICE_FILE")
    return Path(value) if value else None


def under_trainyard() -> bool:
    """Whether this process runs as a trainyard job with a server to talk to (both
    ``TRAINYARD_JOB_ID`` and ``TRAINYARD_API_URL`` are set)."""
    return job_id() is not None and api_url() is not None


def virtual_gpus() -> bool:
    """Whether the job's GPUs are declared, not real (``TRAINYARD_VIRTUAL_GPUS`` set to
    anything but ``0``): the job then runs on CPU with gloo."""
    return _text("TRAINYARD_VIRTUAL_GPUS") not in (None, "0")


def visible_devices() -> tuple[str, ...]:
    """The entries of ``CUDA_VISIBLE_DEVICES`` (the devices this process can see), ()."""
    return _list("CUDA_VISIBLE_DEVICES")


def rank_devices() -> tuple[int, ...] | None:
    """This rank's own devices as indexes among the visible ones
    (``TRAINYARD_RANK_DEVICES``, set by trainyard when every rank sees all the node's
    devices), None when unset."""
    entries = _list("TRAINYARD_RANK_DEVICES")
    if not entries:
        return None
    try:
        return tuple(int(e) for e in entries)
    except ValueError:
        shown = ",".join(entries)
        raise ValueError(f"TRAINYARD_RANK_DEVICES={shown!r}: expected integers") from None


def gpus_per_rank() -> int:
    """How many GPUs each rank holds: the entries of ``TRAINYARD_RANK_DEVICES`` when set,
    else those of ``CUDA_VISIBLE_DEVICES``; at least 1 (a CPU rank counts as one worker)."""
    own = rank_devices()
    return max(1, len(own) if own is not None else len(visible_devices()))


def _list(name: str) -> tuple[str, ...]:
    value = _text(name) or ""
    return tuple(part.strip() for part in value.split(",") if part.strip())


def _real_cuda() -> bool:
    if virtual_gpus():
        return False
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def device() -> torch.device:
    """The device this rank trains on: on real CUDA (available, the GPUs not virtual) the
    first of ``TRAINYARD_RANK_DEVICES`` when set, else ``cuda:i`` with
    ``i = LOCAL_RANK % device_count`` (``cuda:LOCAL_RANK`` when every rank sees all the
    node's devices, ``cuda:0`` when each sees only its own); otherwise ``cpu``. Needs torch."""
    import torch

    if not _real_cuda():
        return torch.device("cpu")
    own = rank_devices()
    index = own[0] if own else local_rank() % torch.cuda.device_count()
    return torch.device("cuda", index)


def backend() -> str:
    """The torch.distributed backend that fits `device`: ``nccl`` on real CUDA, else
    ``gloo``. Works without torch (``gloo``)."""
    return "nccl" if _real_cuda() else "gloo"


# What a launcher (torchrun, trainyard's executors) sets and a plain `python train.py` lacks.
_ONE_RANK = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"}


def init_distributed(**kwargs: Any) -> str:
    """``torch.distributed.init_process_group`` with `backend` (``env://`` rendezvous), also
    when no launcher started the process: without ``WORLD_SIZE`` it is one rank (the
    variables of `_ONE_RANK`, ``MASTER_ADDR`` 127.0.0.1 and a free ``MASTER_PORT``, set only
    where absent), so a script run plainly (``python train.py``) works as rank 0 of 1.
    `kwargs` go to ``init_process_group`` (a ``backend`` there wins). Returns the backend."""
    import torch.distributed as dist

    if _text("WORLD_SIZE") is None:
        for name, value in _ONE_RANK.items():
            os.environ.setdefault(name, value)
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        if _text("MASTER_PORT") is None:
            with socket.socket() as probe:  # a port free now; one process binds it next
                probe.bind(("127.0.0.1", 0))
                os.environ["MASTER_PORT"] = str(probe.getsockname()[1])
    chosen = str(kwargs.pop("backend", None) or backend())
    dist.init_process_group(backend=chosen, **kwargs)
    return chosen
