"""`trainyard admin`: operator commands straight on the server's database (on its machine).

Thin shell over `trainyard.server.services.admin`: `tenant add|list`, `user add|list|role|disable|
enable`, `token issue|revoke`, `queue add|set|list|rm`. `--home PATH` (default
`$TRAINYARD_HOME` or ~/.trainyard) and `--db URL` (default `$TRAINYARD_DB`, as `trainyard up`
reads it, else the home's SQLite file) go after the command or right after `admin`. A home
whose server runs on another database is refused rather than given a new SQLite file. The
database is migrated to head first and, when empty, bootstrapped as `trainyard up` would
(tenant `default`, user `admin`, shared queue `default`; the admin token goes to
`<home>/admin-token`). Each command is one transaction: input errors print one `error:
FIELD: ...` line on stderr, exit with code 2 and leave the database as it was.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from trainyard.server.config import ServerConfig, default_db, default_home
from trainyard.server.db.session import shown_url
from trainyard.server.services import admin as svc
from trainyard.server.services import audit

T = TypeVar("T")

admin_app = typer.Typer(
    name="admin",
    help="Operator commands on the server's database: tenants, users, tokens, queues.",
    no_args_is_help=True,
)
tenant_app = typer.Typer(help="Tenants: add, list.", no_args_is_help=True)
user_app = typer.Typer(help="Users: add, list, role, disable, enable.", no_args_is_help=True)
token_app = typer.Typer(help="API tokens of users: issue, revoke.", no_args_is_help=True)
queue_app = typer.Typer(help="Queues: add, set, list, rm.", no_args_is_help=True)
admin_app.add_typer(tenant_app, name="tenant")
admin_app.add_typer(user_app, name="user")
admin_app.add_typer(token_app, name="token")
admin_app.add_typer(queue_app, name="queue")

Home = Annotated[
    Path | None,
    typer.Option("--home", help="Server home (default $TRAINYARD_HOME or ~/.trainyard)."),
]
Db = Annotated[
    str | None,
    typer.Option(
        "--db", metavar="URL", help="Database (default $TRAINYARD_DB, else HOME/trainyard.db)."
    ),
]
_GROUP_OPTIONS: dict[str, Any] = {}  # `trainyard admin --home/--db`, for the command that follows
Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


@admin_app.callback()
def admin_options(home: Home = None, db: Db = None) -> None:
    """Operator commands on the server's database: tenants, users, tokens, queues.

    --home and --db go here (for every command) or after a command."""
    _GROUP_OPTIONS.update(home=home, db=db)  # runs before every admin command


def register(app: typer.Typer) -> None:
    """Add the `admin` command group to `app`."""
    app.add_typer(admin_app, name="admin")


def _fail(field: str, message: str) -> NoReturn:
    typer.echo(f"error: {field}: {' '.join(message.split())}", err=True)
    raise typer.Exit(2)


def _home(home: Path | None) -> Path:
    return Path(home or _GROUP_OPTIONS.get("home") or default_home()).expanduser()


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


@contextmanager
def _private_files() -> Iterator[None]:
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


@contextmanager
def _database(home: Path | None, db: str | None) -> Iterator[Session]:
    """One transaction on the migrated (and bootstrapped) database; AdminError -> exit 2."""
    from trainyard.server.bootstrap import bootstrap, write_secret
    from trainyard.server.db import init_db, make_session_factory

    url = db or _GROUP_OPTIONS.get("db") or default_db()  # as `trainyard up` reads it
    config = ServerConfig(home=_home(home), db_url=url)
    if url is None and config.state_file.exists() and not Path(config.database).exists():
        # a server runs on this home, but not on its SQLite file: not a database to create
        _fail("--db", f"the server of {config.home} does not use {config.database}; give its "
              "database with --db URL or $TRAINYARD_DB, as `trainyard up` got it")  # fmt: skip
    try:
        with _private_files():  # a SQLite file made here is the server's: 0600
            engine = init_db(config.database)
    except Exception as error:  # a bad URL, an unreachable server, a newer schema
        _fail("--db", f"cannot open database {shown_url(config.database)}: {_first_line(error)}")
    try:
        sessions = make_session_factory(engine)
        boot = bootstrap(sessions, now=time.time())
        if boot.admin_token is not None:
            try:
                write_secret(config.admin_token_file, boot.admin_token)
            except OSError as error:
                _fail("--home", f"cannot write the admin token ({_first_line(error)}); "
                      "issue another later: trainyard admin token issue admin")  # fmt: skip
            typer.echo(
                f"note: empty database bootstrapped (tenant default, user admin, queue default); "
                f"admin token written to {config.admin_token_file}",
                err=True,
            )
        try:
            with svc.transaction(sessions) as session:
                yield session
        except svc.AdminError as error:
            _fail(error.field, error.message)
    except SQLAlchemyError as error:  # the database went away or is locked: not a bug here
        _fail("--db", f"database error, nothing changed: {_first_line(error)}")
    finally:
        engine.dispose()


def _run(
    home: Path | None,
    db: str | None,
    work: Callable[[Session], T],
    audit_as: tuple[str, str, dict[str, Any]] | None = None,
) -> T:
    """`work` in one transaction; a change is recorded in the audit trail in the same one
    (`audit_as`: action, target, details), by the OS login running the command."""
    with _database(home, db) as session:
        before = _concerns(session, audit_as)  # (a queue deleted by `work` is gone after it)
        out = work(session)
        if audit_as is not None:
            action, target, details = audit_as
            tenant_id = _concerns(session, audit_as) or before
            audit.record(session, actor=audit.operator(), action=action, target=target,
                         details=details, now=time.time(), tenant_id=tenant_id)  # fmt: skip
        return out


def _concerns(session: Session, audit_as: tuple[str, str, Any] | None) -> int | None:
    """The tenant an operator's change concerns (its admins read it in `GET /v1/audit`):
    the tenant named, the user's, the queue's; None for shared queues and nodes."""
    from sqlalchemy import select

    from trainyard.server.db import Queue, Tenant, User

    kind, target = (audit_as[0].split(".")[0], audit_as[1]) if audit_as else ("", "")
    column = {"tenant": Tenant.id, "user": User.tenant_id, "token": User.tenant_id,
              "queue": Queue.tenant_id}.get(kind)  # fmt: skip
    if column is None:
        return None
    table = column.class_
    found: int | None = session.scalar(select(column).where(table.name == target))
    return found


def _when(ts: float | None) -> str:
    if ts is None:
        return "never"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """The rows as a table; the first column (an id or a name to copy into the next
    command) is never cut short, and off a terminal the table is not squeezed into 80
    columns (outside review 11 found `admin job list` cutting ids in a pipe)."""
    table = Table(title=title, box=box.SIMPLE, title_justify="left")
    cells = [["-" if v is None else str(v) for v in row] for row in rows]
    for i, column in enumerate(columns):
        if i == 0:
            widest = max((len(row[0]) for row in cells if row), default=len(column))
            table.add_column(column, no_wrap=True, min_width=max(widest, len(column)))
        else:
            table.add_column(column)
    for row in cells:
        table.add_row(*row)
    Console(highlight=False, width=None if sys.stdout.isatty() else 200).print(table)


def _json(items: Sequence[Any]) -> None:
    typer.echo(json.dumps([dataclasses.asdict(item) for item in items], indent=2))


# ---- tenants -------------------------------------------------------------------------------


@tenant_app.command("add")
def tenant_add(
    name: Annotated[str, typer.Argument(help="Tenant name.")], home: Home = None, db: Db = None
) -> None:
    """Create a tenant."""
    _run(home, db, lambda s: svc.create_tenant(s, name, now=time.time()),
         ("tenant.add", name, {}))  # fmt: skip
    typer.echo(f"tenant {name} created; add users: trainyard admin user add NAME --tenant {name}")


@tenant_app.command("list")
def tenant_list(home: Home = None, db: Db = None, as_json: Json = False) -> None:
    """List tenants."""
    tenants = _run(home, db, svc.list_tenants)
    if as_json:
        _json(tenants)
        return
    rows = [(t.name, t.users, t.queues, _when(t.created_at), _budget(t)) for t in tenants]
    _table("tenants", ("name", "users", "own queues", "created", "budget"), rows)


def _budget(t: svc.TenantInfo) -> str:
    if t.budget_gpu_hours is None:
        return "none"
    seconds = t.budget_period_s or 30 * 86_400.0
    period = f"{seconds / 86_400.0:g} days" if seconds >= 86_400.0 else f"{seconds / 3600:g} hours"
    return f"{t.budget_gpu_hours:g} GPU-hours / {period}"


@tenant_app.command("budget")
def tenant_budget(
    name: Annotated[str, typer.Argument(help="Tenant name.")],
    gpu_hours: Annotated[
        float | None, typer.Option("--gpu-hours", help="GPU-hours per period.")
    ] = None,
    period: Annotated[str, typer.Option(help="Rolling period (30d, 1w, 12h).")] = "30d",
    none: Annotated[bool, typer.Option("--none", help="Remove the budget.")] = False,
    home: Home = None,
    db: Db = None,
) -> None:
    """Set a tenant's GPU-hour budget: its new work waits while the budget is spent."""
    if (gpu_hours is None) == (not none):
        _fail("--gpu-hours", "give --gpu-hours N or --none")

    def work(s: Session) -> svc.TenantInfo:
        seconds = svc.parse_duration(period, "--period")
        return svc.set_budget(s, name, gpu_hours=gpu_hours, period_s=seconds)

    details = {"gpu_hours": gpu_hours, "period": None if none else period}
    info = _run(home, db, work, ("tenant.budget", name, details))
    typer.echo(f"tenant {info.name}: budget {_budget(info)}")


