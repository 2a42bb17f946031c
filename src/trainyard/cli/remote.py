"""What the commands that talk to a server share: the `--url`/`--token` options, opening a
client (`connect`), turning every failure into one `error: ...` line with exit code 2, and
formatting times and ages."""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from trainyard.client.http import ApiClient, ClientError, missing_token_message, resolve

if TYPE_CHECKING:
    from rich.console import Console

UrlOption = Annotated[
    str | None,
    typer.Option(
        "--url",
        metavar="URL",
        help="Server URL [$TRAINYARD_URL, else the stored login, else http://127.0.0.1:8765].",
        show_default=False,
    ),
]
TokenOption = Annotated[
    str | None,
    typer.Option(
        "--token",
        metavar="TOKEN",
        help="API token [$TRAINYARD_TOKEN, else the stored login].",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the API's answer as JSON.")]


def fail(message: str) -> NoReturn:
    """Print `error: message` (one line) on stderr and exit with code 2."""
    typer.echo(f"error: {' '.join(message.split())}", err=True)
    raise typer.Exit(2)


@contextlib.contextmanager
def connect(url: str | None, token: str | None, *, need_token: bool = True) -> Iterator[ApiClient]:
    """A client of the resolved server; any `ClientError` inside ends the command cleanly."""
    try:
        target = resolve(url, token)
        if need_token and not target.token:
            raise ClientError(missing_token_message(target.url))
        with ApiClient(target.url, target.token) as client:
            yield client
    except ClientError as error:
        fail(error.message)


def console() -> Console:
    """A console for tables: the terminal's width, or wide when the output is piped (so rows
    are never folded for a program that reads them). rich is imported here, not at start:
    the client commands print through `cli.plain` and never pay for it."""
    from rich.console import Console

    out = Console(highlight=False)
    if not out.is_terminal and "COLUMNS" not in os.environ:
        out = Console(highlight=False, width=250)
    return out


def print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, sort_keys=False))


def clock(ts: float | None) -> str:
    """A timestamp as local date and time (`-` for none)."""
    if ts is None:
        return "-"
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))
    except (OverflowError, OSError, ValueError):  # beyond the platform's clock (or NaN)
        return "never" if ts > 0 else "-"


def span(seconds: float) -> str:
    """A duration, short: `45s`, `12m`, `3h05m`, `2d04h`."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s" if s < 600 else f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def age(ts: float | None, now: float | None = None) -> str:
    """How long ago `ts` was (`-` for none)."""
    if ts is None:
        return "-"
    return span((now if now is not None else time.time()) - ts)


def relative(ts: float | None, now: float | None = None) -> str:
    """`ts` as a time with `(in 5m)` / `(3m ago)`."""
    if ts is None:
        return "-"
    delta = ts - (now if now is not None else time.time())
    when = f"in {span(delta)}" if delta >= 0 else f"{span(-delta)} ago"
    return f"{clock(ts)} ({when})"


def parse_when(text: str, option: str, now: float) -> float:
    """Epoch seconds of `text`: epoch seconds, a duration ago (`7d`, `12h`, `90m`, `30s`,
    `2w`) or an ISO date/time (UTC when it names no zone); else a clear error naming
    `option`. Every client command's `--since`/`--until` reads times so."""
    value = text.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        if math.isnan(seconds):  # (max(0, nan) is 0: it read as 1970)
            fail(f"{option}: {text!r} is not a time")
        return seconds
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    if value[-1:] in units and value[:-1].replace(".", "", 1).isdigit():
        return now - float(value[:-1]) * units[value[-1]]
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        fail(f"{option}: {text!r} is not a date (2026-12-01, 2026-12-01T08:00), epoch seconds "
             "or a duration ago (7d, 12h)")  # fmt: skip
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()
