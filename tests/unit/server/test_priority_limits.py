"""Priority limits per queue (issue 14), through the API on both databases: a job asking for
more than the lowest `max_priority` of its queue and the queue's ancestors is refused (422 on
`priority`, naming the maximum and the queue that sets it), so a member cannot use a huge
priority to preempt another tenant; at or below the limit it is accepted."""

from __future__ import annotations

from typing import Any

from api_fixtures import ApiWorld, api
from sqlalchemy import update

from trainyard.server.db import Queue, make_session_factory
from trainyard.server.services import admin as svc

__all__ = ["api"]


def _set(api: ApiWorld, queue: str, top: int | None) -> None:
    with make_session_factory(api.engine)() as s:
        s.execute(update(Queue).where(Queue.name == queue).values(max_priority=top))
        s.commit()


def _submit(api: ApiWorld, priority: int, user: str = "ada") -> tuple[int, dict[str, Any]]:
    spec = {"name": "p", "queue": "research", "command": ["true"], "gpus": 1, "priority": priority}
    answer = api.client.post("/v1/jobs", json=spec, headers=api.auth(user))
    return answer.status_code, answer.json()


def test_a_priority_above_the_queues_limit_is_refused_naming_it(api: ApiWorld) -> None:
    _set(api, "research", 10)
    before = api.row_counts()
    status, body = _submit(api, 2147483647)
    assert status == 422
    assert body["error"]["field"] == "priority"
    assert "highest priority queue 'research' allows, 10" in body["error"]["message"]
    assert "--max-priority" in body["error"]["message"]
    assert api.row_counts() == before
    assert _submit(api, 10)[0] == 201
    assert _submit(api, -5)[0] == 201


def test_an_ancestors_lower_limit_applies_and_is_named(api: ApiWorld) -> None:
    _set(api, "research", 50)
    _set(api, "root", 3)
    status, body = _submit(api, 4, user="root")  # admins too: the operator sets the limits
    assert status == 422
    assert "allows, 3" in body["error"]["message"]
    assert "(set on 'root')" in body["error"]["message"]
    assert _submit(api, 3)[0] == 201


def test_no_limit_by_default_and_the_admin_service_sets_and_clears_it(api: ApiWorld) -> None:
    assert _submit(api, 1000)[0] == 201
    sessions = make_session_factory(api.engine)
    with svc.transaction(sessions) as s:
        info = svc.update_queue(s, "research", max_priority=0)
    assert info.max_priority == 0
    api.client.app.state.trainyard.queues._cache.clear()  # the cache lives a few seconds
    assert _submit(api, 1)[0] == 422
    with svc.transaction(sessions) as s:
        assert svc.update_queue(s, "research", max_priority=None).max_priority is None
    api.client.app.state.trainyard.queues._cache.clear()
    assert _submit(api, 1)[0] == 201
