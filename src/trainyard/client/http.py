"""A small typed client of the trainyard REST API, and where it finds its server and token.

`resolve` picks the URL and the token: a command's `--url`/`--token`, else the environment
(`TRAINYARD_URL`, `TRAINYARD_TOKEN`; inside a job, the executor's `TRAINYARD_API_URL`),
else the stored login (`credentials`), else the default URL `http://127.0.0.1:8765`. The
stored token is sent only to the server it was stored for, so `--url` pointing elsewhere
never leaks it. `ApiClient` returns decoded JSON, streams text,
and raises `ClientError` for everything that can go wrong (an API error answer, an unreachable
server, a timeout, a broken connection): its message is one line a CLI prints as is.

It speaks HTTP/1.1 itself (`client.wire`: one kept-alive connection per client), not through
httpx or `http.client`: the commands that only speak HTTP start in a fraction of the time
(httpx costs ~100 ms of imports per command, `http.client` ~20; issue 19). `ssl` is
imported only for an `https://` server.
"""

from __future__ import annotations

import codecs
import contextlib
import json as jsonlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any
from urllib.parse import urlencode, urlsplit

from trainyard.client import credentials
from trainyard.client.wire import Connection, Lost, ProtocolError, Response

__all__ = ["DEFAULT_URL", "ApiClient", "ClientError", "Target", "normalize_url", "resolve"]

DEFAULT_URL = "http://127.0.0.1:8765"
LOGIN_HINT = "run `trainyard login URL --token TOKEN`, or `trainyard up` to start a local server"


