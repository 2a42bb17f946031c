"""The wrapper every rank runs under: it records the rank's exit code in a file.

Usage (the executor runs this file by path, with the standard library only):

    python rankwrap.py --exit-file F --pid-file P [--env-fd FD] [--cwd DIR] [--cgroup DIR]
        [--user UID:GID] [--umask OCT] [--log FILE --log-cap BYTES] -- CMD ARGS...

It joins the cgroup DIR (if given), starts CMD as its child (same process group, same log
file; as UID:GID with no supplementary groups when `--user` is given, which needs root: the
wrapper itself stays the server's user, so the job cannot forge its exit record), records
the child's pid and start time in P, waits, and writes
`{"returncode": rc, "finished_at": t}` atomically to F (rc < 0: killed by signal -rc). A
server that restarted cannot wait on processes that are not its children; the exit file tells
it how each rank ended. SIGTERM / SIGINT / SIGHUP are caught and ignored here: the executor
signals the whole process group, so the child receives them itself and the wrapper stays to
record how the child ended. Only SIGKILL of the wrapper loses the record (the executor then
reports the exit code as unknown).

The job's environment reaches CMD only. With `--env-fd`, the wrapper reads it, a JSON object
of names to values, from that file descriptor (a pipe the executor writes and closes) and
gives it to the child alone; the wrapper itself runs in the executor's fixed environment. It
runs as the server's user (root, when jobs run as uids of their own) until the child's exec,
so a job's `LD_PRELOAD`, `LD_LIBRARY_PATH` or `GLIBC_TUNABLES` in the wrapper's own
environment would run the job's code, or steer the loader, as that user. For the same reason
the child enters `--cwd` itself, after it has become UID:GID: a working directory the job's
user may not enter (a link swapped in after submit, to the server's state) stops it there.

With `--log`, the child's stdout and stderr come to the wrapper through a pipe and it writes
them to FILE, rotating it (to `FILE.1`, replacing the older one) whenever it would pass half
of `--log-cap`: the newest output is kept, at most BYTES in both files together, whatever the
job prints. (A wrapper killed by SIGKILL closes the pipe: the job's next write ends it.) Once
the command has ended, its output is read to the end for at most `DRAIN_S` seconds: a process
it left behind (`setsid` and fork) keeps the pipe open, and the rank must end with its
command all the same (the executor then kills what is left of the job's uid).
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any


def _write_atomic(path: str, data: dict[str, object]) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".rankwrap.", dir=os.path.dirname(path) or ".")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _start_time(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            raw = f.read()
    except OSError:
        return None
    return int(raw[raw.rfind(")") + 2 :].split()[19])


_received: list[int] = []


def _note(signum: int, frame: object) -> None:
    """A handler (not SIG_IGN, which the child would inherit across exec): the child gets
    the signal from the group; the wrapper only remembers it."""
    _received.append(signum)


CHUNK = 65536
DRAIN_S = 5.0  # how long the output of an ended command is read before its end is recorded


def _pump(source: int, path: str, cap: int) -> None:
    """Copy `source` to `path` until end of file, keeping the newest `cap` bytes (0: all) in
    `path` and `path.1` together (see the module docstring). A rotation happens after a
    newline where the chunk read has one, so lines stay whole across the two files."""
    half = max(cap // 2 - CHUNK, 1) if cap else 0  # a rotation may add one chunk to the old
    out = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    size = os.fstat(out).st_size
    try:
        while data := os.read(source, CHUNK):
            if half and size and size + len(data) > half:
                cut = data.rfind(b"\n") + 1  # 0: no newline, rotate before the chunk
                _write_all(out, data[:cut])
                os.close(out)
                os.replace(path, path + ".1")
                out = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC, 0o600)
                data, size = data[cut:], 0
            _write_all(out, data)
            size += len(data)
    finally:
        os.close(out)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_env(fd: int) -> dict[str, str]:
    """The child's environment, read to the end of `fd` (a JSON object), which is closed."""
    chunks = []
    try:
        while data := os.read(fd, CHUNK):
            chunks.append(data)
    finally:
        os.close(fd)
    raw = json.loads(b"".join(chunks))
    if not isinstance(raw, dict):
        raise ValueError("the environment is not a JSON object")
    return {str(k): str(v) for k, v in raw.items()}


def _not_started(exit_file: str, error: str) -> int:
    """Say why the command did not start, on the log and in the exit record (code 127)."""
    print(f"[trainyard] {error}", file=sys.stderr, flush=True)
    _write_atomic(exit_file, {"returncode": 127, "finished_at": time.time(), "error": error})
    return 127


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("rankwrap: usage: --exit-file F --pid-file P [--cgroup DIR] -- CMD", file=sys.stderr)
        return 2
    split = argv.index("--")
    opts, cmd = argv[:split], argv[split + 1 :]
    flags = dict(zip(opts[::2], opts[1::2], strict=False))
    exit_file, pid_file = flags["--exit-file"], flags["--pid-file"]
    cgroup = flags.get("--cgroup")
    user = flags.get("--user")
    mask = flags.get("--umask")
    log, cap = flags.get("--log"), int(flags.get("--log-cap", "0") or 0)
    identity: dict[str, Any] = {}
    env_fd = flags.get("--env-fd")
    if env_fd is not None:
        try:
            identity["env"] = _read_env(int(env_fd))
        except (OSError, ValueError) as e:
            return _not_started(exit_file, f"cannot read the job's environment: {e}")
    if user:
        uid, gid = (int(x) for x in user.split(":"))
        identity.update(user=uid, group=gid, extra_groups=[])
    if mask:
        identity["umask"] = int(mask, 8)
    cwd = flags.get("--cwd")
    if cwd:  # entered as the job's user (preexec_fn runs after setuid, before exec)
        identity["preexec_fn"] = functools.partial(os.chdir, cwd)
    if cgroup:
        try:
            with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        except OSError as e:
            print(f"[trainyard] warning: could not join cgroup {cgroup}: {e}", file=sys.stderr)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _note)
    if _received:  # stopped before the command started: do not start it
        rc = -_received[0]
        _write_atomic(exit_file, {"returncode": rc, "finished_at": time.time()})
        return 128 - rc
    if log:
        identity.update(stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        child = subprocess.Popen(cmd, **identity)
    except OSError as e:
        return _not_started(exit_file, f"cannot start {cmd[:1]}: {e}")
    except subprocess.SubprocessError:  # the chdir of preexec_fn
        return _not_started(
            exit_file,
            f"cannot start {cmd[:1]} in {cwd}: it is gone, or the job's user may not enter it",
        )
    _write_atomic(pid_file, {"pid": child.pid, "start_time": _start_time(child.pid)})
    pump = None
    if log and child.stdout is not None:
        pump = threading.Thread(target=_pump, args=(child.stdout.fileno(), log, cap), daemon=True)
        pump.start()
    rc = child.wait()
    if pump is not None:  # the output to its end, unless a process the command left behind
        pump.join(DRAIN_S)  # holds the pipe open: then the rank ends with its command
    _write_atomic(exit_file, {"returncode": rc, "finished_at": time.time()})
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
