"""Idempotent submit (issue 14), through the API on both databases: the same `Idempotency-Key`
and body give the same job (one row, `Idempotent-Replayed: true`), concurrent retries too; the
key with another body is refused naming the header; keys are per user."""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx
from api_fixtures import ApiWorld, api

__all__ = ["api"]
SPEC: dict[str, Any] = {"name": "t", "queue": "research", "command": ["python", "x.py"]}


def _post(api: ApiWorld, key: str | None, user: str = "ada", **fields: Any) -> httpx.Response:
    headers = {**api.auth(user), "Content-Type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key
    return api.client.post("/v1/jobs", content=json.dumps({**SPEC, **fields}), headers=headers)


def test_a_retry_with_the_same_key_gets_the_same_job(api: ApiWorld) -> None:
    first = _post(api, "retry-1")
    assert first.status_code == 201 and "Idempotent-Replayed" not in first.headers
    counts = api.row_counts()
    again = _post(api, "retry-1")
    assert again.status_code == 201
    assert again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert api.row_counts() == counts
    assert _post(api, "retry-2").json()["id"] != first.json()["id"]  # a new key: a new job
    assert _post(api, None).status_code == 201 and _post(api, None).status_code == 201


def test_the_key_with_another_body_is_refused_and_keys_are_per_user(api: ApiWorld) -> None:
    job = _post(api, "k").json()["id"]
    other = _post(api, "k", name="different")
    assert other.status_code == 422
    assert other.json()["error"]["field"] == "Idempotency-Key"
    assert job in other.json()["error"]["message"]
    mine = _post(api, "k", user="gus", queue="sales")  # another user's key space
    assert mine.status_code == 201 and mine.json()["id"] != job


def test_a_bad_key_is_refused_naming_the_header(api: ApiWorld) -> None:
    for key in ("", "has space", "x" * 256, "caf\u00e9"):
        try:
            answer = _post(api, key)
        except UnicodeEncodeError:
            continue  # httpx refuses non-ASCII header values itself
        assert answer.status_code == 422, key
        assert answer.json()["error"]["field"] == "Idempotency-Key", answer.text


def test_concurrent_retries_store_one_job(api: ApiWorld) -> None:
    answers: list[httpx.Response] = []
    lock = threading.Lock()

    def go() -> None:
        answer = _post(api, "race")
        with lock:
            answers.append(answer)

    threads = [threading.Thread(target=go) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [a.status_code for a in answers] == [201] * 6, [a.text for a in answers]
    assert len({a.json()["id"] for a in answers}) == 1
