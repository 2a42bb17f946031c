"""The REST API on SQLite and PostgreSQL: happy path, auth, tenancy, bad input, operations."""

from __future__ import annotations

import pytest
from api_fixtures import NOW, ApiWorld, api
from sqlalchemy import select

from trainyard.server.db import ApiToken, Job, JobState, Tenant, User, make_session_factory
from trainyard.server.db.base import Role
from trainyard.server.db.tokens import issue_token, revoke_token
from trainyard.server.metrics import PLATFORM

__all__ = ["api"]  # the fixture, imported for pytest

SPEC: dict[str, object] = {
    "name": "mnist-ddp",
    "queue": "research",
    "command": ["python", "train.py"],
    "gpus": 2,
}
YAML_SPEC = "name: yaml-job\nqueue: research\ncommand: [python, train.py]\nworkers: 2\ngpus: 2\n"


def _submit(api: ApiWorld, user: str = "ada", spec: dict[str, object] | None = None) -> str:
    answer = api.client.post("/v1/jobs", json=spec or SPEC, headers=api.auth(user))
    assert answer.status_code == 201, answer.text
    assert answer.json()["state"] == "PENDING"
    job_id: str = answer.json()["id"]
    return job_id


def test_submit_list_describe_cancel(api: ApiWorld) -> None:
    job_id = _submit(api)
    yaml = api.client.post(
        "/v1/jobs",
        content=YAML_SPEC,
        headers={**api.auth("ada"), "Content-Type": "application/yaml"},
    )
    assert yaml.status_code == 201, yaml.text

    listed = api.client.get("/v1/jobs", headers=api.auth("vic")).json()["jobs"]
    assert {j["name"] for j in listed} == {"mnist-ddp", "yaml-job"}
    pending = api.client.get("/v1/jobs?state=PENDING", headers=api.auth("ada")).json()["jobs"]
    assert len(pending) == 2

    detail = api.client.get(f"/v1/jobs/{job_id}", headers=api.auth("vic")).json()
    assert detail["state"] == "PENDING" and detail["queue"] == "research"
    assert detail["gpus"] == 2 and detail["user"] == "ada" and detail["placement"] is None
    assert "pending_reason" in detail and "estimated_start" in detail
    assert [e["to_state"] for e in detail["events"]] == ["PENDING"]

    cancelled = api.client.post(f"/v1/jobs/{job_id}/cancel", headers=api.auth("ada"))
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "CANCELLED"
    detail = api.client.get(f"/v1/jobs/{job_id}", headers=api.auth("ada")).json()
    assert [e["to_state"] for e in detail["events"]] == ["PENDING", "CANCELLED"]
    assert detail["events"][1]["reason"] == "cancelled by ada"
    again = api.client.post(f"/v1/jobs/{job_id}/cancel", headers=api.auth("ada"))
    assert again.status_code == 409 and again.json()["error"]["field"] == "state"

    listed = api.client.get("/v1/jobs?state=CANCELLED", headers=api.auth("ada")).json()["jobs"]
    assert [j["id"] for j in listed] == [job_id]
    bad_state = api.client.get("/v1/jobs?state=NAPPING", headers=api.auth("ada"))
    assert bad_state.status_code == 422 and bad_state.json()["error"]["field"] == "state"


def test_an_elastic_job_shows_its_range(api: ApiWorld) -> None:
    spec = {**SPEC, "workers": 2, "elastic": {"min_gpus": 1, "max_gpus": 4, "batch_size": 64}}
    job_id = _submit(api, spec=spec)
    detail = api.client.get(f"/v1/jobs/{job_id}", headers=api.auth("ada")).json()
    assert (detail["gpus"], detail["min_gpus"], detail["max_gpus"]) == (2, 1, 4)
    assert detail["spec"]["elastic"]["batch_size"] == 64
    (listed,) = api.client.get("/v1/jobs", headers=api.auth("ada")).json()["jobs"]
    assert (listed["min_gpus"], listed["max_gpus"]) == (1, 4)
    rigid = api.client.get(f"/v1/jobs/{_submit(api)}", headers=api.auth("ada")).json()
    assert rigid["min_gpus"] is None and rigid["max_gpus"] is None


