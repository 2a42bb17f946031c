"""`trainyard submit` when the answer is lost (issue 14): the CLI sends an `Idempotency-Key`
and, when the connection drops after the server stored the job, retries with the same key:
one job is stored, and the CLI prints its id. A proxy between the CLI and a real API server
(SQLite and PostgreSQL) forwards each request and drops the first answer."""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cli_servers import ApiServer, Cli

from trainyard.exec.procfs import free_port


class DropFirstAnswer:
    """A TCP proxy to `target` that closes the client's connection instead of relaying the
    first answer (after the server has answered it), and relays the rest."""

    def __init__(self, target: str) -> None:
        host, port = target.removeprefix("http://").split(":")
        self.target = (host, int(port))
        self.port = free_port()
        self.dropped = 0
        self.seen = 0
        self._sock = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(conn,), daemon=True).start()

    def _relay(self, conn: socket.socket) -> None:
        with conn, socket.create_connection(self.target, timeout=30) as up:
            request = _read_message(conn)
            if not request:
                return
            self.seen += 1
            up.sendall(request)
            answer = _read_message(up)
            if self.dropped == 0:
                self.dropped += 1
                return  # the server stored the job; its answer never reaches the client
            conn.sendall(answer)

    def close(self) -> None:
        self._sock.close()


def _read_message(sock: socket.socket) -> bytes:
    """One HTTP/1.1 message with a Content-Length body (what the CLI and uvicorn send)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


@pytest.fixture
def proxy(api_server: ApiServer) -> Iterator[DropFirstAnswer]:
    relay = DropFirstAnswer(api_server.url)
    try:
        yield relay
    finally:
        relay.close()


def test_a_lost_answer_is_retried_with_the_same_key_and_stores_one_job(
    api_server: ApiServer, proxy: DropFirstAnswer, cli: Cli, tmp_path: Path
) -> None:
    spec = tmp_path / "job.json"
    spec.write_text(json.dumps({"name": "once", "queue": "research",
                                "command": [sys.executable, "-c", "pass"]}))  # fmt: skip
    cli.url = proxy.url
    result = cli("submit", str(spec), "--json", token=api_server.tokens["ada"])
    assert result.exit_code == 0, result.output
    assert proxy.dropped == 1 and proxy.seen == 2
    job_id = json.loads(result.stdout)["id"]
    listed = httpx.get(
        f"{api_server.url}/v1/jobs",
        headers={"Authorization": f"Bearer {api_server.tokens['ada']}"},
    ).json()["jobs"]
    assert [j["id"] for j in listed if j["name"] == "once"] == [job_id]
