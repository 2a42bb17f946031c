"""The CLI's own HTTP/1.1 (`client.wire`) against a raw socket server that answers exactly
what each test scripts: bodies by Content-Length, chunked and close-delimited, a kept-alive
connection reused, and every way an answer can be cut short named as such (`Lost`), never
taken for a complete answer."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from trainyard.client.wire import Connection, Lost, ProtocolError


def _serve(answers: list[bytes]) -> tuple[int, list[bytes]]:
    """A server on a free port that, per connection, reads a request head and sends the
    next scripted answer, then (for `b"KEEP"`-prefixed ones) waits for another request."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    seen: list[bytes] = []

    def run() -> None:
        conn, _ = server.accept()
        with conn:
            for answer in answers:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                seen.append(data)
                conn.sendall(answer)
        server.close()

    threading.Thread(target=run, daemon=True).start()
    return port, seen


@pytest.fixture
def make() -> Iterator[object]:
    opened: list[Connection] = []

    def factory(answers: list[bytes]) -> tuple[Connection, list[bytes]]:
        port, seen = _serve(answers)
        conn = Connection("127.0.0.1", port, https=False, timeout=30)
        conn.open()
        opened.append(conn)
        return conn, seen

    yield factory
    for conn in opened:
        conn.close()


def test_content_length_and_keep_alive(make) -> None:  # type: ignore[no-untyped-def]
    conn, seen = make([
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello",
        b"HTTP/1.1 404 Not Found\r\ncontent-length: 2\r\n\r\nno",
    ])  # fmt: skip
    conn.request("GET", "/a?x=1", {"Authorization": "Bearer t"}, None)
    first = conn.response()
    assert (first.status, first.reason, first.read()) == (200, "OK", b"hello")
    assert first.headers["content-type"] == "text/plain" and not first.will_close
    conn.request("POST", "/b", {}, b'{"k": 1}')
    second = conn.response()
    assert (second.status, second.read()) == (404, b"no")
    assert seen[0].startswith(b"GET /a?x=1 HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"Authorization: Bearer t\r\n" in seen[0]
    assert b"Content-Length: 8\r\n" in seen[1]


def test_chunked_body_arrives_in_its_chunks(make) -> None:  # type: ignore[no-untyped-def]
    body = b"4\r\nrank\r\n6;ext=1\r\n 0 one\r\n0\r\nTrailer: x\r\n\r\n"
    conn, _ = make([b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body])
    conn.request("GET", "/logs", {}, None)
    assert list(conn.response().chunks()) == [b"rank", b" 0 one"]


def test_close_delimited_body(make) -> None:  # type: ignore[no-untyped-def]
    conn, _ = make([b"HTTP/1.0 200 OK\r\n\r\nall of it"])
    conn.request("GET", "/", {}, None)
    response = conn.response()
    assert response.will_close
    assert response.read() == b"all of it"


@pytest.mark.parametrize(
    "answer",
    [
        b"",  # closed without answering
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",  # body cut short
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",  # inside a chunk
        b"HTTP/1.1 200 OK\r\nX: y\r\n",  # inside the headers
    ],
)
def test_an_answer_cut_short_is_lost(make, answer: bytes) -> None:  # type: ignore[no-untyped-def]
    conn, _ = make([answer])
    conn.request("GET", "/", {}, None)
    with pytest.raises(Lost):
        conn.response().read()


def test_not_http_is_a_protocol_error(make) -> None:  # type: ignore[no-untyped-def]
    conn, _ = make([b"SSH-2.0-OpenSSH_9.2\r\n"])
    conn.request("GET", "/", {}, None)
    with pytest.raises(ProtocolError):
        conn.response()
