"""`trainyard login`, `logout`, `whoami` and `token create|list|revoke`: who the CLI is.

`login URL --token T` checks the token against the server (`GET /v1/whoami`) before storing
it (`trainyard.client.credentials`); `--token -` reads it from stdin. API tokens look like
`ty_<token id>_<secret>`: the server keeps only their hash, so a new token is shown once.
"""

from __future__ import annotations

import os
import re
import sys
import time
from typing import Annotated, Any
from urllib.parse import quote

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from trainyard.cli.remote import (
    JsonOption,
    TokenOption,
    UrlOption,
    clock,
    connect,
    console,
    fail,
    print_json,
    relative,
)
from trainyard.client import credentials
from trainyard.client.http import ApiClient, ClientError, normalize_url
from trainyard.fields import MAX_DURATION_S

token_app = typer.Typer(
    name="token",
    help="Create, list and revoke your API tokens.",
    no_args_is_help=True,
)

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw]?)")


def register(app: typer.Typer) -> None:
    """Add `login`, `logout`, `whoami` and the `token` group to `app`."""
    app.command("login")(login_command)
    app.command("logout")(logout_command)
    app.command("whoami")(whoami_command)
    app.add_typer(token_app)


def parse_duration(text: str) -> float:
    """`30d`, `12h`, `90m`, `45s`, `2w` or plain seconds, in seconds."""
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None or float(match.group(1)) <= 0:
        raise ValueError(
            f"--expires-in: {text!r} is not a duration; write e.g. 30d, 12h, 90m or 3600"
        )
    seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if seconds > MAX_DURATION_S:
        raise ValueError(f"--expires-in: {text!r} is longer than ten years, the longest lifetime")
    return seconds


def _read_token(token: str | None) -> str:
    if token == "-":
        token = sys.stdin.readline()
    elif token is None:
        token = os.environ.get("TRAINYARD_TOKEN")
        if token is None and sys.stdin.isatty():
            token = typer.prompt("API token", hide_input=True)
    if token is None:
        fail("login needs --token TOKEN (or --token - to read it from stdin)")
    token = token.strip()
    if not token:
        fail("--token: the token is empty")
    return token


