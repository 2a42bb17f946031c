"""Fixtures for the REST API tests: two tenants, users of every role, tokens, a test client.

Built on the `engine` fixture of conftest.py, so every API test runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from trainyard.jobspec import Limits
from trainyard.server.api.app import create_app
from trainyard.server.db import (
    Base,
    Device,
    Node,
    Queue,
    Role,
    Tenant,
    User,
    make_session_factory,
)
from trainyard.server.db.tokens import issue_token

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

NOW = 1_000_000.0


@dataclass
class ApiWorld:
    client: TestClient
    engine: Engine
    tokens: dict[str, str]  # user name -> token

    def auth(self, user: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[user]}"}

    def row_counts(self) -> dict[str, int]:
        """The number of rows in every table."""
        with make_session_factory(self.engine)() as session:
            return {
                table.name: session.scalar(select(func.count()).select_from(table)) or 0
                for table in Base.metadata.sorted_tables
            }


def seed(session: Session) -> dict[str, str]:
    acme = Tenant(name="acme", created_at=NOW)
    globex = Tenant(name="globex", created_at=NOW)
    users = {
        "ada": User(tenant=acme, name="ada", role=Role.MEMBER, created_at=NOW),
        "vic": User(tenant=acme, name="vic", role=Role.VIEWER, created_at=NOW),
        "root": User(tenant=acme, name="root", role=Role.ADMIN, created_at=NOW),
        "gus": User(tenant=globex, name="gus", role=Role.MEMBER, created_at=NOW),
    }
    top = Queue(name="root", created_at=NOW)
    research = Queue(name="research", tenant=acme, parent=top, guaranteed=8, created_at=NOW)
    sales = Queue(name="sales", tenant=globex, parent=top, guaranteed=4, created_at=NOW)
    node = Node(name="n0", cpus=64, memory_gb=512, virtual=True, registered_at=NOW)
    node.devices = [
        Device(index=i, gpu_type="H100", memory_gb=80.0, virtual=True) for i in range(4)
    ]
    session.add_all([acme, globex, *users.values(), top, research, sales, node])
    session.flush()
    tokens = {name: issue_token(session, user, now=NOW)[1] for name, user in users.items()}
    session.commit()
    return tokens


@pytest.fixture
def api(engine: Engine) -> Iterator[ApiWorld]:
    with make_session_factory(engine)() as session:
        tokens = seed(session)
    clock = iter(float(NOW + i) for i in range(1, 1_000_000))
    app = create_app(engine, limits=Limits(max_gpus_per_job=64), clock=lambda: next(clock))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield ApiWorld(client=client, engine=engine, tokens=tokens)


__all__ = ["NOW", "ApiWorld", "api", "seed"]