# ---- users ---------------------------------------------------------------------------------


@user_app.command("add")
def user_add(
    name: Annotated[str, typer.Argument(help="User name (unique across tenants).")],
    tenant: Annotated[str, typer.Option("--tenant", "-t", help="The user's tenant.")],
    role: Annotated[str, typer.Option("--role", "-r", help="admin, member or viewer.")] = "member",
    home: Home = None,
    db: Db = None,
) -> None:
    """Create a user of a tenant."""
    user = _run(home, db, lambda s: svc.create_user(s, tenant, name, role, now=time.time()),
                ("user.add", name, {"tenant": tenant, "role": role}))  # fmt: skip
    typer.echo(
        f"user {user.name} ({user.tenant}, {user.role}) created; "
        f"give them a token: trainyard admin token issue {user.name}"
    )


@user_app.command("list")
def user_list(
    tenant: Annotated[str | None, typer.Option("--tenant", "-t", help="Only this tenant.")] = None,
    home: Home = None,
    db: Db = None,
    as_json: Json = False,
) -> None:
    """List users."""
    users = _run(home, db, lambda s: svc.list_users(s, tenant, now=time.time()))
    if as_json:
        _json(users)
        return
    rows = [
        (u.name, u.tenant, u.role, "disabled" if u.disabled else "active", u.tokens) for u in users
    ]
    _table("users", ("name", "tenant", "role", "status", "live tokens"), rows)


