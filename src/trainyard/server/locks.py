"""What makes a server the only one: its home's lock and its database's.

- `lock_home(home)`: an exclusive `flock` on ``<home>/server.lock`` (released by the kernel
  even after ``kill -9``), so that two servers never share a home's runs and state files.
- `lock_database(engine, home)`: the database's (`trainyard.server.db.ownership`), so that two
  servers with two homes never schedule one database.

Both raise `ServerError` with what to do.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

from sqlalchemy import Engine

from trainyard.server.db.ownership import DatabaseLock, DatabaseTaken, hold_file

__all__ = ["ServerError", "lock_database", "lock_home"]


class ServerError(Exception):
    """A server cannot start (the message says why and what to do)."""


def lock_home(home: Path) -> IO[str]:
    """The open lock file of `home`, locked (close it to release)."""
    path = home / "server.lock"
    handle, _holder = hold_file(path, str(os.getpid()))
    if handle is None:
        raise ServerError(
            f"another trainyard server uses {home} (it holds {path}); stop it, "
            "or give this one another home (TRAINYARD_HOME or --home)"
        )
    return handle


def lock_database(engine: Engine, home: Path) -> DatabaseLock:
    """This server's lock on `engine`'s database, taken (`DatabaseLock.release` to let go)."""
    lock = DatabaseLock(engine, str(home))
    try:
        lock.acquire()
    except DatabaseTaken as taken:
        raise ServerError(
            f"--db {engine.url.render_as_string(hide_password=True)}: {taken}"
        ) from None
    return lock
