"""One server per database: the lock a running server holds on its database for its life.

Two servers scheduling one database fight over every running job: each judges the other's
runs "lost" (no record of them on its own executor) and relaunches them, without end, since
such infrastructure failures count against no restart limit (found by an outside review with
a second server started against the same PostgreSQL from another home). The home's lock
(`serve.py`, `server.lock`) does not cover it: the two servers had two homes.

- PostgreSQL: a session-level advisory lock (`SERVER_LOCK_ID`, in the database's own lock
  space: servers of other databases on the same PostgreSQL do not meet) held on a connection
  of its own, opened when the server starts and closed when it stops. The database drops it when
  that connection ends, a killed server's included, so a stale lock never outlives its
  server. The connection's `application_name` says which server holds it (host, pid, home),
  and a server refused reads it back to name the holder.
- SQLite: an exclusive `flock` on ``DB.server-lock`` beside the database file (the kernel
  drops it with the process). An in-memory database is private to its process: no lock.

`DatabaseLock.check` re-verifies the PostgreSQL lock (a restart of the database server ends
every connection, and the lock with it): it takes the lock again on a new connection, and
raises `DatabaseTaken` when another server took it meanwhile, so that this one stops
scheduling.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from sqlalchemy import Engine, text

__all__ = ["SERVER_LOCK_ID", "DatabaseLock", "DatabaseTaken", "hold_file"]

log = logging.getLogger(__name__)

SERVER_LOCK_ID = 0x7472_6169_6E73  # "trains": distinct from the migrations' lock
CHECK_S = 5.0  # how often `held` checks the lock
_LOW32 = 0xFFFF_FFFF


class DatabaseTaken(Exception):
    """Another server holds the database; the message names it and what to do."""


def hold_file(path: Path, text: str) -> tuple[IO[str] | None, str]:
    """An exclusive `flock` on `path`, held while the returned file stays open (the kernel
    drops it with the process), with `text` written in it; or (None, what the holder wrote)
    when another process holds it."""
    handle = path.open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        holder = handle.read().strip()
        handle.close()
        return None, holder
    handle.seek(0)
    handle.truncate()
    handle.write(text + "\n")
    handle.flush()
    return handle, ""


def _discard(conn: Any) -> None:
    """Close a lock connection for good: back in the pool it would keep the lock (and its
    application_name) alive."""
    with contextlib.suppress(Exception):  # already broken
        conn.invalidate()
    with contextlib.suppress(Exception):
        conn.close()


def _who(home: str, limit: int = 0) -> str:
    """How the holder is named: host, pid and home; within `limit` characters when given
    (PostgreSQL's application_name keeps 63 bytes), the home's start cut off first."""
    head = f"trainyard {socket.gethostname()} pid {os.getpid()} home "
    if limit and len(head) + len(home) > limit:
        home = "..." + home[-max(8, limit - len(head) - 3) :]
    return (head + home)[: limit or None]


@dataclass
class DatabaseLock:
    """The lock of one server on `engine`'s database (see the module docstring)."""

    engine: Engine
    home: str
    _connection: Any = None
    _file: IO[str] | None = field(default=None, repr=False)
    _checked: float = 0.0

    def acquire(self) -> None:
        """Take the lock, or raise `DatabaseTaken` naming the server that holds it."""
        if self.engine.dialect.name == "postgresql":
            if not self._take_advisory():
                raise DatabaseTaken(self._refusal(self._holder()))
            return
        path = self.engine.url.database
        if self.engine.dialect.name != "sqlite" or not path or path == ":memory:":
            return
        handle, holder = hold_file(Path(f"{path}.server-lock"), _who(self.home))
        if handle is None:
            raise DatabaseTaken(self._refusal(holder))
        self._file = handle

    def check(self) -> None:
        """Raise `DatabaseTaken` when another server holds the lock now. This server's lock is
        taken again if its connection was lost (the database server restarted); while the
        database does not answer nobody can schedule on it, so that is no refusal."""
        if self.engine.dialect.name != "postgresql":
            return
        if self._connection is not None:
            try:
                self._connection.exec_driver_sql("SELECT 1")
                self._connection.commit()
                return
            except Exception:  # the connection is gone, and its lock with it
                self._drop_connection()
        try:
            taken = self._take_advisory()
        except Exception:  # unreachable: retried at the next check
            return
        if not taken:
            raise DatabaseTaken(self._refusal(self._holder()))

    def held(self) -> bool:
        """Whether this server may schedule: `check`, at most every `CHECK_S` seconds; when
        another server took the database, an error in the log and False."""
        now = time.monotonic()
        if now - self._checked < CHECK_S:
            return True
        self._checked = now
        try:
            self.check()
        except DatabaseTaken as taken:
            log.error("not scheduling: %s", taken)
            return False
        return True

    def release(self) -> None:
        self._drop_connection()
        if self._file is not None:
            self._file.close()
            self._file = None

    # ---- PostgreSQL -------------------------------------------------------------------

    def _take_advisory(self) -> bool:
        conn = self.engine.connect()
        try:
            conn.execute(text("SELECT set_config('application_name', :who, false)"),
                         {"who": _who(self.home, 63)})  # fmt: skip
            got = conn.execute(text("SELECT pg_try_advisory_lock(:id)"), {"id": SERVER_LOCK_ID})
            taken = bool(got.scalar())
            conn.commit()
        except BaseException:
            _discard(conn)
            raise
        if not taken:
            _discard(conn)
            return False
        self._connection = conn
        return True

    def _holder(self) -> str:
        """The application_name of the session that holds the lock ("" if it cannot be read)."""
        query = text(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.classid = :high AND l.objid = :low "
            "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        try:
            with self.engine.connect() as conn:
                found = conn.execute(
                    query, {"high": SERVER_LOCK_ID >> 32, "low": SERVER_LOCK_ID & _LOW32}
                ).scalar()
        except Exception:
            return ""
        return str(found or "")

    def _drop_connection(self) -> None:
        if self._connection is not None:
            _discard(self._connection)
            self._connection = None

    @staticmethod
    def _refusal(holder: str) -> str:
        named = f" ({holder})" if holder else ""
        return (
            f"another trainyard server runs on this database{named}; one server schedules a "
            "database: stop it first, or give this one a database of its own (--db)"
        )
