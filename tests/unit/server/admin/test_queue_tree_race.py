"""Two operators changing the queue tree at the same moment, on SQLite and PostgreSQL: the
second change waits for the first and is checked against it. Found by an outside review:
both `queue set qa --parent qb` and `queue set qb --parent qa` were checked before either
was written, both passed, and the stored cycle stopped every scheduling round."""

from __future__ import annotations

import threading
import time

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from trainyard.core.snapshot import validate
from trainyard.server.db import make_session_factory
from trainyard.server.loop.scheduling import load_snapshot
from trainyard.server.services import admin as svc
from trainyard.server.services.admin import AdminError

NOW = 1_000_000.0


def _second_change(engine: Engine, call: object, out: dict[str, object]) -> threading.Thread:
    def run() -> None:
        with make_session_factory(engine)() as other:
            try:
                call(other)  # type: ignore[operator]
                other.commit()
                out["result"] = "committed"
            except AdminError as error:
                other.rollback()
                out["result"] = error.field

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_crossed_parent_changes_cannot_store_a_cycle(engine: Engine, session: Session) -> None:
    svc.create_queue(session, "qa", now=NOW)
    svc.create_queue(session, "qb", now=NOW)
    session.commit()
    svc.update_queue(session, "qa", parent="qb")  # the first operator, not yet committed
    out: dict[str, object] = {}
    thread = _second_change(engine, lambda s: svc.update_queue(s, "qb", parent="qa"), out)
    time.sleep(0.5)
    assert thread.is_alive() and not out  # it waits for the tree
    session.commit()
    thread.join(30)
    assert out == {"result": "parent"}  # checked against qa -> qb: a cycle, refused
    with make_session_factory(engine)() as fresh:
        validate(load_snapshot(fresh, NOW))  # the tree the scheduler reads is whole


def test_guarantees_added_at_once_cannot_exceed_the_parent(
    engine: Engine, session: Session
) -> None:
    svc.create_queue(session, "par", now=NOW, guaranteed=2)
    svc.create_queue(session, "ch1", now=NOW, parent="par")
    svc.create_queue(session, "ch2", now=NOW, parent="par")
    session.commit()
    svc.update_queue(session, "ch1", guaranteed=2)
    out: dict[str, object] = {}
    thread = _second_change(engine, lambda s: svc.update_queue(s, "ch2", guaranteed=2), out)
    time.sleep(0.5)
    session.commit()
    thread.join(30)
    assert out == {"result": "guaranteed"}


def test_queues_on_a_cycle_stored_before_the_lock_are_listed(
    engine: Engine, session: Session, tmp_path: object
) -> None:
    """`admin queue list` walked the tree from its roots, so queues on a cycle vanished from
    it: the operator could not see what to fix."""
    from typer.testing import CliRunner

    from trainyard.cli.main import app
    from trainyard.server.db import Queue

    svc.create_queue(session, "qa", now=NOW)
    svc.create_queue(session, "qb", now=NOW, parent="qa")
    session.commit()
    qa = session.query(Queue).filter_by(name="qa").one()
    qa.parent_id = session.query(Queue).filter_by(name="qb").one().id  # as the race left it
    session.commit()
    url = engine.url.render_as_string(hide_password=False)
    out = CliRunner().invoke(app, ["admin", "queue", "list", "--db", url, "--home", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert "qa" in out.stdout and "qb" in out.stdout
