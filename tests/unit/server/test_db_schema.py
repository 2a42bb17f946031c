"""Migrations create the models' schema on SQLite and PostgreSQL; the models round-trip."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from server_factories import PLACEMENT, World
from sqlalchemy import Engine, inspect, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

import trainyard.server
from trainyard.server.db import (
    Base,
    Device,
    Health,
    Job,
    JobEvent,
    JobState,
    Node,
    Queue,
    Role,
    Tenant,
    User,
    init_db,
    make_engine,
    make_session_factory,
    normalize_url,
)
from trainyard.server.db.session import MIGRATIONS_DIR, downgrade, upgrade

TABLES = {
    "tenants",
    "users",
    "api_tokens",
    "queues",
    "nodes",
    "devices",
    "jobs",
    "job_events",
    "usage_records",
    "audit_events",
    "job_observations",
    "job_progress",
    "job_report_samples",
    "login_codes",
}


def _diff(engine: Engine) -> list[object]:
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        return list(compare_metadata(context, Base.metadata))


def test_migrations_create_the_models_schema(db_url: str) -> None:
    engine = init_db(db_url)
    try:
        names = set(inspect(engine).get_table_names())
        assert names == TABLES | {"alembic_version"}
        with engine.connect() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0019"
        assert _diff(engine) == []
        job_indexes = {i["name"]: i["column_names"] for i in inspect(engine).get_indexes("jobs")}
        assert job_indexes["ix_jobs_state_queue_id"] == ["state", "queue_id"]
        assert job_indexes["ix_jobs_queue_id_state"] == ["queue_id", "state"]
    finally:
        engine.dispose()


def test_a_database_of_the_first_release_upgrades_its_jobs_to_rigid(db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        upgrade(engine, "0001")
        assert "min_gpus" not in {c["name"] for c in inspect(engine).get_columns("jobs")}
        upgrade(engine)
        columns = {c["name"]: c for c in inspect(engine).get_columns("jobs")}
        assert columns["min_gpus"]["nullable"] and columns["max_gpus"]["nullable"]
        assert _diff(engine) == []
        downgrade(engine, "0001")
        assert "max_gpus" not in {c["name"] for c in inspect(engine).get_columns("jobs")}
    finally:
        engine.dispose()


def test_init_db_is_idempotent_and_downgrades(db_url: str) -> None:
    init_db(db_url).dispose()
    engine = init_db(db_url)
    try:
        downgrade(engine, "base")
        assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
        upgrade(engine)
        assert set(inspect(engine).get_table_names()) == TABLES | {"alembic_version"}
    finally:
        engine.dispose()


def test_sqlite_connections_use_wal_foreign_keys_and_a_busy_timeout(tmp_path: Path) -> None:
    engine = init_db(tmp_path / "sub" / "t.db")  # a plain path means SQLite
    try:
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30_000
    finally:
        engine.dispose()


def test_urls() -> None:
    assert normalize_url("postgresql://u@h/db").drivername == "postgresql+psycopg"
    assert normalize_url("postgres://u@h/db").drivername == "postgresql+psycopg"
    assert normalize_url("sqlite:///x.db").drivername == "sqlite"
    with pytest.raises(ValueError, match="in-memory"):
        make_engine("sqlite://")


def test_models_round_trip(engine: Engine, session: Session, world: World) -> None:
    node = Node(
        name="n0", address="10.0.0.1", cpus=64.0, memory_gb=512.0, topology_path=["s0", "l0"],
        island_size=4, virtual=True, registered_at=1000.0,
        devices=[
            Device(index=i, gpu_type="H100", memory_gb=80.0, virtual=True) for i in range(8)
        ],
    )  # fmt: skip
    session.add(node)
    job = world.job(
        session, name="train", spec={"command": ["python", "t.py"], "env": {"A": "1"}},
        gpus=2, gpu_types=["H100", "A100"], cpus=8.0, memory_gb=64.0, priority=5,
        expected_duration=3600.0, topology="node",
    )  # fmt: skip
    job.placement = list(PLACEMENT)
    session.commit()
    job_id = job.id

    with make_session_factory(engine)() as fresh:
        got = fresh.get(Job, job_id)
        assert got is not None
        assert got.id.startswith("j-")
        assert (got.name, got.gpus, got.cpus, got.memory_gb, got.priority) == (
            "train", 2, 8.0, 64.0, 5,
        )  # fmt: skip
        assert got.spec == {"command": ["python", "t.py"], "env": {"A": "1"}}
        assert got.gpu_types == ["H100", "A100"]
        assert got.placement == PLACEMENT
        assert got.state is JobState.PENDING
        assert (got.submitted_at, got.state_changed_at, got.expected_duration) == (
            1000.0, 1000.0, 3600.0,
        )  # fmt: skip
        assert got.queue.name == "research"
        assert got.queue.parent is not None and got.queue.parent.name == "root"
        assert (got.queue.guaranteed, got.queue.limit, got.queue.weight) == (8, 16, 2.0)
        assert got.tenant.name == "acme"
        assert got.user is not None and got.user.role is Role.MEMBER
        assert [(e.from_state, e.to_state, e.reason) for e in got.events] == [
            (None, JobState.PENDING, "submitted")
        ]
        n = fresh.scalars(select(Node).where(Node.name == "n0")).one()
        assert [d.index for d in n.devices] == list(range(8))
        assert all(d.virtual and d.gpu_type == "H100" for d in n.devices)
        assert n.topology_path == ["s0", "l0"] and n.health is Health.HEALTHY
        assert [q.name for q in fresh.scalars(select(Queue).order_by(Queue.name))] == [
            "research", "root",
        ]  # fmt: skip
        assert fresh.scalars(select(User)).one().tenant.name == "acme"
        # Enums are stored as their plain values.
        raw = fresh.execute(text("SELECT state FROM jobs")).scalar()
        assert raw == "PENDING"


def test_foreign_keys_are_enforced(session: Session, world: World) -> None:
    session.add(Job(tenant_id=world.tenant.id, queue_id=999_999, submitted_at=1.0,
                    state_changed_at=1.0))  # fmt: skip
    with pytest.raises(IntegrityError):
        session.flush()
    session.rollback()


def test_device_indexes_are_unique_per_node(session: Session) -> None:
    node = Node(name="n1", registered_at=1.0)
    node.devices = [Device(index=0, gpu_type="A100", memory_gb=40.0) for _ in range(2)]
    session.add(node)
    with pytest.raises(IntegrityError):
        session.flush()
    session.rollback()


def test_deleting_a_node_deletes_its_devices(session: Session) -> None:
    node = Node(name="n2", registered_at=1.0)
    node.devices = [Device(index=i, gpu_type="A100", memory_gb=40.0) for i in range(4)]
    session.add(node)
    session.commit()
    session.delete(node)
    session.commit()
    assert session.scalars(select(Device)).all() == []


def test_deleting_a_job_deletes_its_events(session: Session, world: World) -> None:
    job = world.job(session)
    session.commit()
    session.delete(job)
    session.commit()
    assert session.scalars(select(JobEvent)).all() == []
    assert session.scalars(select(Tenant)).one().name == "acme"


def test_two_threads_migrating_at_once_both_succeed(db_url: str) -> None:
    with ThreadPoolExecutor(2) as pool:
        engines = list(pool.map(lambda _: init_db(db_url), range(2), timeout=60))
    try:
        assert set(inspect(engines[0]).get_table_names()) == TABLES | {"alembic_version"}
    finally:
        for engine in engines:
            engine.dispose()


def test_migrations_ship_inside_the_package() -> None:
    # setuptools' find_packages (pyproject.toml) ships directories that have an __init__.py.
    assert (MIGRATIONS_DIR / "env.py").is_file()
    assert (MIGRATIONS_DIR / "versions" / "0001_initial.py").is_file()
    assert (MIGRATIONS_DIR / "__init__.py").is_file()
    assert (MIGRATIONS_DIR / "versions" / "__init__.py").is_file()
    assert MIGRATIONS_DIR.parent == Path(trainyard.server.__file__).resolve().parent


def test_two_processes_migrating_at_once_both_succeed(db_url: str) -> None:
    code = "import sys; from trainyard.server.db import init_db; init_db(sys.argv[1]).dispose()"
    procs = [
        subprocess.Popen([sys.executable, "-c", code, db_url], stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    engine = make_engine(db_url)
    try:
        assert _diff(engine) == []
    finally:
        engine.dispose()


def test_upgrading_to_0014_takes_nodes_from_each_stored_spec(
    engine: Engine, session: Session, world: World
) -> None:
    spread = world.job(session, gpus=4, spec={"nodes": 2, "gpus": 4}, nodes=0)
    single = world.job(session, gpus=4, spec={"nodes": 1, "gpus": 4})
    elastic = world.job(session, gpus=4, spec={"nodes": 2, "gpus": 4}, min_gpus=2, max_gpus=8)
    ids = (spread.id, single.id, elastic.id)
    session.commit()
    session.close()
    downgrade(engine, "0013")
    upgrade(engine)
    with make_session_factory(engine)() as s:
        nodes = [s.get(Job, job_id).nodes for job_id in ids]  # type: ignore[union-attr]
    assert nodes == [2, 0, 0]  # an elastic job's shape follows its size
