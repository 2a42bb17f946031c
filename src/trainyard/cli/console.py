"""`trainyard console`: print a link that logs a browser in to the web console.

On the server's machine (like `trainyard admin`: `--home`, `--db`), a new one-time login code
(`services/logins.py`, valid 15 minutes) for `--user` (default: the user of the home's
`admin-token`, else `admin`), in a link to the running server (`<home>/server.json`, or
`--url`). `trainyard up` prints one at start; this prints another whenever one is needed.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer

from trainyard.cli import admin as admin_cli


def register(app: typer.Typer) -> None:
    """Add the `console` command to `app`."""
    app.command("console")(console_command)


def console_command(
    user: Annotated[
        str | None,
        typer.Option("--user", help="who the link logs in [the admin token's user, or admin]"),
    ] = None,
    url: Annotated[
        str | None, typer.Option("--url", help="the server's address [from HOME/server.json]")
    ] = None,
    home: admin_cli.Home = None,
    db: admin_cli.Db = None,
) -> None:
    """Print a one-time link that logs a browser in to the web console."""
    from trainyard.server.api.errors import ApiError
    from trainyard.server.config import ServerConfig
    from trainyard.server.services import logins

    config = ServerConfig(home=admin_cli._home(home))
    base = url or _running_url(config.state_file)
    if base is None:
        admin_cli._fail(
            "--url", f"no server is running on {config.home} (no {config.state_file}); start "
            "`trainyard up`, or give the server's address with --url",
        )  # fmt: skip
    with admin_cli._database(home, db) as session:
        now = time.time()
        name = user or logins.link_user(session, _read(config.admin_token_file), now=now)
        try:
            code = logins.issue_code(session, name, now=now)
        except ApiError as error:
            admin_cli._fail("--user", error.message)
    minutes = logins.CODE_TTL_S / 60
    typer.echo(f"{base.rstrip('/')}/?token={code}")
    typer.echo(f"(logs a browser in as {name} once, within {minutes:.0f} minutes)", err=True)


def _running_url(state_file: Path) -> str | None:
    try:
        data = json.loads(state_file.read_text())
    except (OSError, ValueError):
        return None
    found = data.get("url") if isinstance(data, dict) else None
    return str(found) if found else None


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""
