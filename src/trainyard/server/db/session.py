"""Engines, sessions and schema creation from a database URL.

- SQLite (the default, embedded): a file path or `sqlite:///PATH`. Every connection gets
  WAL journal mode (readers never block the writer), `synchronous=NORMAL` (durable at
  checkpoints, safe with WAL), foreign keys on, and a busy timeout so that concurrent writers
  wait for each other instead of failing with "database is locked".
- PostgreSQL: `postgresql+psycopg://...` (`postgresql://` and `postgres://` are taken to mean
  the same, psycopg 3 being the driver installed).
- `init_db(url)` brings the schema to the newest Alembic revision; the migrations ship
  inside the package (`trainyard/server/migrations`), so an installed wheel can migrate.
  Servers starting together migrate one after the other (a PostgreSQL advisory lock; for
  SQLite a lock on `DB.migrate-lock` next to the database file).
"""

from __future__ import annotations

import contextlib
import fcntl
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.orm import Session, sessionmaker

if TYPE_CHECKING:  # Alembic is imported only when migrating (it is slow to import)
    from alembic.config import Config

BUSY_TIMEOUT_MS = 30_000
MIGRATION_LOCK_ID = 0x7472_6169_6E79  # PostgreSQL advisory lock held while migrating
_MIGRATING = threading.Lock()  # Alembic's context is process-global: one migration at a time
MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"


def normalize_url(url: str | Path) -> URL:
    """A SQLAlchemy URL for a URL or a plain file path (which means SQLite)."""
    text = str(url)
    if "://" not in text:
        return make_url(f"sqlite:///{Path(text).expanduser().resolve()}")
    parsed = make_url(text)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def shown_url(url: str | Path) -> str:
    """A database URL as it may be printed or logged: its password as `***`."""
    try:
        return make_url(str(url)).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy reads: no password to find in it either
        return str(url)


def _is_memory(url: URL) -> bool:
    return url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:")


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    assert isinstance(dbapi_connection, sqlite3.Connection)
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")
    finally:
        cursor.close()


def make_engine(url: str | Path, **kwargs: Any) -> Engine:
    """An engine for `url` with trainyard's connection settings (see the module docstring)."""
    parsed = normalize_url(url)
    if parsed.get_backend_name() == "sqlite":
        if _is_memory(parsed):
            raise ValueError("an in-memory SQLite database cannot be shared; give a file path")
        Path(str(parsed.database)).parent.mkdir(parents=True, exist_ok=True)
        connect_args = dict(kwargs.pop("connect_args", {}))
        connect_args.setdefault("timeout", BUSY_TIMEOUT_MS / 1000)
        connect_args.setdefault("check_same_thread", False)
        engine = create_engine(parsed, connect_args=connect_args, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    kwargs.setdefault("pool_pre_ping", True)
    return create_engine(parsed, **kwargs)


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions that keep loaded objects usable after commit (services return them)."""
    return sessionmaker(bind=engine, expire_on_commit=False)


def alembic_config(engine: Engine) -> Config:
    """An Alembic configuration for `engine`, with no alembic.ini needed."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    url = engine.url.render_as_string(hide_password=False)
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


@contextlib.contextmanager
def _sqlite_file_lock(engine: Engine) -> Iterator[None]:
    """Serialise migrations of one SQLite file across processes (`DB.migrate-lock` beside it);
    PostgreSQL uses an advisory lock instead."""
    if engine.dialect.name != "sqlite" or not engine.url.database:
        yield
        return
    with open(f"{engine.url.database}.migrate-lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Migrate the database behind `engine` to `revision`."""
    from alembic import command

    config = alembic_config(engine)
    with _MIGRATING, _sqlite_file_lock(engine), engine.begin() as connection:
        if connection.dialect.name == "postgresql":  # one migrating server at a time
            connection.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_ID})")
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def downgrade(engine: Engine, revision: str) -> None:
    """Migrate the database behind `engine` back to `revision` (`"base"`: drop everything)."""
    from alembic import command

    config = alembic_config(engine)
    with _MIGRATING, _sqlite_file_lock(engine), engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, revision)


def init_db(url: str | Path, **engine_kwargs: Any) -> Engine:
    """Create or upgrade the schema at `url` to the newest revision; returns the engine."""
    engine = make_engine(url, **engine_kwargs)
    upgrade(engine)
    return engine
