"""What every `trainyard admin` service shares: the error type, `UNSET`, name rules, the
transaction helper and the lookup of a named tenant, user or queue (`services/admin.py` and
`services/admin_queues.py` use them; `admin.py` re-exports them)."""

from __future__ import annotations

import contextlib
import enum
import re
from collections.abc import Iterator
from typing import TypeVar

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from trainyard.errors import FieldError, suggest
from trainyard.server.db import Queue, Tenant, User

NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
NAME_RULE = "1 to 64 of a-z 0-9 _ . - (starting with a letter or digit)"
_Named = TypeVar("_Named", Tenant, User, Queue)


class AdminError(FieldError):
    """Bad input to an admin function: `field` is what to change, `message` says how."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(field, message)
        self.args = (f"{field}: {message}",)


class Unset(enum.Enum):
    """The type of `UNSET`."""

    UNSET = "unset"


UNSET = Unset.UNSET
"""`update_queue`'s "leave as it is" (None means "none": no parent, shared, no limit)."""


@contextlib.contextmanager
def transaction(sessions: sessionmaker[Session]) -> Iterator[Session]:
    """A session whose work is committed if the block succeeds and rolled back otherwise."""
    with sessions() as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise


def check_name(field: str, value: str, what: str) -> str:
    """`value` if it is a valid name of a `what`, else an AdminError."""
    if not isinstance(value, str) or not NAME_PATTERN.fullmatch(value):
        raise AdminError(field, f"invalid {what} name {value!r}: use {NAME_RULE}")
    return value


_LISTS = {Tenant: "tenant", User: "user", Queue: "queue"}


def find(session: Session, model: type[_Named], name: str, field: str) -> _Named:
    """The tenant, user or queue called `name`, else an AdminError with a did-you-mean."""
    row = session.scalars(select(model).where(model.name == name)).one_or_none()
    if row is None:
        what = _LISTS[model]
        close = suggest(name, session.scalars(select(model.name)))
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise AdminError(field, f"no {what} {name!r}{hint}; see: trainyard admin {what} list")
    return row


def flush(session: Session, field: str, what: str) -> None:
    """Flush; a unique-name race with another writer becomes an AdminError."""
    try:
        session.flush()
    except IntegrityError:
        raise AdminError(field, f"{what} already exists; choose another name") from None
