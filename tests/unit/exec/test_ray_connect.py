"""`--ray-address` is checked before `ray.init`, which would retry for ever where nothing
listens (outside review 6, M2): each bad address gets an error naming the flag and the fix,
at once; `trainyard up` says so and exits 2. And the errors the cluster publishes reach the
server's log as one line each, not its output as a raylet's log (L2). A cluster that wants
Ray's token, met without one, is named as such."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest

from trainyard.exec.ray.connect import RayMissing, check_address, quiet_driver_errors, refusal


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("address", "says"),
    [
        ("", "--ray-address is empty"),
        ("   ", "--ray-address is empty"),
        ("ray://10.0.0.5:10001", "Ray Client (ray://) is not supported"),
        ("garbage", "expected the head's host:port"),
        ("host:port", "expected the head's host:port"),
        ("10.0.0.5:70000", "expected the head's host:port"),
        (":6379", "expected the head's host:port"),
        ("no-such-host.invalid:6379", "cannot reach it"),
    ],
)
def test_a_malformed_or_unreachable_address_is_refused_naming_the_flag(
    address: str, says: str
) -> None:
    with pytest.raises(RayMissing, match="--ray-address") as error:
        check_address(address)
    assert says in str(error.value)


def test_a_closed_port_is_refused_at_once_with_the_fix() -> None:
    port = _closed_port()
    with pytest.raises(RayMissing) as error:
        check_address(f"127.0.0.1:{port}")
    assert "nothing listens there (connection refused)" in str(error.value)
    assert f"ray start --head --port {port}" in str(error.value)


def _serve_once(reply: bytes | None) -> tuple[socket.socket, threading.Thread]:
    """A listener that answers one connection with `reply` (None: says nothing)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def answer() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(64)
            if reply is not None:
                conn.sendall(reply)
            time.sleep(0.5)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    return server, thread


def test_a_grpc_server_and_rays_own_search_pass() -> None:
    # what a gRPC server (Ray's GCS) sends first: a SETTINGS frame (a real GCS is met by the
    # Ray executor's tests, whose clusters' addresses go through this check)
    server, thread = _serve_once(b"\x00\x00\x06\x04\x00\x00\x00\x00\x00" + b"\x00" * 6)
    with server:
        check_address(f"127.0.0.1:{server.getsockname()[1]}")
    thread.join()
    check_address(None)
    check_address("auto")


@pytest.mark.parametrize(
    "reply",
    [
        b"HTTP/1.1 400 Bad Request\r\n\r\n",  # a dashboard, a web server
        b"E\x00\x00\x00\x10SFATAL\x00",  # a database's error packet
        b"",  # closes at once
    ],
)
def test_a_port_that_listens_but_is_not_rays_gcs_is_refused(reply: bytes) -> None:
    """Ray's `ray.init` retried such a port for ever (outside review 10: 127.0.0.1:5432)."""
    server, thread = _serve_once(reply)
    with server, pytest.raises(RayMissing) as error:
        check_address(f"127.0.0.1:{server.getsockname()[1]}")
    thread.join()
    assert "something listens there, but not Ray's GCS" in str(error.value)
    assert "6379 unless --port was given" in str(error.value)


def test_a_silent_listener_is_refused_after_the_probes_timeout() -> None:
    from trainyard.exec.ray.connect import check_grpc

    server, thread = _serve_once(None)
    address = ("127.0.0.1", server.getsockname()[1])
    with (
        server,
        socket.create_connection(address, timeout=0.3) as conn,
        pytest.raises(RayMissing, match="not Ray's GCS"),
    ):
        check_grpc(conn, "x")
    thread.join()


def test_up_with_a_closed_port_exits_with_the_error_not_a_hang(tmp_path: Path) -> None:
    port = _closed_port()
    began = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "trainyard.cli.main", "up", "--home", str(tmp_path / "home"),
         "--executor", "ray", "--ray-address", f"127.0.0.1:{port}", "--port", "0",
         "--virtual-gpus", "4"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "NO_COLOR": "1"},
    )  # fmt: skip
    assert run.returncode == 2, run.stderr
    assert "--ray-address 127.0.0.1:" in run.stderr and "connection refused" in run.stderr
    assert "Traceback" not in run.stderr
    assert time.monotonic() - began < 120


