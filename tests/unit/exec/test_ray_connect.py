"""`--ray-address` is checked before `ray.init`, which would retry for ever where nothing
listens (outside review 6, M2): each bad address gets an error naming the flag and the fix,
at once; `trainyard up` says so and exits 2."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainyard.exec.ray.connect import RayMissing, check_address


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


def test_a_listening_port_and_rays_own_search_pass() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        check_address(f"127.0.0.1:{s.getsockname()[1]}")
    check_address(None)
    check_address("auto")


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
