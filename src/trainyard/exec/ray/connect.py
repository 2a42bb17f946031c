"""Connecting the Ray executor to its cluster, with errors that say what to do.

`ray.init` against an address where nothing listens retries for ever: Ray 2.60 prints its
own warnings and never returns (outside review 6: `trainyard up --ray-address 127.0.0.1:1`
still hung after 10 minutes). So the address is read and its port tried over TCP first
(`check_address`), with errors naming `--ray-address` and the fix; a port that listens must
then answer as a gRPC server does (an HTTP/2 SETTINGS frame), since Ray retries for ever a
port that is some other service's too (outside review 10: a database's port). `ray://` (Ray Client)
is refused: it needs `ray[client]`, which the `ray` extra does not install, and the
executor drives the cluster as one of its drivers (detached actors, node ids), which is
what a server on a machine of the cluster does.

`quiet_driver_errors`: Ray's driver prints every error the cluster publishes on the server's
output (a dead raylet's last 20 log lines, with colour codes: outside review 6, L2); the
server logs the first line of each instead.

`refusal`: what `ray.init`'s failure means, in words; a cluster that runs Ray's token
authentication and a server without its token is named as such (Ray's own error says only
that it failed to connect).

`run_notes`: what the executor says of itself in every run's notes (`trainyard describe`)
and in the server's banner, the warning that Ray does not isolate jobs included.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any, Final

__all__ = [
    "PROBE_TIMEOUT_S",
    "RayMissing",
    "check_address",
    "check_grpc",
    "quiet_driver_errors",
    "refusal",
    "run_notes",
]

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S: Final = 10.0


class RayMissing(RuntimeError):
    """Ray is not installed, or the cluster cannot be reached (the message says which)."""


def check_address(address: str | None) -> None:
    """Refuse an address that names no reachable Ray head (None and `auto`: Ray's own
    search, left to `ray.init`)."""
    if address is None:
        return
    text = address.strip()
    if not text:
        raise RayMissing(
            "--ray-address is empty: give the head's host:port (`ray start --head` prints it)"
        )
    if text.startswith("ray://"):
        raise RayMissing(
            f"--ray-address {text}: Ray Client (ray://) is not supported; run the server on "
            "a machine of the cluster and give the head's host:port"
        )
    if text == "auto":
        return
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise RayMissing(f"--ray-address {text}: expected the head's host:port, e.g. 10.0.0.5:6379")
    try:
        conn = socket.create_connection((host, int(port)), timeout=PROBE_TIMEOUT_S)
    except ConnectionRefusedError:
        raise RayMissing(
            f"--ray-address {text}: nothing listens there (connection refused); start the "
            f"head there (ray start --head --port {port}) or fix the address"
        ) from None
    except TimeoutError:
        raise RayMissing(
            f"--ray-address {text}: no answer within {PROBE_TIMEOUT_S:g} s; check the host, "
            "the port and the firewall between them"
        ) from None
    except OSError as error:  # unknown host, no route
        why = error.strerror or str(error)
        raise RayMissing(f"--ray-address {text}: cannot reach it ({why})") from None
    with conn:
        if os.environ.get("RAY_USE_TLS", "0") not in ("1", "true"):  # TLS: Ray's own check
            check_grpc(conn, text)


# The HTTP/2 client preface and an empty SETTINGS frame (RFC 9113 §3.4, §6.5): a gRPC server,
# as Ray's GCS is, answers with a SETTINGS frame of its own (type 4) first.
_PREFACE: Final = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
_SETTINGS: Final = 4


def check_grpc(conn: socket.socket, text: str) -> None:
    """Refuse a port that listens but is not a gRPC server (a database, a dashboard, a web
    server), read on `conn` within its timeout: `ray.init` would retry it for ever (outside
    review 10: `--ray-address 127.0.0.1:5432` hung, and SIGTERM took 24 s to act)."""
    head = b""
    try:
        conn.sendall(_PREFACE)
        while len(head) < 9:
            got = conn.recv(9 - len(head))
            if not got:
                break
            head += got
    except OSError:  # reset, or silent until the timeout: no gRPC server either
        pass
    if len(head) < 9 or head[3] != _SETTINGS:
        raise RayMissing(
            f"--ray-address {text}: something listens there, but not Ray's GCS (it does not "
            "answer as a gRPC server); give the head's port, the one `ray start --head` "
            "printed (6379 unless --port was given), not the dashboard's or another service's"
        )


def refusal(address: str | None, error: BaseException) -> str:
    """The error `trainyard up` prints when `ray.init(address)` raised `error`."""
    where = f"cannot connect to Ray at {address or 'auto'}"
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:  # Ray chains the real reason
        seen.add(id(cause))
        # Ray 2.60 raises it, or quotes it in a RuntimeError's text (a refused GCS call)
        text = str(cause)
        if type(cause).__name__ == "AuthenticationError" or "InvalidAuthToken" in text:
            return (
                f"{where}: the cluster runs Ray's token authentication and this server has "
                "no valid token; give the server the cluster's token as `ray start` has it "
                "(RAY_AUTH_MODE=token with RAY_AUTH_TOKEN, or RAY_AUTH_TOKEN_PATH naming a file "
                "only root may read; docs/ray.md, Security)"
            )
        cause = cause.__cause__ or cause.__context__
    return f"{where}: {error}"


def run_notes(address: str, own_uids: bool, gpu_checks: bool) -> list[str]:
    """The executor's notes: where it runs jobs and as whom, that Ray does not isolate
    them (docs/ray.md, Security), and whether GPU health is checked."""
    who = "uids of their own" if own_uids else "the Ray workers' user"
    if not own_uids and os.geteuid() == 0:  # the cluster was likely started as root too
        who += (
            " (root if the cluster was started as root, as this server runs: --job-user "
            "dynamic gives each job a uid of its own)"
        )
    return [
        f"Ray executor on {address or 'a local Ray'}: ranks run as {who}, without cgroup "
        "limits of trainyard's (the runs directory must be shared by every node)",
        "WARNING: Ray has no access control between jobs: any job can reach the cluster, "
        "act on other jobs' ranks and run code on every node; give one Ray cluster to "
        "tenants that trust each other (docs/ray.md, Security)",
        "GPU health checks: a probe on each node with real GPUs reads NVML there"
        if gpu_checks
        else "GPU health checks: off (every node's GPUs are virtual)",
    ]


def quiet_driver_errors(ray: Any) -> bool:
    """In a process that owns its Ray driver (the server), log the first line of each error
    the cluster publishes instead of Ray printing all of it. Ray 2.60's error listener
    (`ray._private.worker.listen_error_messages`) prints through the module's
    `print_to_stdstream`, which is replaced here (the driver's own log relay is off:
    `log_to_driver=False`). False where that function is not there (another Ray)."""
    worker = getattr(getattr(ray, "_private", None), "worker", None)
    if worker is None or not callable(getattr(worker, "print_to_stdstream", None)):
        return False

    def first_line(data: dict[str, Any], *_args: Any, **_kwargs: Any) -> None:
        for text in data.get("lines") or ():
            line = str(text).strip().splitlines()[0] if str(text).strip() else ""
            if line:
                log.warning("Ray (%s): %s", data.get("pid", "?"), line[:300])

    worker.print_to_stdstream = first_line
    return True