def test_errors_the_cluster_publishes_are_logged_as_one_line_not_printed(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outside review 6 (L2): one node's death printed 40 lines of a raylet's log, with
    colour codes, on the server's output; the server now logs the first line of it."""
    dead = (
        "Raylet is terminated. Termination is unexpected. Possible reasons include: (1) SIGKILL"
        "\n    [state-dump] NodeManager.CheckForUnexpectedWorkerDisconnects - 1 total\n" * 20
    )
    worker = types.SimpleNamespace(print_to_stdstream=print)
    ray = types.SimpleNamespace(_private=types.SimpleNamespace(worker=worker))
    assert quiet_driver_errors(ray)
    with caplog.at_level(logging.WARNING, logger="trainyard.exec.ray.connect"):
        worker.print_to_stdstream({"lines": [dead], "pid": "raylet", "is_err": False},
                                  ignore_prefix=False)  # fmt: skip
    (record,) = caplog.records
    assert record.getMessage().startswith("Ray (raylet): Raylet is terminated.")
    assert "state-dump" not in record.getMessage()
    assert capsys.readouterr().out == ""
    assert not quiet_driver_errors(types.SimpleNamespace())  # another Ray: left alone


def test_the_pinned_ray_prints_the_clusters_errors_where_they_are_replaced() -> None:
    """What `quiet_driver_errors` relies on in Ray 2.60: its error listener prints through
    the module's `print_to_stdstream` (an upgrade that changes this fails here). Looked at
    in a child process: importing Ray here would fix its cluster settings for this process
    before the Ray tests' fixture sets them (their nodes would bind the host's address)."""
    check = (
        "import inspect, ray._private.worker as w\n"
        "assert callable(w.print_to_stdstream)\n"
        "assert 'print_to_stdstream(' in inspect.getsource(w.listen_error_messages)\n"
    )
    run = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr


class AuthenticationError(Exception):
    """Stands in for ray.exceptions.AuthenticationError (matched by name: Ray not imported)."""


def _chained(inner: BaseException) -> ConnectionError:
    try:
        try:
            raise inner
        except Exception as cause:
            raise ConnectionError("Failed to connect to Ray cluster at 10.0.0.5:6379") from cause
    except ConnectionError as error:
        return error


@pytest.mark.parametrize(
    "inner",
    [
        # what Ray 2.60 raises without RAY_AUTH_MODE (the refused call quoted in the text) ...
        RuntimeError("Failed to connect to GCS ... ray.exceptions.AuthenticationError: RPC "
                     "error: InvalidAuthToken: Authentication token is missing or incorrect."),
        # ... and with RAY_AUTH_MODE=token but no token anywhere
        AuthenticationError("Token authentication is enabled but no token was found"),
    ],
)  # fmt: skip
def test_a_refused_token_is_named_with_the_fix(inner: BaseException) -> None:
    said = refusal("10.0.0.5:6379", _chained(inner))
    assert said.startswith("cannot connect to Ray at 10.0.0.5:6379: the cluster runs Ray's token")
    assert "RAY_AUTH_TOKEN" in said and "docs/ray.md" in said


def test_other_failures_keep_rays_words() -> None:
    said = refusal(None, _chained(RuntimeError("GCS has not started")))
    assert said == "cannot connect to Ray at auto: " + str(_chained(RuntimeError("x")))


def test_the_banner_says_who_ranks_run_as_and_whether_gpus_are_checked() -> None:
    """Outside review 10, F10: ranks ran as root with the banner saying only "the Ray
    workers' user", and an all-virtual cluster was said to have its GPUs probed."""
    from trainyard.exec.ray.connect import run_notes

    own = run_notes("h:6379", own_uids=True, gpu_checks=True)
    assert "ranks run as uids of their own," in own[0] and "reads NVML" in own[2]
    shared = run_notes("h:6379", own_uids=False, gpu_checks=False)
    assert ("root if the cluster was started as root" in shared[0]) == (os.geteuid() == 0)
    assert shared[2] == "GPU health checks: off (every node's GPUs are virtual)"
