"""A small typed client of the trainyard REST API, and where it finds its server and token.

`resolve` picks the URL and the token: a command's `--url`/`--token`, else the environment
(`TRAINYARD_URL`, `TRAINYARD_TOKEN`; inside a job, the executor's `TRAINYARD_API_URL`),
else the stored login (`credentials`), else the default URL `http://127.0.0.1:8765`. The
stored token is sent only to the server it was stored for, so `--url` pointing elsewhere
never leaks it. `ApiClient` returns decoded JSON, streams text,
and raises `ClientError` for everything that can go wrong (an API error answer, an unreachable
server, a timeout, a broken connection): its message is one line a CLI prints as is.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import httpx

from trainyard.client import credentials

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
    try:
        url = httpx.URL(raw)
    except (httpx.InvalidURL, ValueError) as exc:
        raise ClientError(f"{what}: {text!r} is not a valid URL ({exc})") from None
    if url.scheme not in ("http", "https") or not url.host or any(c.isspace() for c in raw):
        raise ClientError(f"{what}: {text!r} is not an http(s) URL with a host, e.g. {DEFAULT_URL}")
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


def api_error(response: httpx.Response, url: str) -> ClientError:
    """The `ClientError` of an error answer (`{"error": {"field", "message"}}` when the API
    sent one; else the status and the start of the body)."""
    status = response.status_code
    try:
        body: Any = response.json()
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
    snippet = " ".join(response.text.split())[:200] or response.reason_phrase
    return ClientError(f"HTTP {status} from {url}: {snippet}", status=status)


def transport_error(exc: httpx.HTTPError, url: str) -> ClientError:
    """The `ClientError` of a request that got no (complete) answer."""
    why = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return ClientError(f"cannot reach trainyard at {url}: {why}; is `trainyard up` running?")
    if isinstance(exc, httpx.TimeoutException):
        return ClientError(f"trainyard at {url} did not answer in time ({why})", lost=True)
    if isinstance(exc, httpx.UnsupportedProtocol | httpx.InvalidURL):
        return ClientError(f"--url: {url} cannot be used ({why})")
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError | httpx.WriteError):
        return ClientError(f"the connection to trainyard at {url} was lost ({why})", lost=True)
    return ClientError(f"request to trainyard at {url} failed: {why}")


class ApiClient:
    """One server, one token; use as a context manager (or call `close`)."""

    def __init__(self, url: str, token: str | None, *, timeout_s: float = 30.0) -> None:
        self.url = normalize_url(url)
        self.token = token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s)

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
        self._http.close()

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
        query = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            response = self._http.request(
                method, path, params=query, json=json, content=content, headers=headers
            )
        except httpx.HTTPError as exc:
            raise transport_error(exc, self.url) from None
        if response.status_code >= 400:
            raise api_error(response, self.url)
        try:
            return response.json()
        except ValueError:
            raise ClientError(
                f"trainyard at {self.url} answered {method} {path} with something other than "
                f"JSON: {' '.join(response.text.split())[:200]!r}; is it a trainyard server?"
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
        query = {k: v for k, v in params.items() if v is not None}
        timeout = httpx.Timeout(self._http.timeout.connect, read=None)
        try:
            with self._http.stream("GET", path, params=query, timeout=timeout) as response:
                if response.status_code >= 400:
                    response.read()
                    raise api_error(response, self.url)
                yield self._chunks(response)
        except httpx.HTTPError as exc:
            raise transport_error(exc, self.url) from None

    def _chunks(self, response: httpx.Response) -> Iterator[str]:
        try:
            yield from response.iter_text()
        except httpx.HTTPError as exc:
            raise transport_error(exc, self.url) from None
