"""`RankSupervisor`: the Ray actor that runs one rank of a job on the node the core chose.

It is a plain class here; `RayExecutor` makes it a Ray actor (`ray.remote`, threaded, so
`wait` can block in one thread while `read` and `signal` answer in others), pinned to its
node with a hard node-affinity strategy, detached and named `<job>.<attempt>.<rank>` in the
`trainyard` namespace so that a restarted server finds it again (`RayExecutor.adopt`).

The rank's command runs as the actor's child in a new session (one `killpg` reaches every
process it starts) with `PR_SET_PDEATHSIG` = SIGKILL: when the actor's process dies (its
node is lost, Ray kills it), the rank dies with it and cannot go on writing checkpoints
beside a new attempt. The parent-death signal follows the *thread* that started the child,
so the child is started from a thread of this class that lives until the child has exited.

That does not reach a rank whose node is cut off or frozen rather than dead: Ray declares
the node dead while this process lives on. So a thread of this class also reads the job's
fence in the shared runs directory and kills the rank when a later attempt is named there
(`fence.py`).

Output (stdout and stderr together) is read by another thread into a buffer that `read`
empties; the executor appends it to the rank's log file on the server. The buffer keeps at
most `BUFFER_CAP` unread bytes (the oldest are dropped, and a line says how many).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import threading
import time

from trainyard.exec import procfs
from trainyard.exec.ray import fence

BUFFER_CAP = 8 * 1024 * 1024
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class RankSupervisor:
    """One rank's process on this node (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buffer = bytearray()
        self._base = 0  # the stream offset of `_buffer`'s first byte
        self._dropped = 0
        self._started = threading.Event()
        self._done = threading.Event()
        self._proc: subprocess.Popen[bytes] | None = None
        self._code: int | None = None
        self._exited_at = 0.0
        self._uid: int | None = None  # the job's own uid (`--job-user dynamic`)
        self._error = ""
        self._thread: threading.Thread | None = None

    # ---- what the executor calls -------------------------------------------------------

    def node(self) -> dict[str, str]:
        """Where this actor runs: its host name and address."""
        host = socket.gethostname()
        return {"hostname": host, "address": _address()}

    def free_port(self) -> int:
        """A TCP port free on this node now (for rank 0's `MASTER_PORT`)."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))
            return int(s.getsockname()[1])

    def start(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: str | None,
        fence_path: str | None = None,
        attempt: int = 0,
        user: tuple[int, int] | None = None,
    ) -> dict[str, object]:
        """Start the rank (once); its pid and the time it started, or the error. With
        `fence_path`, the rank is killed once that fence names an attempt after `attempt`;
        with `user` (uid, gid) it runs as that account, with no supplementary groups and
        umask 077 (the job's own uid: `--job-user dynamic`), which needs a root worker."""
        if self._thread is None:
            watch = (fence_path, attempt) if fence_path is not None else None
            self._thread = threading.Thread(
                target=self._run, args=(argv, env, cwd, user, watch), name="rank", daemon=True
            )
            self._thread.start()
        self._started.wait()
        proc = self._proc
        return {"pid": proc.pid if proc else 0, "error": self._error, "at": time.time()}

    def wait(self) -> dict[str, object]:
        """Block until the rank has exited; its exit code ("code", negative: the killing
        signal) and when it exited on this node ("at"): a server that learns of it later (it
        was restarting, or its database was away) bills and blames by that time."""
        self._done.wait()
        assert self._code is not None
        return {"code": self._code, "at": self._exited_at}

    def read_from(self, since: int) -> dict[str, object]:
        """The output from stream offset `since` on ("from": where "data" starts, "note": what
        was dropped meanwhile). What is before `since` the server has written, so it is
        dropped here; what is after stays until a later call says it was written: a server
        that crashed with a read in flight loses nothing (an outside review lost a line that
        way), and the next one reads it again (`since` -1: all that is kept)."""
        with self._lock:
            if since > self._base:
                cut = min(since - self._base, len(self._buffer))
                del self._buffer[:cut]
                self._base += cut
            out, start = bytes(self._buffer), self._base
            dropped, self._dropped = self._dropped, 0
        note = f"[trainyard] {dropped} bytes of output were dropped (log relay behind)\n"
        return {"from": start, "data": out, "note": note.encode() if dropped else b""}

    def signal(self, signum: int) -> bool:
        """Send `signum` to the rank's process group; False once it has exited."""
        proc = self._proc
        if proc is None or self._done.is_set():
            return False
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signum)
        return True

    def sweep(self) -> int:
        """Kill every process of the rank's own uid on this node (`--job-user dynamic`), the
        ones that left its session (`setsid`) included, which signals to its group miss and
        which would outlive the job (outside review 10); how many. Nothing for a rank that
        runs as the Ray workers' user, whose other processes are not the job's."""
        if self._uid is None:
            return 0
        killed = 0
        for pid in procfs.pids_of_uid(self._uid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        return killed

    def status(self) -> dict[str, object]:
        proc = self._proc
        return {"pid": proc.pid if proc else 0, "exited": self._done.is_set(), "code": self._code}

    # ---- inside the actor --------------------------------------------------------------

    def _fenced(self, later: int) -> None:
        """A later attempt of the job has started: this rank must not go on."""
        if self.signal(signal.SIGKILL):
            note = f"[trainyard] attempt {later} of this job started: this rank was killed\n"
            self._append(note.encode())

    def _run(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: str | None,
        user: tuple[int, int] | None,
        watch: tuple[str, int] | None,
    ) -> None:
        uid, gid = user if user is not None else (None, None)
        self._uid = uid
        try:
            if user is not None and os.geteuid() != 0:
                raise PermissionError(
                    f"the Ray worker on {socket.gethostname()} is not root, so it cannot run "
                    f"the job as uid {user[0]} (--job-user dynamic needs root Ray workers)"
                )
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
                start_new_session=True,
                preexec_fn=_die_with_parent,  # runs after the uid change, so it holds
                user=uid,
                group=gid,
                extra_groups=[] if user is not None else None,
                umask=0o077 if user is not None else -1,
            )
        except OSError as error:
            self._error = f"cannot start {argv[:1]}: {error}"
            self._append(f"[trainyard] {self._error}\n".encode())
            self._code = 127
            self._exited_at = time.time()
            self._started.set()
            self._done.set()
            return
        self._started.set()
        if watch is not None:  # the fence (fence.py): killed once a later attempt is named
            args = (*watch, self._done.wait, self._fenced)
            threading.Thread(target=fence.watch, args=args, name="fence", daemon=True).start()
        proc = self._proc
        assert proc.stdout is not None
        while chunk := os.read(proc.stdout.fileno(), 65536):
            self._append(chunk)
        proc.stdout.close()
        self._code = proc.wait()
        self._exited_at = time.time()
        self._done.set()

    def _append(self, data: bytes) -> None:
        with self._lock:
            self._buffer += data
            over = len(self._buffer) - BUFFER_CAP
            if over > 0:
                del self._buffer[:over]
                self._base += over
                self._dropped += over


def _address() -> str:
    """This node's address as Ray knows it (the raylet's), else the host's."""
    with contextlib.suppress(Exception):
        import ray

        return str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]
    return socket.gethostbyname(socket.gethostname())
