"""A real browser for the console's tests: Debian's chromium, driven by Playwright; and the
helpers those tests share (`other_site`: a page of another origin; `follow_stream`: a live
stream read as a browser's EventSource would).

Launched with `executable_path` (never `playwright install`, which downloads a browser of
its own) and the flags ../shared/design/ENVIRONMENT-NOTES.md gives for this machine. Without
Playwright or chromium the browser tests skip, unless TRAINYARD_REQUIRE contains `browser`
or CI=true: then they fail, saying how to install them (as `ray_cluster.py` does for Ray).
"""

from __future__ import annotations

import contextlib
import http.server
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from trainyard.exec.procfs import free_port

CHROMIUM = Path(os.environ.get("TRAINYARD_CHROMIUM", "/usr/bin/chromium"))
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
HINT = (
    "apt-get install -y chromium (Debian's browser) and pip install playwright (the dev "
    "extra; never `playwright install`)"
)


def required() -> bool:
    wanted = {p.strip().lower() for p in os.environ.get("TRAINYARD_REQUIRE", "").split(",")}
    return "browser" in wanted or os.environ.get("CI", "").strip().lower() == "true"


def _unavailable(why: str) -> None:
    if required():
        pytest.fail(f"a browser is required (TRAINYARD_REQUIRE/CI) but {why}: {HINT}", False)
    pytest.skip(f"{why} ({HINT})")


def executable() -> Path:
    found = CHROMIUM if CHROMIUM.is_file() else None
    if found is None and shutil.which("chromium"):
        found = Path(str(shutil.which("chromium")))
    if found is None:
        _unavailable(f"no chromium at {CHROMIUM}")
        raise AssertionError("unreachable")
    return found


def launch() -> tuple[Any, Any]:
    """(playwright, browser): headless chromium; stop both with `close`."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed")
        raise
    path = executable()
    playwright = sync_playwright().start()
    try:
        browser = playwright.chromium.launch(executable_path=str(path), headless=True, args=FLAGS)
    except Exception as error:
        playwright.stop()
        _unavailable(f"chromium did not start ({error})")
        raise
    return playwright, browser


def close(playwright: Any, browser: Any) -> None:
    try:
        browser.close()
    finally:
        playwright.stop()


def follow_stream(url: str, cookie: str, seen: list[str], started: threading.Event) -> None:
    """Read a live stream with `cookie` until it ends (the server closes it) or a `gone`."""
    headers = {"Accept": "text/event-stream", "Cookie": f"trainyard_session={cookie}"}
    with httpx.stream("GET", url, headers=headers, timeout=httpx.Timeout(60, read=60)) as r:
        for line in r.iter_lines():
            seen.append(line)
            if line.startswith(("event: update", "event: lines")):
                started.set()
            if line.startswith("data:") and "event: gone" in seen:
                return  # the gone event's data read


@contextlib.contextmanager
def other_site(html: str) -> Iterator[str]:
    """A page served from another origin (another port of this machine)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = html.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