@user_app.command("role")
def user_role(
    name: Annotated[str, typer.Argument(help="User name.")],
    role: Annotated[str, typer.Argument(help="admin, member or viewer.")],
    home: Home = None,
    db: Db = None,
) -> None:
    """Change a user's role."""
    user = _run(home, db, lambda s: svc.set_role(s, name, role, now=time.time()),
                ("user.role", name, {"role": role}))  # fmt: skip
    typer.echo(f"user {user.name} ({user.tenant}) is now {user.role}")


@user_app.command("disable")
def user_disable(
    name: Annotated[str, typer.Argument(help="User name.")], home: Home = None, db: Db = None
) -> None:
    """Lock a user out (every token of theirs stops working)."""
    _run(home, db, lambda s: svc.disable_user(s, name, now=time.time()),
         ("user.disable", name, {}))  # fmt: skip
    typer.echo(f"user {name} disabled: none of their tokens authenticates (a running server "
               "notices within seconds)")  # fmt: skip


@user_app.command("enable")
def user_enable(
    name: Annotated[str, typer.Argument(help="User name.")], home: Home = None, db: Db = None
) -> None:
    """Let a disabled user in again."""
    _run(home, db, lambda s: svc.enable_user(s, name, now=time.time()),
         ("user.enable", name, {}))  # fmt: skip
    typer.echo(f"user {name} enabled")


# ---- tokens --------------------------------------------------------------------------------


def _server_url(config: ServerConfig) -> str:
    """The running server's URL (from its state file), else the default one."""
    try:
        url = json.loads(config.state_file.read_text()).get("url")
        if isinstance(url, str) and url:
            return url
    except (OSError, ValueError, AttributeError):
        pass
    return config.url


@token_app.command("issue")
def token_issue(
    user: Annotated[str, typer.Argument(help="User name.")],
    name: Annotated[str, typer.Option("--name", help="A label for the token.")] = "",
    expires_in: Annotated[
        str | None,
        typer.Option("--expires-in", metavar="DURATION", help="30d, 12h, 90m (default never)."),
    ] = None,
    home: Home = None,
    db: Db = None,
    as_json: Json = False,
) -> None:
    """Issue an API token for a user and print it (once: only its hash is stored)."""
    now = time.time()

    def work(session: Session) -> svc.IssuedToken:
        seconds = None if expires_in is None else svc.parse_duration(expires_in, "--expires-in")
        return svc.issue_user_token(session, user, now=now, name=name, expires_in_s=seconds)

    issued = _run(home, db, work, ("token.issue", user, {"name": name}))
    if as_json:
        typer.echo(json.dumps(dataclasses.asdict(issued), indent=2))
        return
    url = _server_url(ServerConfig(home=_home(home)))
    typer.echo(
        f"token {issued.token_id} for {issued.user} ({issued.tenant}, {issued.role}), "
        f"expires {_when(issued.expires_at)}; shown only now, store it safely:"
    )
    typer.echo(issued.token)
    typer.echo(f"log in with: trainyard login {url} --token {issued.token}")


@token_app.command("revoke")
def token_revoke(
    user: Annotated[str, typer.Argument(help="User name.")],
    token_id: Annotated[
        str | None, typer.Option("--token-id", help="Only this token (default: all).")
    ] = None,
    home: Home = None,
    db: Db = None,
) -> None:
    """Revoke a user's personal API tokens (all, or one)."""
    revoked = _run(
        home, db, lambda s: svc.revoke_user_tokens(s, user, now=time.time(), token_id=token_id),
        ("token.revoke", user, {"token_id": token_id}),
    )  # fmt: skip
    if revoked:
        typer.echo(f"revoked {len(revoked)} token(s) of {user}: {', '.join(revoked)} "
                   "(a running server notices within seconds)")  # fmt: skip
    else:
        typer.echo(f"{user} had no live personal token; nothing revoked")
