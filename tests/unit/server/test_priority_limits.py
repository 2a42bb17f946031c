"""Priority limits per queue (issue 14), through the API on both databases: a job asking for
more than the lowest `max_priority` of its queue and the queue's ancestors is refused (422 on
`priority`, naming the maximum and the queue that sets it), so a member cannot use a huge
priority to preempt another tenant; at or below the limit it is accepted. A queue's default
priority (or its nearest ancestor's) applies to specs that name none."""

from __future__ import annotations

from typing import Any

import pytest
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


def test_a_queues_default_priority_applies_when_the_spec_names_none(api: ApiWorld) -> None:
    with make_session_factory(api.engine)() as s:
        s.execute(update(Queue).where(Queue.name == "root").values(default_priority=3))
        s.commit()
    spec = {"name": "d", "queue": "research", "command": ["true"], "gpus": 1}
    plain = api.client.post("/v1/jobs", json=spec, headers=api.auth("ada")).json()["id"]
    given = api.client.post(
        "/v1/jobs", json={**spec, "priority": 1}, headers=api.auth("ada")
    ).json()["id"]
    zero = api.client.post(
        "/v1/jobs", json={**spec, "priority": 0}, headers=api.auth("ada")
    ).json()["id"]

    def priority(job_id: str) -> int:
        detail = api.client.get(f"/v1/jobs/{job_id}", headers=api.auth("ada")).json()
        return int(detail["spec"]["priority"])

    assert (priority(plain), priority(given), priority(zero)) == (3, 1, 0)  # inherited
    queues = api.client.get("/v1/queues", headers=api.auth("ada")).json()["queues"]
    assert {q["name"]: q["default_priority"] for q in queues}["root"] == 3


def test_the_admin_service_checks_default_against_max(api: ApiWorld) -> None:
    sessions = make_session_factory(api.engine)
    with (
        pytest.raises(svc.AdminError, match="above the queue's max priority"),
        svc.transaction(sessions) as s,
    ):
        svc.update_queue(s, "research", max_priority=2, default_priority=5)
    with svc.transaction(sessions) as s:
        info = svc.update_queue(s, "research", max_priority=5, default_priority=2)
    assert (info.max_priority, info.default_priority) == (5, 2)


def test_a_job_that_may_not_be_preempted_must_fit_its_queues_guarantee(api: ApiWorld) -> None:
    # Outside review 12 (F8): such a job was accepted into a queue guaranteeing nothing, to
    # wait for ever ("non-preemptible jobs must fit in the guaranteed quota"). Its path's
    # smallest guarantee is what it can ever run within (research: 8 under `root`, 0).
    def submit(**fields: Any) -> tuple[int, dict[str, Any]]:
        spec = {"name": "p", "queue": "research", "command": ["true"], "preemptible": False,
                **fields}  # fmt: skip
        answer = api.client.post("/v1/jobs", json=spec, headers=api.auth("ada"))
        return answer.status_code, answer.json()

    status, body = submit(gpus=2)
    assert status == 422 and body["error"]["field"] == "preemptible", body
    assert "queue root guarantees 0 GPUs; the job asks 2" in body["error"]["message"]
    assert submit(gpus=2, wait_for_capacity=True)[0] == 201
    assert submit(gpus=0)[0] == 201  # no GPU: nothing to guarantee
    assert submit(gpus=2, preemptible=True)[0] == 201
    with make_session_factory(api.engine)() as s:  # the root guarantees 16: research's binds
        s.execute(update(Queue).where(Queue.name == "root").values(guaranteed=16))
        s.execute(update(Queue).where(Queue.name == "research").values(guaranteed=2))
        s.commit()
    api.client.app.state.trainyard.queues._cache.clear()  # type: ignore[attr-defined]
    assert submit(gpus=2)[0] == 201
    status, body = submit(gpus=3)
    assert status == 422 and "queue research guarantees 2 GPUs" in body["error"]["message"]
