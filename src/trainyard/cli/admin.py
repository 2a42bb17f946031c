"""`trainyard admin`: operator commands straight on the server's database (on its machine).

Thin shell over `trainyard.server.services.admin`: `tenant add|list`, `user add|list|role|disable|
enable`, `token issue|revoke`, `queue add|set|list|rm`. `--home PATH` (default
`$TRAINYARD_HOME` or ~/.trainyard) and `--db URL` (default the home's SQLite file) go after
the command or right after `admin`. The database is migrated to head first and, when empty,
bootstrapped as `trainyard up` would (tenant `default`, user `admin`, shared queue `default`;
the admin token goes to `<home>/admin-token`). Each command is one transaction: input errors
print one `error: FIELD: ...` line on stderr, exit with code 2 and leave the database as it was.
"""

from __future__ import annotations

import dataclasses
import json
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
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from trainyard.server.config import ServerConfig, default_home
from trainyard.server.services import admin as svc

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
    str | None, typer.Option("--db", metavar="URL", help="Database (default HOME/trainyard.db).")
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


def _shown(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url


@contextmanager
def _database(home: Path | None, db: str | None) -> Iterator[Session]:
    """One transaction on the migrated (and bootstrapped) database; AdminError -> exit 2."""
    from trainyard.server.bootstrap import bootstrap, write_secret
    from trainyard.server.db import init_db, make_session_factory

    config = ServerConfig(home=_home(home), db_url=db or _GROUP_OPTIONS.get("db"))
    try:
        engine = init_db(config.database)
    except Exception as error:  # a bad URL, an unreachable server, a newer schema
        _fail("--db", f"cannot open database {_shown(config.database)}: {_first_line(error)}")
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


def _run(home: Path | None, db: str | None, work: Callable[[Session], T]) -> T:
    with _database(home, db) as session:
        return work(session)


def _when(ts: float | None) -> str:
    if ts is None:
        return "never"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    table = Table(title=title, box=box.SIMPLE, title_justify="left")
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*("-" if v is None else str(v) for v in row))
    Console(highlight=False).print(table)


def _json(items: Sequence[Any]) -> None:
    typer.echo(json.dumps([dataclasses.asdict(item) for item in items], indent=2))


# ---- tenants -------------------------------------------------------------------------------


@tenant_app.command("add")
def tenant_add(
    name: Annotated[str, typer.Argument(help="Tenant name.")], home: Home = None, db: Db = None
) -> None:
    """Create a tenant."""
    _run(home, db, lambda s: svc.create_tenant(s, name, now=time.time()))
    typer.echo(f"tenant {name} created; add users: trainyard admin user add NAME --tenant {name}")


@tenant_app.command("list")
def tenant_list(home: Home = None, db: Db = None, as_json: Json = False) -> None:
    """List tenants."""
    tenants = _run(home, db, svc.list_tenants)
    if as_json:
        _json(tenants)
        return
    rows = [(t.name, t.users, t.queues, _when(t.created_at)) for t in tenants]
    _table("tenants", ("name", "users", "own queues", "created"), rows)


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
    user = _run(home, db, lambda s: svc.create_user(s, tenant, name, role, now=time.time()))
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
    user = _run(home, db, lambda s: svc.set_role(s, name, role, now=time.time()))
    typer.echo(f"user {user.name} ({user.tenant}) is now {user.role}")


@user_app.command("disable")
def user_disable(
    name: Annotated[str, typer.Argument(help="User name.")], home: Home = None, db: Db = None
) -> None:
    """Lock a user out (every token of theirs stops working)."""
    _run(home, db, lambda s: svc.disable_user(s, name, now=time.time()))
    typer.echo(f"user {name} disabled: none of their tokens authenticates (a running server "
               "notices within seconds)")  # fmt: skip


@user_app.command("enable")
def user_enable(
    name: Annotated[str, typer.Argument(help="User name.")], home: Home = None, db: Db = None
) -> None:
    """Let a disabled user in again."""
    _run(home, db, lambda s: svc.enable_user(s, name, now=time.time()))
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
        seconds = svc.parse_duration(expires_in, "--expires-in") if expires_in else None
        return svc.issue_user_token(session, user, now=now, name=name, expires_in_s=seconds)

    issued = _run(home, db, work)
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
        home, db, lambda s: svc.revoke_user_tokens(s, user, now=time.time(), token_id=token_id)
    )
    if revoked:
        typer.echo(f"revoked {len(revoked)} token(s) of {user}: {', '.join(revoked)} "
                   "(a running server notices within seconds)")  # fmt: skip
    else:
        typer.echo(f"{user} had no live personal token; nothing revoked")


# ---- queues --------------------------------------------------------------------------------

Parent = Annotated[str | None, typer.Option("--parent", "-p", help="Parent queue.")]
Tenant = Annotated[str | None, typer.Option("--tenant", "-t", help="Owning tenant.")]
Guaranteed = Annotated[int | None, typer.Option("--guaranteed", "-g", help="Guaranteed GPUs.")]
Limit = Annotated[int | None, typer.Option("--limit", "-l", help="At most this many GPUs.")]
Weight = Annotated[float | None, typer.Option("--weight", "-w", help="Fair-share weight (> 0).")]
MaxPriority = Annotated[
    int | None,
    typer.Option("--max-priority", help="Highest priority its jobs may ask for (a submit above "
                 "it is refused; the lowest limit of the queue and its ancestors applies)."),
]  # fmt: skip


