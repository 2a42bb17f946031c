"""First start of an empty database: a `default` tenant, its `admin` user and a `default` queue.

`bootstrap` is idempotent: it does nothing once any tenant exists, so restarts (and several
servers starting on one database) never create a second admin. The admin's token is returned
once, for the caller to store (`trainyard up` writes it to `<home>/admin-token`, mode 0600);
the database keeps only its hash.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from trainyard.server.db import Queue, Role, Tenant, User
from trainyard.server.db.tokens import issue_token

DEFAULT_TENANT = "default"
DEFAULT_ADMIN = "admin"
DEFAULT_QUEUE = "default"


@dataclass(frozen=True)
class Bootstrapped:
    created: bool  # False: the database already had tenants; nothing was done
    admin_token: str | None = None


def bootstrap(sessions: sessionmaker[Session], *, now: float) -> Bootstrapped:
    """Create the default tenant, admin and shared queue in an empty database."""
    with sessions() as s:
        if (s.scalar(select(func.count()).select_from(Tenant)) or 0) > 0:
            return Bootstrapped(created=False)
        tenant = Tenant(name=DEFAULT_TENANT, created_at=now)
        admin = User(tenant=tenant, name=DEFAULT_ADMIN, role=Role.ADMIN, created_at=now)
        s.add_all([tenant, admin])
        try:  # a concurrent bootstrap shows up at the first INSERT (an autoflush, say)
            if s.scalars(select(Queue).where(Queue.name == DEFAULT_QUEUE)).first() is None:
                s.add(Queue(name=DEFAULT_QUEUE, created_at=now))  # shared: no tenant
            s.flush()
            _row, token = issue_token(s, admin, now=now, name="bootstrap admin token")
            s.commit()
        except IntegrityError:  # another server bootstrapped at the same moment
            s.rollback()
            return Bootstrapped(created=False)
    return Bootstrapped(created=True, admin_token=token)


def write_secret(path: Path, text: str) -> None:
    """Write `text` to `path` readable by its owner only (created 0600, atomically)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text + "\n")
    os.replace(tmp, path)