class ClientError(Exception):
    """A request that did not succeed; `message` is one line for the user (`field: message`
    for an API error), `status` the HTTP status (None when no answer came)."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        field: str | None = None,
        lost: bool = False,
    ):
        self.message = " ".join(message.split())
        self.status = status
        self.field = field
        self.lost = lost  # the request may have arrived and its answer been lost
        super().__init__(self.message)


@dataclass(frozen=True)
class Target:
    """The server to talk to and the token to send (None: none found)."""

    url: str
    token: str | None


def normalize_url(text: str, *, what: str = "--url") -> str:
    """`text` as a base URL: `http://` added when no scheme is given, no trailing slash."""
    raw = text.strip()
    if not raw:
        raise ClientError(f"{what}: the URL is empty; give e.g. {DEFAULT_URL}")
    if "://" not in raw:
        raw = f"http://{raw}"
    bad = f"{what}: {text!r} is not an http(s) URL with a host, e.g. {DEFAULT_URL}"
    try:
        parts = urlsplit(raw)
        _port = parts.port  # raises ValueError for a port that is not a number in range
    except ValueError as exc:
        raise ClientError(f"{what}: {text!r} is not a valid URL ({exc})") from None
    if (
        parts.scheme.lower() not in ("http", "https")
        or not parts.hostname
        or any(c.isspace() or ord(c) < 32 for c in raw)
        or parts.query
        or parts.fragment
    ):
        raise ClientError(bad)
    return raw.rstrip("/")


def resolve(url: str | None = None, token: str | None = None) -> Target:
    """The server and token: options > TRAINYARD_URL/TRAINYARD_TOKEN > stored login > default
    URL. The stored token is used only for the URL it was stored with."""
    stored = credentials.load()
    env_name = next((n for n in ("TRAINYARD_URL", "TRAINYARD_API_URL") if os.environ.get(n)), "")
    chosen_url = url or (os.environ[env_name] if env_name else None)
    what = "--url" if url else env_name
    if chosen_url is None:
        chosen_url, what = (stored.url, "the stored login") if stored else (DEFAULT_URL, "url")
    base = normalize_url(chosen_url, what=what)
    chosen_token = token or os.environ.get("TRAINYARD_TOKEN") or None
    if chosen_token is None and stored is not None and _same(stored.url, base):
        chosen_token = stored.token
    return Target(url=base, token=chosen_token.strip() if chosen_token else None)


def _same(a: str, b: str) -> bool:
    with contextlib.suppress(ClientError):
        return normalize_url(a) == normalize_url(b)
    return False


def missing_token_message(url: str) -> str:
    """Why no token was found, and how to get one."""
    path = credentials.credentials_path()
    why = credentials.problem(path)
    stored = credentials.load(path)
    if why is not None:
        found = f"the credentials file {path} {why}; "
    elif stored is not None:
        found = f"the stored login ({path}) is for {stored.url}, not {url}; "
    else:
        found = ""
    return f"no API token for {url}: {found}pass --token or set TRAINYARD_TOKEN, or {LOGIN_HINT}"


@dataclass(frozen=True)
class Answer:
    """An answer read whole: status, reason phrase and body."""

    status: int
    reason: str
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return jsonlib.loads(self.body)


def api_error(answer: Answer, url: str) -> ClientError:
    """The `ClientError` of an error answer (`{"error": {"field", "message"}}` when the API
    sent one; else the status and the start of the body)."""
    status = answer.status
    try:
        body: Any = answer.json()
    except ValueError:
        body = None
    detail = body.get("error") if isinstance(body, dict) else None
    if isinstance(detail, dict) and isinstance(detail.get("message"), str):
        field = detail.get("field")
        field = field if isinstance(field, str) and field else None
        text = f"{field}: {detail['message']}" if field else str(detail["message"])
        if status == 401:
            text += f" (at {url}; {LOGIN_HINT})"
        return ClientError(text, status=status, field=field)
    snippet = " ".join(answer.text.split())[:200] or answer.reason
    return ClientError(f"HTTP {status} from {url}: {snippet}", status=status)


def transport_error(exc: BaseException, url: str, *, sent: bool) -> ClientError:
    """The `ClientError` of a request that got no (complete) answer; `sent`: the request
    may have reached the server."""
    why = str(exc) or type(exc).__name__
    if not sent and isinstance(exc, OSError) and not isinstance(exc, TimeoutError):
        return ClientError(f"cannot reach trainyard at {url}: {why}; is `trainyard up` running?")
    if isinstance(exc, TimeoutError):
        if not sent:
            return ClientError(f"cannot reach trainyard at {url}: timed out connecting")
        return ClientError(f"trainyard at {url} did not answer in time ({why})", lost=True)
    if isinstance(exc, Lost | ConnectionError | ProtocolError | OSError):
        return ClientError(f"the connection to trainyard at {url} was lost ({why})", lost=True)
    return ClientError(f"request to trainyard at {url} failed: {why}", lost=sent)


class ApiClient:
    """One server, one token; use as a context manager (or call `close`)."""

    def __init__(self, url: str, token: str | None, *, timeout_s: float = 30.0) -> None:
        self.url = normalize_url(url)
        self.token = token
        self.timeout_s = timeout_s
        parts = urlsplit(self.url)
        self._https = parts.scheme.lower() == "https"
        self._host = parts.hostname or ""
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._conn: Connection | None = None

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _connection(self, timeout: float | None) -> Connection:
        return Connection(self._host, self._port, https=self._https, timeout=timeout)

    def _target(self, path: str, params: Mapping[str, Any] | None) -> str:
        query = {k: _param(v) for k, v in (params or {}).items() if v is not None}
        return self._prefix + path + (f"?{urlencode(query, doseq=True)}" if query else "")

    def _send(
        self,
        conn: Connection,
        method: str,
        target: str,
        body: bytes | None,
        headers: Mapping[str, str],
    ) -> Response:
        """Send one request on `conn` and read its status and headers; `ClientError` on
        failure. A kept-alive connection the server closed meanwhile is opened again for a
        GET (which cannot have done anything)."""
        reused = conn.sock is not None
        sent = False
        try:
            if not reused:
                conn.open()
            sent = True
            conn.request(method, target, {**self._headers, **headers}, body)
            return conn.response()
        except OSError as exc:
            conn.close()
            if reused and method == "GET" and isinstance(exc, Lost | ConnectionError):
                return self._send(conn, method, target, body, headers)
            raise transport_error(exc, self.url, sent=sent) from None

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        """Send one request; the decoded JSON answer, or `ClientError`."""
        extra = dict(headers or {})
        body = content
        if json is not None and content is None:
            body = jsonlib.dumps(json).encode()
            extra.setdefault("Content-Type", "application/json")
        if self._conn is None:
            self._conn = self._connection(self.timeout_s)
        response = self._send(self._conn, method, self._target(path, params), body, extra)
        try:
            answer = Answer(response.status, response.reason, response.read())
        except OSError as exc:
            self.close()
            raise transport_error(exc, self.url, sent=True) from None
        if response.will_close:
            self.close()
        if answer.status >= 400:
            raise api_error(answer, self.url)
        try:
            return answer.json()
        except ValueError:
            raise ClientError(
                f"trainyard at {self.url} answered {method} {path} with something other than "
                f"JSON: {' '.join(answer.text.split())[:200]!r}; is it a trainyard server?"
            ) from None

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, json=body)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    @contextlib.contextmanager
    def stream_text(self, path: str, **params: Any) -> Iterator[Iterator[str]]:
        """GET `path` and yield its body as text chunks as they arrive (no read timeout: a
        followed log may stay quiet for long)."""
        conn = self._connection(self.timeout_s)  # its own connection: read without timeout
        try:
            response = self._send(conn, "GET", self._target(path, params), None, {})
            if response.status >= 400:
                try:
                    answer = Answer(response.status, response.reason, response.read())
                except OSError as exc:
                    raise transport_error(exc, self.url, sent=True) from None
                raise api_error(answer, self.url)
            if conn.sock is not None:
                conn.sock.settimeout(None)
            yield self._chunks(response)
        finally:
            conn.close()

    def _chunks(self, response: Response) -> Iterator[str]:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        try:
            for data in response.chunks():
                text = decoder.decode(data)
                if text:
                    yield text
        except OSError as exc:
            raise transport_error(exc, self.url, sent=True) from None
        tail = decoder.decode(b"", final=True)
        if tail:
            yield tail


def _param(value: Any) -> Any:
    """A query parameter as text (booleans as `true`/`false`, as FastAPI reads them)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return [_param(v) for v in value]
    return value