def test_queues_and_nodes(api: ApiWorld) -> None:
    _submit(api)
    queues = api.client.get("/v1/queues", headers=api.auth("ada")).json()["queues"]
    by_name = {q["name"]: q for q in queues}
    assert set(by_name) == {"root", "research"}  # not globex's queue
    assert by_name["research"]["pending"] == 1 and by_name["research"]["parent"] == "root"
    nodes = api.client.get("/v1/nodes", headers=api.auth("vic")).json()["nodes"]
    assert nodes[0]["name"] == "n0" and nodes[0]["virtual"] is True
    assert [d["index"] for d in nodes[0]["devices"]] == [0, 1, 2, 3]
    assert not any(d["busy"] for d in nodes[0]["devices"])
    # a job of another tenant holding two GPUs: busy for everybody (not whose; review 12, F6)
    other = _submit(api, user="gus", spec={**SPEC, "queue": "sales"})
    with make_session_factory(api.engine)() as s:
        job = s.get(Job, other)
        assert job is not None
        job.state, job.placement = JobState.RUNNING, [{"node": "n0", "devices": [1, 3]}]
        s.commit()
    nodes = api.client.get("/v1/nodes", headers=api.auth("vic")).json()["nodes"]
    assert [d["busy"] for d in nodes[0]["devices"]] == [False, True, False, True]
    # GPUs held against each queue's guarantee: its own jobs and its descendants' (review 14)
    queues = api.client.get("/v1/queues", headers=api.auth("ada")).json()["queues"]
    held = {q["name"]: (q["gpus_held"], q["gpus_in_use"]) for q in queues}
    assert held == {"root": (2, 0), "research": (0, 0)}
    queues = api.client.get("/v1/queues", headers=api.auth("gus")).json()["queues"]
    assert {q["name"]: q["gpus_held"] for q in queues}["sales"] == 2


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer nonsense"},
        {"Authorization": "Bearer ty_0123456789ab_wrongsecret"},
        {"Authorization": "Basic YWRhOnB3"},
    ],
)
def test_unauthenticated_401(api: ApiWorld, headers: dict[str, str]) -> None:
    before = api.row_counts()
    for method, path in [("GET", "/v1/jobs"), ("POST", "/v1/jobs"), ("GET", "/v1/queues")]:
        answer = api.client.request(method, path, json=SPEC, headers=headers)
        assert answer.status_code == 401, (path, answer.text)
        assert answer.json()["error"]["message"]
        assert answer.headers["www-authenticate"] == "Bearer"
    assert api.row_counts() == before


def test_tenant_isolation_404(api: ApiWorld) -> None:
    job_id = _submit(api)
    before = api.row_counts()
    assert api.client.get("/v1/jobs", headers=api.auth("gus")).json()["jobs"] == []
    for answer in (
        api.client.get(f"/v1/jobs/{job_id}", headers=api.auth("gus")),
        api.client.post(f"/v1/jobs/{job_id}/cancel", headers=api.auth("gus")),
        api.client.get("/v1/jobs/j-doesnotexist", headers=api.auth("gus")),
        api.client.get("/v1/jobs/bad%00id", headers=api.auth("ada")),
        api.client.get(f"/v1/jobs/{'x' * 100}", headers=api.auth("ada")),
    ):
        assert answer.status_code == 404, answer.text
        assert "not found" in answer.json()["error"]["message"]
    # globex cannot submit into acme's queue: it does not exist for them
    spec = {**SPEC, "queue": "research"}
    answer = api.client.post("/v1/jobs", json=spec, headers=api.auth("gus"))
    assert answer.status_code == 422 and answer.json()["error"]["field"] == "queue"
    assert api.row_counts() == before


def test_viewer_cannot_write(api: ApiWorld) -> None:
    job_id = _submit(api)
    before = api.row_counts()
    answer = api.client.post("/v1/jobs", json=SPEC, headers=api.auth("vic"))
    assert answer.status_code == 403 and "viewer" in answer.json()["error"]["message"]
    answer = api.client.post(f"/v1/jobs/{job_id}/cancel", headers=api.auth("vic"))
    assert answer.status_code == 403
    assert api.row_counts() == before
    admin = api.client.post(f"/v1/jobs/{job_id}/cancel", headers=api.auth("root"))
    assert admin.status_code == 200 and admin.json()["state"] == "CANCELLED"


