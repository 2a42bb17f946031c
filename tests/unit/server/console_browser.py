"""A real browser for the console's tests: Debian's chromium, driven by Playwright.

Launched with `executable_path` (never `playwright install`, which downloads a browser of
its own) and the flags ../shared/design/ENVIRONMENT-NOTES.md gives for this machine. Without
Playwright or chromium the browser tests skip, unless TRAINYARD_REQUIRE contains `browser`
or CI=true: then they fail, saying how to install them (as `ray_cluster.py` does for Ray).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

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
