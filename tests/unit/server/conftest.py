"""Database fixtures: every test that takes `db_url`, `engine` or `session` runs twice, on
SQLite (a file in the test's tmp dir) and on a real PostgreSQL.

PostgreSQL is one throwaway server per test session (`pg_server.PostgresServer`: initdb +
pg_ctl, as the `postgres` OS user when running as root). `db_url` gives each test a fresh,
empty database (created, then dropped); `engine` and `session` use one database migrated
once per session and emptied after each test. On SQLite, `engine` copies a file migrated
once. Without PostgreSQL binaries the postgres parameters are skipped, unless
TRAINYARD_REQUIRE contains `postgres` or CI=true: then they fail, saying how to install it.

Every decision the server makes in-process (`scheduling.run_once` calls `core.run_cycle`) is
checked against the booking contract (`audited_cycles`).
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pg_server import INSTALL_HINT, PostgresServer, PostgresUnavailable, find_bindir, required
from server_factories import World
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from trainyard import core
from trainyard.server.db import Base, init_db, make_engine, make_session_factory

BACKENDS = ["sqlite", "postgres"]
_names = itertools.count()


@pytest.fixture(autouse=True)
def _audit_server_cycles(audited_cycles: Callable[[Any], None]) -> None:
    audited_cycles(core)


def _unavailable(why: str) -> None:
    if required():
        pytest.fail(
            f"PostgreSQL is required (TRAINYARD_REQUIRE/CI) but unavailable: {why}. "
            f"To fix: {INSTALL_HINT}",
            pytrace=False,
        )
    pytest.skip(f"PostgreSQL unavailable: {why} ({INSTALL_HINT})")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    bindir = find_bindir()
    if bindir is None:
        _unavailable("initdb/pg_ctl not found")
        raise AssertionError("unreachable")
    try:
        server = PostgresServer(bindir)
    except PostgresUnavailable as error:
        _unavailable(str(error))
        raise
    try:
        server.start()
    except PostgresUnavailable as error:
        server.stop()
        _unavailable(str(error))
    try:
        yield server
    finally:
        server.stop()


def _admin(server: PostgresServer, sql: str) -> None:
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(sql)


@pytest.fixture(scope="session")
def sqlite_migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated to head once (checkpointed into one file), copied per test."""
    path = tmp_path_factory.mktemp("sqlite-template") / "trainyard.db"
    engine = init_db(path)
    with engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    engine.dispose()
    return path


@pytest.fixture(scope="session")
def pg_migrated(pg_server: PostgresServer) -> str:
    """One database migrated to head for the whole session; emptied after every test."""
    name = "trainyard_migrated"
    _admin(pg_server, f"CREATE DATABASE {name}")
    init_db(pg_server.url(name)).dispose()
    return name


def _empty_all(server: PostgresServer, database: str) -> None:
    """Delete every row (faster than TRUNCATE on tables this small), children first; the
    audit trail's append-only trigger is bypassed for this session only (as a superuser)."""
    with psycopg.connect(server.dsn(database)) as conn:
        conn.execute("SET session_replication_role = replica")
        for table in reversed(Base.metadata.sorted_tables):
            conn.execute(f"DELETE FROM {table.name}")


@contextlib.contextmanager
def _pg_database(server: PostgresServer) -> Iterator[str]:
    name = f"trainyard_test_{next(_names)}"
    _admin(server, f"CREATE DATABASE {name}")
    try:
        yield server.url(name)
    finally:
        _admin(server, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of an empty database of each backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'trainyard.db'}"
        return
    with _pg_database(request.getfixturevalue("pg_server")) as url:
        yield url


@pytest.fixture(params=BACKENDS)
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """An engine on a fresh database of each backend, migrated to head."""
    if request.param == "sqlite":
        path = tmp_path / "trainyard.db"
        shutil.copyfile(request.getfixturevalue("sqlite_migrated"), path)
        eng = make_engine(path)
        try:
            yield eng
        finally:
            eng.dispose()
        return
    server = request.getfixturevalue("pg_server")
    database = request.getfixturevalue("pg_migrated")
    eng = make_engine(server.url(database))
    try:
        yield eng
    finally:
        eng.dispose()
        _empty_all(server, database)


@pytest.fixture
def backend(engine: Engine) -> str:
    return "sqlite" if engine.dialect.name == "sqlite" else "postgres"


@pytest.fixture
def session(engine: Engine) -> Iterator[Session]:
    with make_session_factory(engine)() as s:
        yield s


@pytest.fixture
def world(session: Session) -> World:
    """A tenant, a user and a queue tree to submit jobs into, committed."""
    return World.create(session, now=1000.0)


@pytest.fixture(scope="session")
def ray_world() -> Iterator[Any]:
    """A real Ray cluster of three worker nodes for the whole session (`ray_cluster.py`)."""
    from ray_cluster import RayWorld

    world = RayWorld()
    try:
        yield world
    finally:
        world.shutdown()


@pytest.fixture
def ray_nodes(ray_world: Any) -> Any:
    """The Ray cluster with all three worker nodes alive at the start of the test."""
    ray_world.ensure()
    return ray_world
