"""The token cache and token verification on SQLite and PostgreSQL: cached principals are
reused, job-scoped tokens are never cached and live only while their job runs, expiry and
revocation (also through `DELETE /v1/tokens/{id}`) take effect at once, `last_used_at` is
written coarsely."""

from __future__ import annotations

import threading

import pytest
from api_fixtures import ApiWorld, api
from server_factories import World
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from trainyard.server.api.auth import Principal, TokenCache, authenticate
from trainyard.server.api.errors import ApiError
from trainyard.server.db import ApiToken, Job, JobState, Role, User, make_session_factory
from trainyard.server.db.tokens import (
    LAST_USED_RESOLUTION_S,
    issue_token,
    revoke_token,
    verify_token,
)
from trainyard.server.lifecycle import transition

__all__ = ["api"]  # the fixture, imported for pytest

S = JobState
WHO = Principal(user_id=1, user_name="ada", tenant_id=1, tenant_name="acme", role=Role.MEMBER)


def _bearer(token: str) -> str:
    return f"Bearer {token}"


def _status(call: object) -> int:
    assert callable(call)
    try:
        call()
    except ApiError as error:
        return error.status
    return 200


def test_cache_keeps_user_principals_until_their_ttl() -> None:
    cache = TokenCache(ttl_s=3600.0)
    assert cache.get("ty_x") is None
    cache.put("ty_x", WHO, expires_at=None, now=10.0)
    assert cache.get("ty_x") is WHO
    assert cache.get("ty_y") is None
    cache.clear()
    assert cache.get("ty_x") is None
    short = TokenCache(ttl_s=0.05)
    short.put("ty_x", WHO, expires_at=None, now=10.0)
    threading.Event().wait(0.2)
    assert short.get("ty_x") is None


def test_cache_never_keeps_job_tokens_or_expired_ones() -> None:
    cache = TokenCache(ttl_s=3600.0)
    job_scoped = Principal(1, "ada", 1, "acme", Role.MEMBER, job_id="j123")
    cache.put("ty_job", job_scoped, expires_at=None, now=10.0)
    assert cache.get("ty_job") is None
    cache.put("ty_old", WHO, expires_at=10.0, now=10.0)  # expires this very moment
    assert cache.get("ty_old") is None
    cache.put("ty_soon", WHO, expires_at=10.05, now=10.0)  # cached only until it expires
    assert cache.get("ty_soon") is WHO
    threading.Event().wait(0.2)
    assert cache.get("ty_soon") is None


def test_cache_past_a_token_expiry_by_the_callers_clock() -> None:
    cache = TokenCache(ttl_s=3600.0)
    cache.put("ty_soon", WHO, expires_at=20.0, now=10.0)
    assert cache.get("ty_soon", now=19.0) is WHO
    assert cache.get("ty_soon", now=20.0) is None


def test_cache_is_bounded() -> None:
    cache = TokenCache(ttl_s=3600.0, max_entries=3)
    for i in range(3):
        cache.put(f"ty_{i}", WHO, expires_at=None, now=1.0)
    assert all(cache.get(f"ty_{i}") is WHO for i in range(3))
    cache.put("ty_new", WHO, expires_at=None, now=1.0)
    assert cache.get("ty_new") is WHO
    assert sum(cache.get(f"ty_{i}") is not None for i in range(3)) < 3


def test_authenticate_reuses_the_cached_principal(session: Session, world: World) -> None:
    row, token = issue_token(session, world.user, now=10.0)
    session.commit()
    cache = TokenCache(ttl_s=3600.0)
    who = authenticate(session, _bearer(token), now=11.0, cache=cache)
    assert (who.user_name, who.tenant_name, who.role, who.job_id) == ("ada", "acme", Role.MEMBER,
                                                                       None)  # fmt: skip
    session.commit()
    revoke_token(session, row, now=12.0)  # behind the cache's back (as `trainyard admin` does)
    session.commit()
    assert authenticate(session, _bearer(token), now=13.0, cache=cache) == who  # from the cache
    assert _status(lambda: authenticate(session, _bearer(token), now=13.0)) == 401
    cache.clear()
    assert _status(lambda: authenticate(session, _bearer(token), now=13.0, cache=cache)) == 401


def test_authenticate_does_not_serve_an_expired_token_from_the_cache(
    session: Session, world: World
) -> None:
    _, token = issue_token(session, world.user, now=10.0, expires_at=15.0)
    session.commit()
    cache = TokenCache(ttl_s=3600.0)
    assert authenticate(session, _bearer(token), now=11.0, cache=cache).user_name == "ada"
    assert authenticate(session, _bearer(token), now=14.9, cache=cache).user_name == "ada"
    assert _status(lambda: authenticate(session, _bearer(token), now=15.0, cache=cache)) == 401