def _queue_line(q: svc.QueueInfo) -> str:
    limit = "no limit" if q.limit is None else f"limit {q.limit}"
    top = "" if q.max_priority is None else f", max priority {q.max_priority}"
    return (
        f"queue {q.name}: parent {q.parent or '-'}, {q.tenant or 'shared'}, "
        f"guaranteed {q.guaranteed}, {limit}, weight {q.weight:g}{top}"
    )


@queue_app.command("add")
def queue_add(
    name: Annotated[str, typer.Argument(help="Queue name (unique).")],
    parent: Parent = None,
    tenant: Annotated[
        str | None, typer.Option("--tenant", "-t", help="Owning tenant (default: shared).")
    ] = None,
    guaranteed: Guaranteed = 0,
    limit: Limit = None,
    weight: Weight = 1.0,
    max_priority: MaxPriority = None,
    home: Home = None,
    db: Db = None,
) -> None:
    """Create a queue (shared unless --tenant; a root unless --parent)."""
    queue = _run(
        home,
        db,
        lambda s: svc.create_queue(
            s,
            name,
            now=time.time(),
            parent=parent,
            tenant=tenant,
            guaranteed=guaranteed or 0,
            limit=limit,
            weight=1.0 if weight is None else weight,
            max_priority=max_priority,
        ),
    )
    typer.echo(f"created {_queue_line(queue)}")


@queue_app.command("set")
def queue_set(
    name: Annotated[str, typer.Argument(help="Queue name.")],
    parent: Parent = None,
    no_parent: Annotated[bool, typer.Option("--no-parent", help="Make it a root.")] = False,
    tenant: Tenant = None,
    shared: Annotated[bool, typer.Option("--shared", help="Shared by all tenants.")] = False,
    guaranteed: Guaranteed = None,
    limit: Limit = None,
    no_limit: Annotated[bool, typer.Option("--no-limit", help="Remove the limit.")] = False,
    weight: Weight = None,
    max_priority: MaxPriority = None,
    no_max_priority: Annotated[
        bool, typer.Option("--no-max-priority", help="Remove the priority limit.")
    ] = False,
    home: Home = None,
    db: Db = None,
) -> None:
    """Change a queue's parent, tenant, guarantee, limit, weight or priority limit."""
    for given, flag, other in (
        (parent is not None and no_parent, "--parent", "--no-parent"),
        (tenant is not None and shared, "--tenant", "--shared"),
        (limit is not None and no_limit, "--limit", "--no-limit"),
        (max_priority is not None and no_max_priority, "--max-priority", "--no-max-priority"),
    ):
        if given:
            _fail(flag, f"give {flag} or {other}, not both")
    new_parent: str | svc.Unset | None = (
        None if no_parent else (svc.UNSET if parent is None else parent)
    )
    new_tenant: str | svc.Unset | None = (
        None if shared else (svc.UNSET if tenant is None else tenant)
    )
    new_limit: int | svc.Unset | None = (
        None if no_limit else (svc.UNSET if limit is None else limit)
    )
    new_top: int | svc.Unset | None = (
        None if no_max_priority else (svc.UNSET if max_priority is None else max_priority)
    )
    changes = (new_parent, new_tenant, new_limit, new_top)
    if all(c is svc.UNSET for c in changes) and guaranteed is None and weight is None:
        _fail("queue", "nothing to change: give --parent, --tenant, --guaranteed, --limit, ...")
    queue = _run(
        home,
        db,
        lambda s: svc.update_queue(
            s,
            name,
            parent=new_parent,
            tenant=new_tenant,
            guaranteed=guaranteed,
            limit=new_limit,
            weight=weight,
            max_priority=new_top,
        ),
    )
    typer.echo(f"updated {_queue_line(queue)}")


@queue_app.command("list")
def queue_list(
    tenant: Annotated[
        str | None, typer.Option("--tenant", "-t", help="Only queues this tenant may use.")
    ] = None,
    home: Home = None,
    db: Db = None,
    as_json: Json = False,
) -> None:
    """List queues, as a tree."""
    queues = _run(home, db, lambda s: svc.list_queues(s, tenant))
    if as_json:
        _json(queues)
        return
    by_name = {q.name: q for q in queues}
    ordered: list[tuple[int, svc.QueueInfo]] = []

    def walk(q: svc.QueueInfo, depth: int) -> None:
        ordered.append((depth, q))
        for child in q.children:
            if child in by_name:
                walk(by_name[child], depth + 1)

    for q in queues:
        if q.parent is None or q.parent not in by_name:
            walk(q, 0)
    rows = [
        (
            "  " * depth + q.name,
            q.tenant or "shared",
            q.guaranteed,
            q.limit,
            f"{q.weight:g}",
            q.pending,
            q.running,
        )
        for depth, q in ordered
    ]
    columns = ("queue", "tenant", "guaranteed", "limit", "weight", "pending", "running")
    _table("queues", columns, rows)


@queue_app.command("rm")
def queue_rm(
    name: Annotated[str, typer.Argument(help="Queue name.")],
    purge_finished: Annotated[
        bool,
        typer.Option("--purge-finished", help="Also delete its finished jobs (their history)."),
    ] = False,
    home: Home = None,
    db: Db = None,
) -> None:
    """Delete a queue without child queues or unfinished jobs."""
    gone = _run(home, db, lambda s: svc.delete_queue(s, name, purge_finished=purge_finished))
    typer.echo(f"queue {name} deleted" + (f" with {gone} finished job(s)" if gone else ""))
