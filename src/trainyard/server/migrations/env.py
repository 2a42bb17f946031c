"""Alembic environment for trainyard.

Run through `trainyard.server.db.session.upgrade`, which passes an open connection in
`config.attributes["connection"]`; with only `sqlalchemy.url` set (the `alembic` command line
with `-x` or a config) it opens its own engine with trainyard's connection settings.
SQLite uses batch mode so that later revisions can alter tables.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from trainyard.server.db import Base
from trainyard.server.db.session import make_engine

target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = context.config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("no database: pass a connection or set sqlalchemy.url")
    engine = make_engine(url)
    try:
        with engine.begin() as own:
            _run(own)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise RuntimeError("trainyard migrations run online only (against a database)")
run_migrations_online()