BAD_INPUT: list[tuple[str, object, str | None, int, str]] = [
    ("malformed yaml", "name: x\ncommand: [a, b\n", "application/yaml", 422, ""),
    ("unknown field", {**SPEC, "gpuz": 2}, None, 422, "gpuz"),
    ("negative gpus", {**SPEC, "gpus": -2}, None, 422, "gpus"),
    ("nested negative", {**SPEC, "gpus": None, "resources": {"gpus": -1}}, None, 422,
     "resources.gpus"),
    ("unknown queue", {**SPEC, "queue": "nope"}, None, 422, "queue"),
    ("too many gpus", {**SPEC, "gpus": 128}, None, 422, "gpus"),
    ("oversized", {**SPEC, "env": {"BIG": "x" * 1_100_000}}, None, 413, ""),
    ("not json", "{not json", "application/json", 400, ""),
    ("json list", "[1, 2]", "application/json", 422, ""),
    ("empty yaml", "", "application/yaml", 422, ""),
    ("bad name", {**SPEC, "name": "Bad Name!"}, None, 422, "name"),
    ("missing command", {"name": "x", "queue": "research"}, None, 422, "command"),
    ("bad utf8", b"\xff\xfe name: x", "application/yaml", 422, ""),
    ("elastic without max", {**SPEC, "elastic": {"min_gpus": 1}}, None, 422,
     "elastic.max_gpus"),
    ("elastic range inverted", {**SPEC, "elastic": {"min_gpus": 4, "max_gpus": 2}}, None, 422,
     "elastic.min_gpus"),
    ("elastic too big", {**SPEC, "elastic": {"max_gpus": 128}}, None, 422, "elastic.max_gpus"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("body", "content_type", "status", "field"),
    [case[1:] for case in BAD_INPUT],
    ids=[case[0] for case in BAD_INPUT],
)
def test_bad_input_4xx_names_field_db_unchanged(
    api: ApiWorld, body: object, content_type: str | None, status: int, field: str
) -> None:
    before = api.row_counts()
    rejected = PLATFORM.submissions.value(outcome="rejected")
    headers = api.auth("ada")
    if content_type is None:
        answer = api.client.post("/v1/jobs", json=body, headers=headers)
    else:
        content = body if isinstance(body, bytes) else str(body)
        headers["Content-Type"] = content_type
        answer = api.client.post("/v1/jobs", content=content, headers=headers)
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["field"] == field and error["message"], error
    assert "Traceback" not in answer.text
    assert api.row_counts() == before
    assert PLATFORM.submissions.value(outcome="rejected") == rejected + 1


def test_malformed_yaml_gives_line(api: ApiWorld) -> None:
    headers = {**api.auth("ada"), "Content-Type": "application/yaml"}
    answer = api.client.post("/v1/jobs", content="name: x\ncommand: [a, b\n", headers=headers)
    assert answer.status_code == 422
    assert answer.json()["error"]["line"] >= 2


def test_metrics_health_openapi(api: ApiWorld) -> None:
    accepted = PLATFORM.submissions.value(outcome="accepted")
    _submit(api)
    assert PLATFORM.submissions.value(outcome="accepted") == accepted + 1
    # every tenant's usage is in it: the platform's operator only (found by an outside
    # review: it was open to anyone, a job of another tenant included)
    assert api.client.get("/metrics").status_code == 401
    for user in ("root", "ada"):  # acme's admin, a member
        assert api.client.get("/metrics", headers=api.auth(user)).status_code == 403
    with make_session_factory(api.engine)() as s:
        home = Tenant(name="default", created_at=NOW)
        operator = User(tenant=home, name="admin", role=Role.ADMIN, created_at=NOW)
        s.add_all([home, operator])
        s.flush()
        _, token = issue_token(s, operator, now=NOW)
        s.commit()
    metrics = api.client.get("/metrics", headers={"Authorization": f"Bearer {token}"})
    assert metrics.status_code == 200
    assert metrics.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert "# TYPE trainyard_job_submissions_total counter" in metrics.text
    assert 'trainyard_jobs{state="PENDING"} 1' in metrics.text
    assert api.client.get("/healthz").json() == {"status": "ok", "database": "ok"}
    schema = api.client.get("/openapi.json").json()
    for path in ("/v1/jobs", "/v1/jobs/{job_id}", "/v1/jobs/{job_id}/cancel", "/v1/queues",
                 "/v1/nodes", "/metrics", "/healthz"):  # fmt: skip
        assert path in schema["paths"], path
    assert "application/yaml" in schema["paths"]["/v1/jobs"]["post"]["requestBody"]["content"]
    assert api.client.get("/docs").status_code == 200
    # a query string cannot carry null: optional query parameters are stated as text only
    listing = {p["name"]: p["schema"] for p in schema["paths"]["/v1/jobs"]["get"]["parameters"]}
    assert listing["user"]["type"] == "string" and "anyOf" not in listing["user"]
    assert listing["user"]["description"] == "only this user's"
    assert listing["state"]["type"] == "array" and listing["since"]["type"] == "number"
    assert all(
        "null" not in repr(p["schema"])
        for operations in schema["paths"].values()
        for operation in operations.values()
        for p in operation.get("parameters", [])
        if p["in"] == "query"
    )
    # the null of a request body's optional field stays: JSON can carry it
    assert '"null"' in repr(schema["components"]) or "'null'" in repr(schema["components"])


def test_whoami_and_revoked_token(api: ApiWorld) -> None:
    me = api.client.get("/v1/whoami", headers=api.auth("root")).json()
    assert me == {"user": "root", "tenant": "acme", "role": "admin"}
    unknown = api.client.get("/v1/nope", headers=api.auth("ada"))
    assert unknown.status_code == 404 and unknown.json()["error"]["field"] is None
    assert api.client.get("/v1/jobs", headers=api.auth("ada")).status_code == 200
    with make_session_factory(api.engine)() as session:
        row = session.scalars(select(ApiToken).join(User).where(User.name == "ada")).one()
        assert row.last_used_at is not None  # verify_token recorded the use
        revoke_token(session, row, now=NOW)
        session.commit()
    # revoked behind the server's back: honoured once the token cache's TTL has passed
    api.client.app.state.trainyard.tokens.clear()
    answer = api.client.get("/v1/jobs", headers=api.auth("ada"))
    assert answer.status_code == 401


def test_unknown_query_parameters_are_refused(api: ApiWorld) -> None:
    # a typo would otherwise be ignored silently: `?stat=RUNNING` listing every job
    answer = api.client.get("/v1/jobs?stat=RUNNING", headers=api.auth("ada"))
    assert answer.status_code == 422
    assert answer.json()["error"]["field"] == "stat"
    takes = "takes: array, limit, offset, queue, since, sort, state, user"
    assert takes in answer.json()["error"]["message"]
    assert api.client.get("/v1/jobs?state=RUNNING", headers=api.auth("ada")).status_code == 200
    assert api.client.get("/v1/queues?x=1", headers=api.auth("ada")).status_code == 422
    # a single-valued parameter given twice would keep the last value silently
    twice = api.client.get("/v1/jobs?queue=research&queue=sales", headers=api.auth("ada"))
    assert twice.status_code == 422 and twice.json()["error"]["field"] == "queue"
    assert "given 2 times" in twice.json()["error"]["message"]
    many = api.client.get("/v1/jobs?state=RUNNING&state=PENDING", headers=api.auth("ada"))
    assert many.status_code == 200  # a list parameter may repeat


@pytest.mark.parametrize("name", ["queue", "user", "array"])
def test_an_empty_list_filter_is_refused_naming_it(api: ApiWorld, name: str) -> None:
    """Found by the fuzzing: `array=` (a list schemathesis sent, as the query string carries
    it) named the array '' and answered no jobs; an empty filter names nothing."""
    answer = api.client.get(f"/v1/jobs?{name}=", headers=api.auth("ada"))
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == name
    assert api.client.get("/v1/jobs", headers=api.auth("ada")).status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("POST", "/v1/tokens", {"name": "\x00"}, "name"),
        ("POST", "/v1/tokens", {"name": "a\nb"}, "name"),
        ("GET", "/v1/jobs?queue=%00", None, "queue"),
        ("GET", "/v1/jobs?user=a%00b", None, "user"),
        ("GET", "/v1/jobs?array=%00", None, "array"),
    ],
    ids=["token-name-nul", "token-name-newline", "queue-nul", "user-nul", "array-nul"],
)
def test_control_characters_in_free_text_are_refused_naming_the_field(
    api: ApiWorld, method: str, path: str, body: object, field: str
) -> None:
    # PostgreSQL refuses NUL in text: this was a 500 (a DataError) before, found by the fuzzer
    before = api.row_counts()
    answer = api.client.request(method, path, json=body, headers=api.auth("ada"))
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["field"] == field
    assert "control characters" in error["message"]
    assert api.row_counts() == before
    for path_id in ("/v1/jobs/a%00b", "/v1/arrays/a%00b/cancel", "/v1/tokens/a%00b"):
        method = "GET" if path_id.startswith("/v1/jobs") else "POST"
        if path_id.startswith("/v1/tokens"):
            method = "DELETE"
        assert api.client.request(method, path_id, headers=api.auth("ada")).status_code == 404
