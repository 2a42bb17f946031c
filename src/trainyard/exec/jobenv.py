"""The environment of a job's processes: built from an allow-list, never the server's own.

A rank sees exactly:

- `PATH`: the server's interpreter directory first (so `python` is the one trainyard runs
  under, its virtualenv and torch included), then the spec's `PATH` if it sets one, else
  `/usr/local/bin:/usr/bin:/bin`;
- `HOME`, `TMPDIR`, `USER`, `LOGNAME`: the job's own (its home and temporary directories
  under the job's directory, the account it runs as), `LANG=C.UTF-8`;
- the variables the operator passes through by name (`trainyard up --job-env NAME`, for
  cluster-wide settings such as `NCCL_SOCKET_IFNAME` or `HF_HOME`), with the server's values;
- the spec's `env`;
- the torchrun variables (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`, ...), `CUDA_VISIBLE_DEVICES`
  and the job's own `TRAINYARD_*` (its id, attempt, checkpoint directory, API URL and
  token), which a spec cannot override (`launch_variables`: the part every executor sets).

Nothing else of the server's environment reaches a job: its database URL, credentials,
tokens and whatever its shell exported stay with it. `--job-env` cannot name the platform's
own credentials either (`check_passthrough`): Ray's token, which would let every job drive
the cluster, and any `TRAINYARD_*` name (the server's settings, its database URL among
them, and the job's own variables). The local executor hands this environment to a rank's
command through a pipe (`send_environment`), never to the rank wrapper, which runs as the
server's user (exec/rankwrap.py).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from trainyard.exec.jobdirs import notice_path
from trainyard.exec.run import LaunchSpec

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"

# what `--job-env` may not pass: the keys to the platform itself, with why
_CREDENTIALS = {
    "RAY_AUTH_TOKEN": "the Ray cluster's token: a job holding it can run tasks on every node "
    "and kill other jobs' ranks (docs/ray.md, Security)",
    "RAY_AUTH_TOKEN_PATH": "where the Ray cluster's token is kept (docs/ray.md, Security)",
}
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


def check_passthrough(names: Iterable[str]) -> None:
    """Refuse a `--job-env` name that is not a variable name or that would hand every job
    the platform's own credentials (ValueError, naming the flag, the variable and why)."""
    for name in names:
        if not name or name[0].isdigit() or not set(name) <= _NAME_CHARS:
            raise ValueError(
                f"--job-env {name!r}: not a variable name (letters, digits and _, "
                "not starting with a digit)"
            )
        why = _CREDENTIALS.get(name)
        if why is None and name.startswith("TRAINYARD_"):
            why = (
                "a TRAINYARD_* name, the platform's own: the server's settings (TRAINYARD_DB "
                "holds its database URL) or a job's variables, which the executor sets"
            )
        if why is not None:
            raise ValueError(f"--job-env {name}: not passed to jobs, it is {why}")


def interpreter_first(path: str) -> str:
    """`path` with the server's interpreter directory first."""
    bindir = str(Path(sys.executable).parent)
    rest = [p for p in path.split(os.pathsep) if p and p != bindir]
    return os.pathsep.join([bindir, *rest])


def job_environment(
    *,
    spec_env: Mapping[str, str],
    own: Mapping[str, str],
    home: Path,
    tmp: Path,
    user: str,
    passthrough: Iterable[str] = (),
    server_env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The base environment of every rank of one attempt (see the module docstring); `own`
    holds the executor's variables (torchrun's, `TRAINYARD_*`)."""
    source = os.environ if server_env is None else server_env
    env = {
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "USER": user,
        "LOGNAME": user,
        "LANG": "C.UTF-8",
    }
    for name in passthrough:
        if name in source:
            env[name] = source[name]
    env.update(spec_env)
    env["PATH"] = interpreter_first(spec_env.get("PATH", DEFAULT_PATH))
    env.update(own)
    return env


def launch_variables(
    spec: LaunchSpec, *, world: int, nnodes: int, master: str, port: int, job_dir: Path,
    api_url: str,
) -> dict[str, str]:  # fmt: skip
    """What every executor sets for every rank of an attempt: torchrun's variables shared by
    all ranks (a rank adds its own `RANK`, `LOCAL_RANK`, ...) and the job's `TRAINYARD_*`."""
    own = {
        "WORLD_SIZE": str(world),
        "GROUP_WORLD_SIZE": str(nnodes),
        "ROLE_NAME": "default",
        "ROLE_WORLD_SIZE": str(world),
        "MASTER_ADDR": master,
        "MASTER_PORT": str(port),
        "TORCHELASTIC_RESTART_COUNT": str(spec.attempt),
        "TORCHELASTIC_RUN_ID": spec.job_id,
        "PYTHONUNBUFFERED": "1",
        "TRAINYARD_JOB_ID": spec.job_id,
        "TRAINYARD_ATTEMPT": str(spec.attempt),
        "TRAINYARD_CHECKPOINT_DIR": str((job_dir / "checkpoints").resolve()),
        "TRAINYARD_API_URL": api_url,
        "TRAINYARD_TOKEN": spec.token,
        "TRAINYARD_NOTICE_FILE": str(notice_path(job_dir).resolve()),
    }
    if spec.virtual_gpus:
        own["TRAINYARD_VIRTUAL_GPUS"] = "1"
    if spec.array is not None:  # a member of a job array: its index, as SLURM_ARRAY_*
        own.update(TRAINYARD_ARRAY_ID=spec.array[0], TRAINYARD_ARRAY_INDEX=str(spec.array[1]))
    return own


def send_environment(fd: int, env: Mapping[str, str]) -> None:
    """Write `env` to the wrapper's pipe as JSON and close it. A wrapper gone before reading
    it (BrokenPipeError) records its own end: the run's poll reports it."""
    data = json.dumps(dict(env)).encode()
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except BrokenPipeError:
        pass
    finally:
        os.close(fd)
