"""The per-tenant limit on queued jobs (issue 14), through the API on both databases: beyond
it a submit is answered 429 naming the limit, other tenants are not affected, and a job that
leaves PENDING makes room again."""

from __future__ import annotations

import warnings
from typing import Any

from api_fixtures import seed
from sqlalchemy import Engine, update

from trainyard.server.api.app import create_app
from trainyard.server.db import Job, JobState, make_session_factory

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient


def test_a_tenant_beyond_its_queued_jobs_limit_is_refused(engine: Engine) -> None:
    with make_session_factory(engine)() as session:
        tokens = seed(session)
    app = create_app(engine, max_queued=3)
    with TestClient(app, raise_server_exceptions=False) as client:

        def submit(user: str, queue: str) -> Any:
            spec = {"name": "q", "queue": queue, "command": ["true"]}
            headers = {"Authorization": f"Bearer {tokens[user]}"}
            return client.post("/v1/jobs", json=spec, headers=headers)

        ids = [submit("ada", "research").json()["id"] for _ in range(3)]
        refused = submit("ada", "research")
        assert refused.status_code == 429
        assert refused.json()["error"]["field"] == "queue"
        assert (
            "3 jobs queued, the most one tenant may have (3)" in refused.json()["error"]["message"]
        )
        assert submit("gus", "sales").status_code == 201  # another tenant
        with make_session_factory(engine)() as s:  # one job leaves PENDING
            s.execute(update(Job).where(Job.id == ids[0]).values(state=JobState.CANCELLED))
            s.commit()
        app.state.trainyard.admission._queued.clear()  # (the count is re-read every 2 s)
        assert submit("ada", "research").status_code == 201
