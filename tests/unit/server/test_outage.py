"""The database not answering (trainyard.server.outage): the API answers 503 with Retry-After
and one warning, not 500 and a traceback a request; the loop logs one warning when the
database goes and one when it is back (outside review 10, F8: a PostgreSQL outage gave 500s
and 2,800 log lines in 20 s)."""

from __future__ import annotations

import logging

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.exc import IntegrityError, OperationalError

from trainyard.server.api.app import create_app
from trainyard.server.db import make_engine
from trainyard.server.outage import REMIND_S, Outage, is_outage


def test_the_api_answers_503_with_retry_after_while_the_database_does_not_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # a PostgreSQL that does not answer (nothing listens on port 1): every query raises
    # OperationalError, as during a restart of the database server
    engine = make_engine("postgresql+psycopg://u:p@127.0.0.1:1/trainyard?connect_timeout=2")
    with (
        caplog.at_level(logging.WARNING),
        TestClient(create_app(engine), raise_server_exceptions=False) as client,
    ):
        for _ in range(3):
            answer = client.get("/healthz")
            assert answer.status_code == 503, answer.text
            assert answer.headers["Retry-After"] == "5"
            assert "database does not answer" in answer.json()["error"]["message"]
    warnings = [r for r in caplog.records if "database does not answer" in r.getMessage()]
    assert len(warnings) == 1 and not any(r.exc_info for r in caplog.records)
    engine.dispose()


def test_one_warning_when_it_goes_one_a_minute_and_one_when_it_is_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    outage = Outage(logging.getLogger("t"), "scheduler", clock=lambda: now[0])
    error = OperationalError("SELECT 1", None, Exception("connection refused\nmore detail"))
    with caplog.at_level(logging.WARNING):
        outage.ok()  # nothing was wrong: nothing said
        for _ in range(10):
            now[0] += 1.0
            outage.failed(error)
        now[0] += REMIND_S
        outage.failed(error)
        now[0] += 4.0
        outage.ok()
        outage.ok()
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 3, said
    assert said[0].startswith("scheduler: the database does not answer (")
    assert "connection refused" in said[0] and "more detail" not in said[0]
    assert "still does not answer after 69 s (11 failed attempts)" in said[1]
    assert said[2] == "scheduler: the database answers again after 73 s (11 failed attempts)"


def test_what_counts_as_an_outage() -> None:
    assert is_outage(OperationalError("q", None, Exception("down")))
    assert not is_outage(IntegrityError("q", None, Exception("duplicate")))
    assert not is_outage(ValueError("a bug"))