def _job_token(session: Session, world: World, state: S) -> tuple[str, str]:
    job = world.job(session)
    job.placement = [{"node": "n0", "devices": [0]}]
    transition(session, job, S.STARTING, reason="scheduled", now=1001.0)
    if state is S.RUNNING:
        transition(session, job, S.RUNNING, reason="started", now=1002.0)
    _, token = issue_token(session, world.user, now=1002.0, job_id=job.id)
    session.commit()
    return job.id, token


def test_job_scoped_tokens_are_never_cached(session: Session, world: World) -> None:
    job_id, token = _job_token(session, world, S.RUNNING)
    cache = TokenCache(ttl_s=3600.0)
    who = authenticate(session, _bearer(token), now=1003.0, cache=cache)
    assert who.job_id == job_id
    assert cache.get(token) is None
    session.commit()
    job = session.get(Job, job_id)
    assert job is not None
    transition(session, job, S.SUCCEEDED, reason="done", now=1004.0, details={"exit_code": 0})
    session.commit()
    assert _status(lambda: authenticate(session, _bearer(token), now=1005.0, cache=cache)) == 401


@pytest.mark.parametrize("state", list(S))
def test_a_job_token_verifies_only_while_its_job_starts_or_runs(
    session: Session, world: World, state: S
) -> None:
    job = world.job(session)
    _, token = issue_token(session, world.user, now=1000.0, job_id=job.id)
    job.state = state  # put there directly: only the state matters to verification
    session.commit()
    found = verify_token(session, token, now=1001.0)
    if state in (S.STARTING, S.RUNNING):
        assert found is not None and found.job_id == job.id
    else:
        assert found is None


def test_last_used_is_written_at_most_once_per_resolution(
    engine: Engine, session: Session, world: World
) -> None:
    row, token = issue_token(session, world.user, now=0.0)
    session.commit()
    factory = make_session_factory(engine)
    step = LAST_USED_RESOLUTION_S / 4

    def use(now: float) -> float | None:
        with factory() as s:
            assert verify_token(s, token, now=now) is not None
            s.commit()
            return s.scalars(select(ApiToken.last_used_at).where(ApiToken.id == row.id)).one()

    assert use(100.0) == 100.0
    assert use(100.0 + step) == 100.0
    assert use(100.0 + LAST_USED_RESOLUTION_S - 0.001) == 100.0
    assert use(100.0 + LAST_USED_RESOLUTION_S) == 100.0 + LAST_USED_RESOLUTION_S
    with factory() as s:
        stored = s.scalars(select(ApiToken.last_used_at)).all()
    assert stored == [100.0 + LAST_USED_RESOLUTION_S]


def test_revoking_through_the_api_takes_effect_at_once(api: ApiWorld) -> None:
    created = api.client.post("/v1/tokens", json={"name": "laptop"}, headers=api.auth("ada"))
    assert created.status_code == 201, created.text
    token, token_id = created.json()["token"], created.json()["token_id"]
    mine = {"Authorization": f"Bearer {token}"}
    for _ in range(3):  # verified once, then served from the cache
        assert api.client.get("/v1/whoami", headers=mine).json()["user"] == "ada"
    spec = {"name": "a", "queue": "research", "command": ["x"], "gpus": 1}
    assert api.client.post("/v1/jobs", json=spec, headers=mine).status_code == 201
    revoked = api.client.delete(f"/v1/tokens/{token_id}", headers=api.auth("root"))
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    assert api.client.get("/v1/whoami", headers=mine).status_code == 401
    assert api.client.post("/v1/jobs", json=spec, headers=mine).status_code == 401
    assert api.client.get("/v1/whoami", headers=api.auth("ada")).status_code == 200


def test_an_expiring_token_stops_working_at_its_expiry_through_the_api(api: ApiWorld) -> None:
    # The fixture's clock advances one second per request; the token lives three of them.
    created = api.client.post("/v1/tokens", json={"expires_in_s": 3}, headers=api.auth("ada"))
    assert created.status_code == 201, created.text
    expires_at = created.json()["expires_at"]
    mine = {"Authorization": f"Bearer {created.json()['token']}"}
    answers = [api.client.get("/v1/whoami", headers=mine).status_code for _ in range(5)]
    assert answers[:2] == [200, 200]  # requests at expires_at - 2 and - 1
    assert answers[2:] == [401, 401, 401], (expires_at, answers)


def test_a_disabled_user_is_refused_once_the_cache_is_cleared(api: ApiWorld) -> None:
    assert api.client.get("/v1/whoami", headers=api.auth("gus")).status_code == 200
    with make_session_factory(api.engine)() as s:
        gus = s.scalars(select(User).where(User.name == "gus")).one()
        gus.disabled = True
        s.commit()
    api.client.app.state.trainyard.tokens.clear()  # type: ignore[attr-defined]
    assert api.client.get("/v1/whoami", headers=api.auth("gus")).status_code == 401
