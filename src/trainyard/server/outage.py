"""The database not answering: how the API and the scheduler loop say so.

A PostgreSQL restart or outage made every API call answer 500 "internal server error" and
the log grow by a 130-line traceback a second (an outside review: 2,800 lines in 20 s).
Now:

- `is_outage(error)`: whether an exception means the database did not answer (SQLAlchemy's
  `OperationalError` or `InterfaceError`, or a connection it invalidated), not a bug;
- the API answers those with 503 and ``Retry-After`` (clients and the SDK retry), naming the
  database as the cause;
- `Outage` logs one warning when the database stops answering, one a minute while it does
  not, and one when it answers again, with how long it was away, instead of a traceback per
  request or per step.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

__all__ = ["RETRY_AFTER_S", "Outage", "is_outage"]

RETRY_AFTER_S = 5
REMIND_S = 60.0  # a warning a minute while it lasts


def is_outage(error: BaseException) -> bool:
    """Whether `error` says the database did not answer (rather than a bug)."""
    if isinstance(error, OperationalError | InterfaceError):
        return True
    return isinstance(error, DBAPIError) and bool(error.connection_invalidated)


class Outage:
    """One warning when the database stops answering (`failed`), one when it is back (`ok`)."""

    def __init__(
        self, log: logging.Logger, what: str, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.log = log
        self.what = what
        self.clock = clock
        self.since: float | None = None
        self.warned = 0.0
        self.failures = 0

    def failed(self, error: BaseException) -> None:
        self.failures += 1
        now = self.clock()
        if self.since is None:
            self.since = self.warned = now
            text = str(error).strip()
            first = text.splitlines()[0][:200] if text else type(error).__name__
            self.log.warning("%s: the database does not answer (%s); retrying", self.what, first)
        elif now - self.warned >= REMIND_S:
            self.warned = now
            self.log.warning(
                "%s: the database still does not answer after %.0f s (%d failed attempts)",
                self.what, now - self.since, self.failures,
            )  # fmt: skip

    def ok(self) -> None:
        if self.since is not None:
            away = self.clock() - self.since
            self.log.warning(
                "%s: the database answers again after %.0f s (%d failed attempts)",
                self.what, away, self.failures,
            )  # fmt: skip
            self.since = None
            self.failures = 0
