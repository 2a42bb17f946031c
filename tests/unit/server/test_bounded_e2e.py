"""Bounded inputs and outputs (issue 14, acceptance 3), against a real `trainyard up` process.

- Three concurrent 64 MB request bodies without a token: each is refused (413) after at most
  the body bound is read, and the server's peak RSS (`VmHWM`) grows by less than 32 MB.
- A job writes a 200 MB log holding one 100 MB line: the API serves all of it (the long line
  in pieces of at most `exec.logs.MAX_LINE` bytes), and the server's peak RSS grows by less
  than 32 MB.
- A job writing past the log cap (`--log-cap-mb`) has its log rotated: the newest output is
  kept, at most the cap in `rank-0.log` and `rank-0.log.1` together, and served in order.
"""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from live_server import Cluster, LiveServer, wait_until

from trainyard.exec.logs import MAX_LINE

pytestmark = pytest.mark.slow
MB = 1024 * 1024
BIG_LOG = (
    "import sys\n"
    "out = sys.stdout.buffer\n"
    "out.write(b'first line\\n')\n"
    "block = b'x' * (1024 * 1024)\n"
    "for _ in range(100):\n"  # one 100 MB line
    "    out.write(block)\n"
    "out.write(b'\\n')\n"
    "line = b'y' * 1023 + b'\\n'\n"
    "for _ in range(100 * 1024):\n"  # and 100 MB of short lines
    "    out.write(line)\n"
    "out.write(b'last line\\n')\n"
    "out.flush()\n"
)
CHATTY = (
    "import sys\n"
    "for i in range(40000):\n"
    "    print(f'line {i:06d} ' + 'z' * 90, flush=(i % 1000 == 0))\n"
)


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    live = Cluster(
        tmp_path, f"sqlite:///{tmp_path / 'trainyard.db'}", virtual_gpus=1,
        args=("--log-cap-mb", "1024"),
    )  # fmt: skip
    try:
        yield live
    finally:
        live.close()


def _post_huge(url: str, size: int, answers: list[bytes]) -> None:
    """POST `size` bytes of body to /v1/jobs without a token, written in 1 MB pieces."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        head = (
            f"POST /v1/jobs HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {size}\r\n\r\n"
        )
        sock.sendall(head.encode())
        piece = b" " * MB
        try:
            for _ in range(size // MB):
                sock.sendall(piece)
        except OSError:
            pass  # the server answered and closed: it did not read the rest
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except OSError:
            pass
        answers.append(answer)


def test_huge_bodies_and_a_huge_log_keep_the_server_small(cluster: Cluster) -> None:
    server = cluster.start()
    pid = server.proc.pid
    before = _peak_rss(pid)
    answers: list[bytes] = []
    threads = [
        threading.Thread(target=_post_huge, args=(server.url, 64 * MB, answers)) for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(answers) == 3
    assert all(a.startswith(b"HTTP/1.1 413") for a in answers), answers
    assert b"at most" in answers[0]
    after_bodies = _peak_rss(pid)
    assert after_bodies - before < 32 * MB, (before, after_bodies)

    job = server.submit({"name": "loud", "command": [sys.executable, "-c", BIG_LOG], "gpus": 0})
    _wait_done(server, job, cluster)
    served = 0
    lines = 0
    longest = 0
    first = last = ""
    with server.api().stream("GET", f"/v1/jobs/{job}/logs") as answer:
        assert answer.status_code == 200
        for line in answer.iter_lines():
            lines += 1
            served += len(line) + 1
            longest = max(longest, len(line))
            first = first or line
            last = line
    assert (first, last) == ("first line", "last line")
    assert longest == MAX_LINE  # the 100 MB line, in pieces
    assert served >= 200 * MB
    assert _peak_rss(pid) - after_bodies < 32 * MB, (after_bodies, _peak_rss(pid))


def _wait_done(server: LiveServer, job: str, cluster: Cluster) -> dict[str, object]:
    return wait_until(  # type: ignore[no-any-return]
        f"job {job} to finish",
        lambda: server.job(job) if server.job(job)["state"] in ("SUCCEEDED", "FAILED") else None,
        300,
        cluster.output,
    )


def test_a_log_over_the_cap_is_rotated_keeping_the_newest_output(tmp_path: Path) -> None:
    live = Cluster(
        tmp_path, f"sqlite:///{tmp_path / 'trainyard.db'}", virtual_gpus=1,
        args=("--log-cap-mb", "1"),
    )  # fmt: skip
    try:
        server = live.start()
        job = server.submit({"name": "chatty", "command": [sys.executable, "-c", CHATTY]})
        assert _wait_done(server, job, live)["state"] == "SUCCEEDED"
        logs = live.home / "runs" / "jobs" / job / "logs" / "attempt-0"
        current, older = logs / "rank-0.log", logs / "rank-0.log.1"
        assert older.exists(), sorted(p.name for p in logs.iterdir())
        assert current.stat().st_size + older.stat().st_size <= MB
        text = server.logs(job).splitlines()
        numbers = [int(line.split()[1]) for line in text]
        assert numbers == sorted(numbers)  # the older part first, then the newest
        assert numbers[-1] == 39999  # the newest output is kept
        assert numbers[0] > 0  # the oldest was rotated away
        assert len(text) * 100 >= MB // 3  # at least a third of the cap remains
    finally:
        live.close()
