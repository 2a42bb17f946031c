"""One server per database (trainyard.server.db.ownership, locks): a second server with a
home of its own but the same database is refused, naming the first (outside review 10: two
servers on one PostgreSQL relaunched each other's running job 17 times in 30 s). Both
backends, real servers' `prepare`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import text

from trainyard.exec.procfs import free_port
from trainyard.server.config import ServerConfig
from trainyard.server.db import make_engine
from trainyard.server.db.ownership import DatabaseLock, DatabaseTaken
from trainyard.server.serve import Server, ServerError


def _server(home: Path, db_url: str) -> Server:
    return Server(ServerConfig(home=home, db_url=db_url, port=free_port(), virtual_gpus=1))


@pytest.fixture
def first(tmp_path: Path, db_url: str) -> Iterator[Server]:
    srv = _server(tmp_path / "home-a", db_url)
    try:
        srv.prepare()
        yield srv
    finally:
        srv.close()


def test_a_second_server_on_the_same_database_is_refused_naming_the_first(
    first: Server, tmp_path: Path, db_url: str
) -> None:
    second = _server(tmp_path / "home-b", db_url)
    with pytest.raises(ServerError) as refused:
        second.prepare()
    message = str(refused.value)
    assert (
        message.startswith("--db ") and "another trainyard server runs on this database" in message
    )
    assert "home-a" in message  # the first one's home (and host and pid) are named
    assert "--db" in message.split(";", 1)[1]  # and what to do
    second.close()
    # once the first has stopped, the database is free for another
    first.close()
    third = _server(tmp_path / "home-c", db_url)
    try:
        third.prepare()
    finally:
        third.close()


@pytest.fixture
def pg_url(pg_server: Any) -> Iterator[str]:
    """A fresh PostgreSQL database (the lock's re-check is PostgreSQL's)."""
    name = "trainyard_lock_test"
    with psycopg.connect(pg_server.dsn(), autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield str(pg_server.url(name))
    finally:
        with psycopg.connect(pg_server.dsn(), autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_a_lost_lock_is_taken_again_unless_another_server_took_it(
    tmp_path: Path, pg_url: str
) -> None:
    """PostgreSQL drops a session's advisory lock with its connection, as when the database
    server restarts: the server takes it again, unless another server took it meanwhile, and
    then it schedules nothing."""
    first = _server(tmp_path / "home-a", pg_url)
    engine = make_engine(pg_url)
    try:
        first.prepare()
        lock = first._db_lock
        assert lock is not None and lock._connection is not None
        holder = lock._connection.exec_driver_sql("SELECT pg_backend_pid()").scalar()
        lock._connection.commit()
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": holder})
            conn.commit()
        lock.check()  # its connection is gone: it takes the lock again
        assert lock._connection is not None
        lock._drop_connection()  # lost again, and this time another server takes it
        other = DatabaseLock(engine, "elsewhere")
        other.acquire()
        try:
            with pytest.raises(DatabaseTaken, match="elsewhere"):
                lock.check()
            lock._checked = 0.0
            assert first.step() is None  # nothing scheduled
        finally:
            other.release()
    finally:
        first.close()
        engine.dispose()
