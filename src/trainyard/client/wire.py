"""HTTP/1.1 on a socket, as much as the CLI needs of it: one kept-alive connection, request
out, status and headers in, the body whole or as it arrives (Content-Length, chunked, or
until the server closes).

Why not `http.client`: importing it (and the `email` package it parses headers with) costs
~20 ms, a sixth of a client command's whole run (issue 19: `trainyard jobs` should answer in
about the time `squeue` does). `ssl` is imported only for an `https://` server.

Errors are `OSError`s: a refused or unreachable server raises what `socket` raises, a
timeout `TimeoutError`, and a connection that ends before a complete answer `Lost` (a
`ConnectionError`); an answer that is not HTTP raises `ProtocolError`.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator, Mapping
from io import BufferedReader

__all__ = ["Connection", "Lost", "ProtocolError", "Response"]

MAX_LINE = 65_536  # bytes of a status or header line
MAX_HEADERS = 200
READ = 65_536  # bytes read at a time from a body of known length


class Lost(ConnectionError):
    """The connection ended before the answer was complete (it may have been sent)."""


class ProtocolError(OSError):
    """The answer is not HTTP/1.x."""


class Response:
    """An answer's status line and headers (names in lower case); its body from `read` or
    `chunks`, once."""

    def __init__(self, conn: Connection, status: int, reason: str, headers: dict[str, str]):
        self.status = status
        self.reason = reason
        self.headers = headers
        self._conn = conn
        self.will_close = headers.get("connection", "").lower() == "close"

    def chunks(self) -> Iterator[bytes]:
        """The body as it arrives."""
        reader = self._conn.reader
        coding = self.headers.get("transfer-encoding", "").lower()
        if "chunked" in coding:
            yield from _chunked(reader)
            return
        length = self.headers.get("content-length")
        if length is not None:
            try:
                left = int(length)
            except ValueError:
                raise ProtocolError(f"bad Content-Length {length!r}") from None
            while left > 0:
                data = reader.read(min(left, READ))
                if not data:
                    raise Lost(f"the answer ended {left} bytes early")
                left -= len(data)
                yield data
            return
        self.will_close = True  # the body ends when the server closes
        while data := reader.read1(READ):
            yield data

    def read(self) -> bytes:
        return b"".join(self.chunks())


def _chunked(reader: BufferedReader) -> Iterator[bytes]:
    while True:
        line = reader.readline(MAX_LINE)
        if not line.endswith(b"\n"):
            raise Lost("the answer ended inside a chunk header")
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise ProtocolError(f"bad chunk size {line[:40]!r}") from None
        if size == 0:
            while reader.readline(MAX_LINE) not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return
        data = reader.read(size)
        if len(data) < size:
            raise Lost("the answer ended inside a chunk")
        reader.readline(MAX_LINE)  # the chunk's CRLF
        yield data


class Connection:
    """One connection to `host:port` (opened on first use, again after it closed)."""

    def __init__(self, host: str, port: int | None, *, https: bool, timeout: float | None):
        self.host = host
        self.https = https
        self.port = port or (443 if https else 80)
        self.timeout = timeout
        self.sock: socket.socket | None = None
        self.reader: BufferedReader = None  # type: ignore[assignment]  # set by `open`

    def open(self) -> None:
        sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        if self.https:
            import ssl  # only for https: its import costs ~20 ms

            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=self.host)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        self.reader = sock.makefile("rb")

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.reader.close()
                self.sock.close()
            finally:
                self.sock = None

    def request(
        self, method: str, target: str, headers: Mapping[str, str], body: bytes | None
    ) -> None:
        """Send one request (the connection must be open)."""
        assert self.sock is not None
        host = self.host if ":" not in self.host else f"[{self.host}]"
        default = self.port == (443 if self.https else 80)
        authority = host if default else f"{host}:{self.port}"
        lines = [f"{method} {target} HTTP/1.1", f"Host: {authority}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body or b'')}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        self.sock.sendall(head + (body or b""))

    def response(self) -> Response:
        """Read the status line and headers of the answer."""
        line = self.reader.readline(MAX_LINE)
        if not line:
            raise Lost("the server closed the connection without answering")
        parts = line.decode("latin-1").rstrip("\r\n").split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise ProtocolError(f"not an HTTP answer: {line[:60]!r}")
        headers: dict[str, str] = {}
        for _ in range(MAX_HEADERS):
            raw = self.reader.readline(MAX_LINE)
            if raw in (b"\r\n", b"\n"):
                break
            if not raw:
                raise Lost("the answer ended inside its headers")
            name, sep, value = raw.decode("latin-1").partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        else:
            raise ProtocolError("too many header lines")
        response = Response(self, int(parts[1]), parts[2] if len(parts) > 2 else "", headers)
        if parts[0] == "HTTP/1.0" and headers.get("connection", "").lower() != "keep-alive":
            response.will_close = True
        return response