def login_command(
    url: Annotated[str, typer.Argument(metavar="URL", help="The server, e.g. http://host:8765.")],
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            metavar="TOKEN",
            help="The API token ('-': read it from stdin) [$TRAINYARD_TOKEN].",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Log in to a server: check the token, then store URL and token for later commands."""
    secret = _read_token(token)
    try:
        base = normalize_url(url, what="URL")
        with ApiClient(base, secret) as client:
            who = client.get("/v1/whoami")
    except ClientError as error:
        fail(error.message)
    path = credentials.save(base, secret)
    typer.echo(
        f"logged in to {base} as {who['user']} (role {who['role']}, tenant {who['tenant']}); "
        f"credentials stored in {path}"
    )


def logout_command(
    revoke: Annotated[
        bool, typer.Option("--revoke", help="Also revoke the stored token on the server.")
    ] = False,
) -> None:
    """Forget the stored login (`--revoke`: revoke its token on the server first)."""
    path = credentials.credentials_path()
    stored = credentials.load(path)
    if revoke and stored is not None:
        token_id = _token_id(stored.token)
        if token_id is None:
            fail("--revoke: the stored token is not a trainyard token (ty_<id>_<secret>)")
        try:
            with ApiClient(stored.url, stored.token) as client:
                client.delete(f"/v1/tokens/{quote(token_id, safe='')}")
        except ClientError as error:
            fail(f"--revoke: {error.message} (the login is kept)")
        typer.echo(f"revoked token {token_id} on {stored.url}")
    if credentials.clear(path):
        typer.echo(f"logged out (removed {path})")
    else:
        typer.echo(f"not logged in (no {path})")


def _token_id(token: str) -> str | None:
    parts = token.split("_")
    return parts[1] if len(parts) >= 3 and parts[0] == "ty" and parts[1] else None


def whoami_command(
    as_json: JsonOption = False, url: UrlOption = None, token: TokenOption = None
) -> None:
    """Show the user, tenant and role of the token in use, and the server."""
    with connect(url, token) as client:
        who = client.get("/v1/whoami")
        server = client.url
    if as_json:
        print_json({**who, "url": server})
        return
    typer.echo(f"{who['user']} (role {who['role']}, tenant {who['tenant']}) at {server}")


@token_app.command("create")
def create_command(
    name: Annotated[str, typer.Option("--name", help="A label, e.g. laptop or ci.")] = "",
    expires_in: Annotated[
        str | None,
        typer.Option("--expires-in", metavar="DURATION", help="Lifetime: 30d, 12h, 90m, ..."),
    ] = None,
    as_json: JsonOption = False,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Create an API token for yourself; it is printed once (only its hash is kept)."""
    body: dict[str, Any] = {"name": name}
    if expires_in is not None:
        try:
            body["expires_in_s"] = parse_duration(expires_in)
        except ValueError as error:
            fail(str(error))
    with connect(url, token) as client:
        out = client.post("/v1/tokens", body)
    if as_json:
        print_json(out)
        return
    typer.echo(out["token"])
    expires = relative(out["expires_at"]) if out.get("expires_at") else "never"
    typer.echo(
        f"token {out['token_id']}{f' ({name})' if name else ''} for {out['user']}, expires "
        f"{expires}; it is shown only now, store it safely",
        err=True,
    )


def _status(t: dict[str, Any], now: float) -> str:
    if t.get("revoked_at") is not None:
        return "revoked"
    if t.get("expires_at") is not None and t["expires_at"] <= now:
        return "expired"
    return "active"


@token_app.command("list")
def list_command(
    as_json: JsonOption = False, url: UrlOption = None, token: TokenOption = None
) -> None:
    """List your API tokens (an admin: every user's of the tenant), never their secrets."""
    with connect(url, token) as client:
        out = client.get("/v1/tokens")
        current = client.token or ""
    if as_json:
        print_json(out)
        return
    tokens: list[dict[str, Any]] = out["tokens"]
    if not tokens:
        typer.echo("no tokens")
        return
    now = time.time()
    mine = _token_id(current)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("ID", "NAME", "USER", "STATUS", "CREATED", "EXPIRES", "LAST USED"):
        table.add_column(column, no_wrap=column in ("ID", "STATUS"))
    for t in tokens:
        table.add_row(
            escape(t["token_id"]) + (" *" if t["token_id"] == mine else ""),
            escape(t["name"] or "-"),
            escape(t["user"]),
            _status(t, now),
            clock(t["created_at"]),
            clock(t["expires_at"]) if t.get("expires_at") else "never",
            clock(t["last_used_at"]),
        )
    console().print(table)
    if mine in {t["token_id"] for t in tokens}:
        typer.echo("* the token this command used")


@token_app.command("revoke")
def revoke_command(
    token_id: Annotated[str, typer.Argument(metavar="TOKEN_ID", help="As `token list` shows.")],
    as_json: JsonOption = False,
    url: UrlOption = None,
    token: TokenOption = None,
) -> None:
    """Revoke an API token from now on."""
    with connect(url, token) as client:
        listed = client.get("/v1/tokens")["tokens"]
        before = next((t for t in listed if t["token_id"] == token_id), None)
        out = client.delete(f"/v1/tokens/{quote(token_id, safe='')}")
    if as_json:
        print_json(out)
        return
    who = f"{out['token_id']} ({out['name'] or 'no name'}) of {out['user']}"
    if before is not None and before.get("revoked_at") is not None:  # nothing changed now
        typer.echo(f"token {who} was already revoked at {clock(before['revoked_at'])}")
        return
    typer.echo(f"revoked token {who}")
