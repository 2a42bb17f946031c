"""Admission against the cluster (issue 14), through the API on both databases: a spec that
no set of today's nodes could run is refused at submit with the field and the fix (unless it
says `wait_for_capacity: true`), as is a topology level the cluster lacks and a working
directory inside the server's state or outside its work roots. The `api` world has one node
of 4 H100 (80 GB), 64 CPUs and 512 GB."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
from api_fixtures import ApiWorld, api, seed
from sqlalchemy import Engine

from trainyard.server.api.app import create_app
from trainyard.server.db import make_session_factory

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

__all__ = ["api"]
SPEC: dict[str, Any] = {"name": "t", "queue": "research", "command": ["python", "x.py"]}


def _submit(api: ApiWorld, **fields: Any) -> tuple[int, dict[str, Any]]:
    answer = api.client.post("/v1/jobs", json={**SPEC, **fields}, headers=api.auth("ada"))
    return answer.status_code, answer.json()


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"gpus": 8}, "gpus", "8 GPUs asked, and the cluster has 4"),
        ({"gpus": 1, "gpu_type": "A100"}, "gpu_type", "no node has GPUs of type 'A100'"),
        ({"gpus": 1, "gpu_memory_gb": 141}, "gpu_memory_gb", "141 GB of memory"),
        ({"gpus": 1, "cpus": 65}, "cpus", "65 cpus per node asked, and the largest node has 64"),
        ({"gpus": 1, "memory_gb": 600}, "memory_gb", "the largest node has 512"),
        ({"gpus": 1, "topology": "galaxy"}, "topology", "no topology level 'galaxy'"),
        (
            {"gpus": 2, "nodes": 2},
            "nodes",
            "2 nodes with 1 GPU each asked, and the cluster has 1 such node",
        ),  # issue 11 item 5: nodes are distinct machines
        (
            {"gpus": 8, "workers": 8, "elastic": {"min_gpus": 6, "max_gpus": 8}},
            "elastic.min_gpus",
            "6 GPUs asked",
        ),
    ],
)
def test_a_spec_no_node_set_can_run_is_refused_naming_the_field(
    api: ApiWorld, fields: dict[str, Any], field: str, words: str
) -> None:
    before = api.row_counts()
    status, body = _submit(api, **fields)
    assert status == 422, body
    assert body["error"]["field"] == field
    assert words in body["error"]["message"]
    if field != "topology":
        assert "wait_for_capacity: true" in body["error"]["message"]
    assert api.row_counts() == before


def test_wait_for_capacity_accepts_a_job_for_nodes_that_may_join(api: ApiWorld) -> None:
    status, body = _submit(api, gpus=8, gpu_type="A100", wait_for_capacity=True)
    assert status == 201, body
    detail = api.client.get(f"/v1/jobs/{body['id']}", headers=api.auth("ada")).json()
    assert detail["spec"]["wait_for_capacity"] is True
    status, body = _submit(api, gpus=1, topology="galaxy", wait_for_capacity=True)
    assert status == 422 and body["error"]["field"] == "topology"  # never placeable


def test_what_fits_is_accepted(api: ApiWorld) -> None:
    for fields in ({"gpus": 4, "gpu_type": "h100"}, {"gpus": 2, "topology": "node"},
                   {"gpus": 0, "cpus": 64}, {"gpus": 4, "elastic": {"max_gpus": 16}}):  # fmt: skip
        status, body = _submit(api, **fields)
        assert status == 201, (fields, body)


def test_working_dir_is_confined(engine: Engine, tmp_path: Path) -> None:
    home, root = tmp_path / "home", tmp_path / "work"
    (home / "runs").mkdir(parents=True)
    (root / "project").mkdir(parents=True)
    (root / "escape").symlink_to(home)
    with make_session_factory(engine)() as session:
        tokens = seed(session)
    app = create_app(engine, work_roots=(root,), private=(home,))
    with TestClient(app, raise_server_exceptions=False) as client:
        headers = {"Authorization": f"Bearer {tokens['ada']}"}

        def submit(where: str) -> tuple[int, dict[str, Any]]:
            answer = client.post("/v1/jobs", json={**SPEC, "working_dir": where}, headers=headers)
            return answer.status_code, answer.json()

        assert submit(str(root / "project"))[0] == 201
        for where, words in (
            (str(home / "runs"), "inside the server's state directory"),
            (str(root / "escape"), "inside the server's state directory"),  # via a symlink
            (str(tmp_path), "outside the server's work roots"),
            ("relative/dir", "is relative"),
        ):
            status, body = submit(where)
            assert status == 422, (where, body)
            assert body["error"]["field"] == "working_dir"
            assert words in body["error"]["message"], body


def test_a_working_dir_missing_on_this_machine_is_refused_at_submit(
    engine: Engine, tmp_path: Path
) -> None:
    """Outside review 7: `submit --workdir /nonexistent` was accepted, then failed at launch
    on every restart. With the local executor (`dirs_here`) the directory must exist at
    submit, unless the job waits for others, which may make it; with Ray (ranks on other
    machines) it is not looked for here."""
    with make_session_factory(engine)() as session:
        tokens = seed(session)
    missing = str(tmp_path / "nowhere")
    headers = {"Authorization": f"Bearer {tokens['ada']}"}
    for here, expected in ((True, 422), (False, 201)):
        with TestClient(create_app(engine, dirs_here=here), raise_server_exceptions=False) as c:
            answer = c.post("/v1/jobs", json={**SPEC, "working_dir": missing}, headers=headers)
            assert answer.status_code == expected, answer.text
            if expected == 422:
                error = answer.json()["error"]
                assert error["field"] == "working_dir" and "not a directory" in error["message"]
                first = c.post("/v1/jobs", json=SPEC, headers=headers).json()["id"]
                later = {**SPEC, "working_dir": missing, "after": [first]}
                answer = c.post("/v1/jobs", json=later, headers=headers)
                assert answer.status_code == 201, answer.text  # its dependency may make it


def test_a_working_dir_closed_to_the_jobs_own_users_is_refused_at_submit(
    engine: Engine, tmp_path: Path
) -> None:
    """Outside review 12 (F4): with jobs running as uids of their own, a working directory
    under a 0700 directory (a home, say) passed the submit check, made as the server, and
    the job failed at start with exit 127, retried with back-off. Submit now names the
    directory that shuts them out and how to open it."""
    with make_session_factory(engine)() as session:
        tokens = seed(session)
    shut, open_ = tmp_path / "private", tmp_path / "shared"
    (shut / "project").mkdir(parents=True)
    (open_ / "project").mkdir(parents=True)
    tmp_path.chmod(0o755)
    shut.chmod(0o700)
    open_.chmod(0o755)
    (open_ / "project").chmod(0o755)
    headers = {"Authorization": f"Bearer {tokens['ada']}"}
    app = create_app(engine, dirs_here=True, others_enter=True)
    parents_open = all(p.stat().st_mode & 0o001 for p in tmp_path.parents)
    target = shut / "project"  # the first directory on its path others may not pass
    closed = next(p for p in (*reversed(target.parents), target) if not p.stat().st_mode & 1)
    with TestClient(app, raise_server_exceptions=False) as client:
        answer = client.post(
            "/v1/jobs", json={**SPEC, "working_dir": str(shut / "project")}, headers=headers
        )
        assert answer.status_code == 422, answer.text
        error = answer.json()["error"]
        assert (
            error["field"] == "working_dir"
            and "does not let other users enter" in (error["message"])
        )
        assert f"chmod o+x {closed} " in error["message"]
        if parents_open:  # (pytest's own temporary root may be 0700 too)
            answer = client.post(
                "/v1/jobs", json={**SPEC, "working_dir": str(open_ / "project")}, headers=headers
            )
            assert answer.status_code == 201, answer.text
    # without own uids (`--job-user server`), the server's own access is what counts
    with TestClient(create_app(engine, dirs_here=True), raise_server_exceptions=False) as c:
        answer = c.post(
            "/v1/jobs", json={**SPEC, "working_dir": str(shut / "project")}, headers=headers
        )
        assert answer.status_code == 201, answer.text
