"""`trainyard admin ...` through typer's CliRunner on SQLite and PostgreSQL: tokens that the
real API accepts, queue changes the API shows, and one-line errors that change nothing."""

from __future__ import annotations

import json
import os
import stat
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from admin_state import add_job, row_counts
from sqlalchemy import Engine
from typer.testing import CliRunner, Result

from trainyard.cli.main import app
from trainyard.server.api.app import create_app
from trainyard.server.db import Device, JobState, Node, make_engine, make_session_factory

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient


@dataclass
class AdminCli:
    db_url: str
    home: Path
    runner: CliRunner = field(default_factory=CliRunner)
    _engine: Engine | None = None

    def run(self, *args: str) -> Result:
        return self.runner.invoke(
            app, ["admin", *args, "--db", self.db_url, "--home", str(self.home)]
        )

    def ok(self, *args: str) -> str:
        result = self.run(*args)
        assert result.exit_code == 0, (args, result.output)
        return result.stdout

    def fail(self, error_field: str, *args: str) -> str:
        """The command exits 2 with one `error: FIELD: ...` line and writes nothing."""
        before = row_counts(self.engine)
        result = self.run(*args)
        assert result.exit_code == 2, (args, result.output)
        assert "Traceback" not in result.output and result.stdout == ""
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {error_field}: "), (args, lines)
        assert row_counts(self.engine) == before, args
        return lines[0]

    def json(self, *args: str) -> Any:
        return json.loads(self.ok(*args, "--json"))

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = make_engine(self.db_url)
        return self._engine

    def api(self) -> TestClient:
        return TestClient(create_app(self.engine), raise_server_exceptions=False)

    def whoami(self, token: str) -> Any:
        """GET /v1/whoami on a fresh API (a running server caches tokens for a few seconds,
        so changes made here reach it within that time)."""
        with self.api() as client:
            return client.get("/v1/whoami", headers=_bearer(token))


@pytest.fixture
def admin(db_url: str, tmp_path: Path) -> Iterator[AdminCli]:
    cli = AdminCli(db_url, tmp_path / "home")
    try:
        yield cli
    finally:
        if cli._engine is not None:
            cli._engine.dispose()


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_issued_token_authenticates_against_the_api(admin: AdminCli) -> None:
    admin.ok("tenant", "add", "acme")
    out = admin.ok("user", "add", "ada", "--tenant", "acme", "--role", "viewer")
    assert "user ada (acme, viewer) created" in out
    (admin.home / "server.json").write_text(json.dumps({"url": "http://10.0.0.5:9000"}))
    out = admin.ok("token", "issue", "ada", "--name", "laptop", "--expires-in", "30d")
    token = next(line for line in out.splitlines() if line.startswith("ty_"))
    assert f"trainyard login http://10.0.0.5:9000 --token {token}" in out
    assert "shown only now" in out
    me = admin.whoami(token)
    assert me.status_code == 200 and me.json() == {
        "user": "ada",
        "tenant": "acme",
        "role": "viewer",
    }
    with admin.api() as client:
        mine = client.get("/v1/tokens", headers=_bearer(token)).json()["tokens"]
        assert [(t["name"], t["expires_at"] is not None) for t in mine] == [("laptop", True)]

    admin.ok("user", "role", "ada", "member")
    assert admin.whoami(token).json()["role"] == "member"
    admin.ok("user", "disable", "ada")
    assert admin.whoami(token).status_code == 401
    admin.ok("user", "enable", "ada")
    assert admin.whoami(token).status_code == 200

    second = admin.json("token", "issue", "ada")
    assert second["user"] == "ada" and second["expires_at"] is None
    assert admin.whoami(second["token"]).status_code == 200
    out = admin.ok("token", "revoke", "ada", "--token-id", second["token_id"])
    assert second["token_id"] in out
    assert admin.whoami(second["token"]).status_code == 401
    assert admin.whoami(token).status_code == 200
    assert "revoked 1 token(s)" in admin.ok("token", "revoke", "ada")
    assert admin.whoami(token).status_code == 401
    assert "nothing revoked" in admin.ok("token", "revoke", "ada")


def test_queue_changes_show_in_the_api(admin: AdminCli) -> None:
    admin.ok("tenant", "add", "acme")
    admin.ok("user", "add", "root", "--tenant", "acme", "--role", "admin")
    token = admin.json("token", "issue", "root")["token"]
    admin.ok("queue", "add", "org", "--guaranteed", "8", "--limit", "16")
    out = admin.ok("queue", "add", "research", "--parent", "org", "--tenant", "acme", "-g", "6",
                   "--weight", "2")  # fmt: skip
    assert "created queue research: parent org, acme, guaranteed 6, no limit, weight 2" in out

    def queues(client: TestClient) -> dict[str, dict[str, Any]]:
        answer = client.get("/v1/queues", headers=_bearer(token))
        assert answer.status_code == 200, answer.text
        return {q["name"]: q for q in answer.json()["queues"]}

    with admin.api() as client:
        seen = queues(client)
        assert set(seen) == {"default", "org", "research"}
        assert seen["research"] | {"pending": 0} == {
            "name": "research", "parent": "org", "tenant": "acme", "guaranteed": 6,
            "limit": None, "weight": 2.0, "pending": 0, "running": 0, "gpus_in_use": 0,
            "gpus_held": 0, "max_priority": None,
            "default_priority": None, "usage": 0.0,
        }  # fmt: skip
        out = admin.ok("queue", "set", "research", "--max-priority", "5")
        assert out.strip().endswith("weight 2, max priority 5")
        assert queues(client)["research"]["max_priority"] == 5
        admin.fail("--max-priority", "queue", "set", "research", "--max-priority", "1",
                   "--no-max-priority")  # fmt: skip
        admin.fail("max_priority", "queue", "set", "research", "--max-priority", str(2**40))
        admin.ok("queue", "set", "research", "--no-max-priority")
        assert queues(client)["research"]["max_priority"] is None
        admin.ok("queue", "set", "research", "--parent", "default", "-g", "10", "--limit", "12")
        seen = queues(client)["research"]
        assert (seen["parent"], seen["guaranteed"], seen["limit"]) == ("default", 10, 12)
        admin.ok("queue", "set", "research", "--no-parent", "--no-limit", "--shared")
        seen = queues(client)["research"]
        assert (seen["parent"], seen["tenant"], seen["limit"]) == (None, None, None)
        admin.ok("queue", "set", "default", "--parent", "org", "-w", "0.5")
        assert queues(client)["default"]["parent"] == "org"
        admin.fail("queue", "queue", "rm", "org")  # has a child now
        admin.ok("queue", "set", "default", "--no-parent")
        assert admin.ok("queue", "rm", "org").strip() == "queue org deleted"
        assert set(queues(client)) == {"default", "research"}
    listed = {q["name"]: q for q in admin.json("queue", "list")}
    assert listed["default"]["weight"] == 0.5 and listed["research"]["guaranteed"] == 10


def test_lists_as_json_and_tables(admin: AdminCli) -> None:
    admin.ok("tenant", "add", "acme")
    admin.ok("user", "add", "ada", "--tenant", "acme")
    admin.ok("queue", "add", "research", "--tenant", "acme", "-g", "2")
    admin.ok("queue", "add", "vision", "--parent", "research", "--tenant", "acme", "-g", "1")
    tenants = admin.json("tenant", "list")
    assert [(t["name"], t["users"], t["queues"]) for t in tenants] == [
        ("acme", 1, 2), ("default", 1, 0),
    ]  # fmt: skip
    users = admin.json("user", "list", "--tenant", "acme")
    assert [(u["name"], u["role"], u["disabled"], u["tokens"]) for u in users] == [
        ("ada", "member", False, 0)
    ]
    queues = {q["name"]: q for q in admin.json("queue", "list", "--tenant", "acme")}
    assert queues["research"]["children"] == ["vision"] and queues["vision"]["parent"] == "research"
    table = admin.ok("queue", "list")
    assert "research" in table and "  vision" in table and "shared" in table
    assert "acme" in admin.ok("tenant", "list") and "ada" in admin.ok("user", "list")
    grouped = ["admin", "--db", admin.db_url, "--home", str(admin.home), "user", "list", "--json"]
    result = admin.runner.invoke(app, grouped)  # the options may also come right after `admin`
    assert result.exit_code == 0 and [u["name"] for u in json.loads(result.stdout)] == [
        "ada", "admin",
    ]  # fmt: skip


def _add_node(admin: AdminCli, name: str, gpus: int, **fields: Any) -> None:
    with make_session_factory(admin.engine)() as session:
        node = Node(name=name, registered_at=1.0, **fields)
        node.devices = [Device(index=i, gpu_type="A100", memory_gb=40.0) for i in range(gpus)]
        session.add(node)
        session.commit()


def test_guarantees_beyond_the_cluster_are_warned_of_not_refused(admin: AdminCli) -> None:
    """Noticed in an outside review: guarantees could add up to more than the cluster without
    a word. Not refused (nodes come and go); said on stderr by `queue add`, `set` and `list`."""
    admin.ok("queue", "add", "early", "-g", "64")  # no node yet: nothing to compare with
    assert admin.run("queue", "list").stderr == ""
    admin.ok("queue", "rm", "early")
    _add_node(admin, "n1", 8)
    _add_node(admin, "n2", 8)
    _add_node(admin, "gone", 8, drained_at=2.0)  # a drained node's GPUs are not given
    result = admin.run("queue", "add", "org", "-g", "12")
    assert result.exit_code == 0 and result.stderr == "", result.output
    # a root that guarantees nothing itself promises what its children do
    admin.ok("queue", "add", "lab")
    result = admin.run("queue", "add", "vision", "--parent", "lab", "-g", "6")
    assert result.exit_code == 0 and result.stdout.startswith("created queue vision")
    warning = result.stderr.strip()
    assert warning.startswith("warning: ") and "add up to 18 GPUs" in warning, warning
    assert "has 16 to give" in warning and "--guaranteed" in warning, warning
    assert "vision" in {q["name"] for q in admin.json("queue", "list")}  # it was created
    assert "add up to 18" in admin.run("queue", "list", "--json").stderr
    assert "add up to 18" in admin.run("queue", "list").stderr
    # children within a parent's guarantee promise nothing beyond it
    admin.ok("queue", "add", "nlp", "--parent", "org", "-g", "12")
    result = admin.run("queue", "set", "vision", "-g", "4")
    assert result.exit_code == 0, result.output
    assert "add up to" not in result.stderr, result.output
    result = admin.run("queue", "set", "vision", "-g", "5")
    assert "add up to 17 GPUs" in result.stderr, result.output


def test_a_guarantee_its_parent_does_not_back_is_warned_of(admin: AdminCli) -> None:
    # Outside review 14, F4: teams guaranteed 4 under `default` (guaranteed 0), as the docs
    # showed, are never reclaimed for from another top-level queue; nothing said so.
    admin.ok("queue", "list")  # bootstraps the database, its `default` queue included
    _add_node(admin, "n1", 8)
    result = admin.run("queue", "add", "team-b", "--parent", "default", "-g", "4")
    assert result.exit_code == 0 and result.stderr == "", result.output  # one tree: backed
    result = admin.run("queue", "add", "batch")
    warning = result.stderr.strip()
    assert warning.startswith("warning: queue team-b guarantees 4 GPUs but default above it "
                              "guarantees 0"), warning  # fmt: skip
    assert "not from the other top-level queues (batch)" in warning, warning
    assert "admin queue set default --guaranteed N" in warning, warning
    assert "team-b guarantees 4" in admin.run("queue", "list").stderr
    result = admin.run("queue", "set", "default", "-g", "4")
    assert result.exit_code == 0 and result.stderr == "", result.output  # backed now


def test_bad_input_prints_one_line_and_changes_nothing(admin: AdminCli) -> None:
    admin.ok("tenant", "add", "acme")
    admin.ok("user", "add", "ada", "--tenant", "acme")
    admin.ok("queue", "add", "org", "-g", "8")
    admin.ok("queue", "add", "research", "--parent", "org", "--tenant", "acme", "-g", "6")
    with make_session_factory(admin.engine)() as session:
        add_job(session, "research", "ada", JobState.PENDING)
        session.commit()
    cases: list[tuple[str, list[str], str]] = [
        ("name", ["tenant", "add", "acme"], "already exists"),
        ("name", ["tenant", "add", "Bad Name"], "invalid tenant name"),
        ("tenant", ["user", "add", "bob", "--tenant", "acm"], "did you mean 'acme'"),
        ("role", ["user", "add", "bob", "--tenant", "acme", "--role", "boss"], "admin, member"),
        ("name", ["user", "add", "ada", "--tenant", "acme"], "already exists"),
        ("user", ["user", "role", "adaa", "viewer"], "did you mean 'ada'"),
        ("role", ["user", "role", "ada", "owner"], "unknown role"),
        ("user", ["user", "disable", "nobody"], "no user"),
        ("user", ["user", "enable", "nobody"], "no user"),
        ("user", ["token", "issue", "nobody"], "no user"),
        ("--expires-in", ["token", "issue", "ada", "--expires-in", "soon"], "30d"),
        ("--expires-in", ["token", "issue", "ada", "--expires-in", ""], "30d"),  # not "never"
        ("expires_in", ["token", "issue", "ada", "--expires-in", "3651d"], "ten years"),
        ("token_id", ["token", "revoke", "ada", "--token-id", "abc"], "no live"),
        ("guaranteed", ["queue", "add", "x", "--guaranteed", "-1"], "0 to 2147483647"),
        ("guaranteed", ["queue", "add", "x", "--guaranteed", "9" * 20], "0 to 2147483647"),
        ("limit", ["queue", "add", "x", "--limit", "9" * 20], "0 to 2147483647"),
        ("limit", ["queue", "add", "x", "-g", "4", "-l", "2"], "below guaranteed"),
        ("weight", ["queue", "add", "x", "--weight", "0"], "> 0"),
        ("parent", ["queue", "add", "x", "--parent", "nope"], "no queue"),
        ("guaranteed", ["queue", "add", "x", "--parent", "org", "-g", "3"], "at most 2"),
        ("tenant", ["queue", "add", "x", "--parent", "research"], "tenant 'acme'"),
        ("name", ["queue", "add", "org"], "already exists"),
        ("parent", ["queue", "set", "org", "--parent", "research"], "cycle"),
        ("guaranteed", ["queue", "set", "org", "-g", "5"], "guaranteed 6"),
        ("limit", ["queue", "set", "org", "--limit", "4"], "below guaranteed"),
        ("--limit", ["queue", "set", "org", "--limit", "1", "--no-limit"], "not both"),
        ("--parent", ["queue", "set", "org", "--parent", "x", "--no-parent"], "not both"),
        ("--tenant", ["queue", "set", "org", "--tenant", "acme", "--shared"], "not both"),
        ("queue", ["queue", "set", "org"], "nothing to change"),
        ("queue", ["queue", "set", "nope", "-g", "1"], "no queue"),
        ("tenant", ["queue", "set", "default", "--parent", "research"], "tenant 'acme'"),
        ("queue", ["queue", "rm", "org"], "child queues"),
        ("queue", ["queue", "rm", "research"], "1 PENDING"),
        ("queue", ["queue", "rm", "nope"], "no queue"),
    ]
    for error_field, args, match in cases:
        line = admin.fail(error_field, *args)
        assert match in line, (args, line)


def test_default_home_holds_the_database_and_admin_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("TRAINYARD_HOME", str(home))
    result = CliRunner().invoke(app, ["admin", "tenant", "add", "acme"])
    assert result.exit_code == 0, result.output
    assert "admin token written to" in result.stderr
    token_file = home / "admin-token"
    assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600
    again = CliRunner().invoke(app, ["admin", "tenant", "list", "--json"])
    assert [t["name"] for t in json.loads(again.stdout)] == ["acme", "default"]
    assert again.stderr == ""  # bootstrapped once only
    engine = make_engine(home / "trainyard.db")
    try:
        with TestClient(create_app(engine)) as client:
            me = client.get("/v1/whoami", headers=_bearer(token_file.read_text().strip()))
            assert me.json() == {"user": "admin", "tenant": "default", "role": "admin"}
    finally:
        engine.dispose()
    other = tmp_path / "other"
    result = CliRunner().invoke(app, ["admin", "tenant", "list", "--home", str(other)])
    assert result.exit_code == 0 and (other / "trainyard.db").is_file()


def test_unreachable_database_is_one_line(tmp_path: Path) -> None:
    url = "postgresql://admin:s3cret@127.0.0.1:1/trainyard"
    result = CliRunner().invoke(
        app, ["admin", "tenant", "list", "--db", url, "--home", str(tmp_path)]
    )
    assert result.exit_code == 2 and "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --db: cannot open database")
    assert "s3cret" not in result.output


def test_database_failure_mid_command_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlalchemy.exc import OperationalError

    from trainyard.server.services import admin as svc

    def locked(*_args: Any, **_kwargs: Any) -> None:
        raise OperationalError("SELECT 1", {}, Exception("database is locked"))

    monkeypatch.setattr(svc, "list_tenants", locked)
    result = CliRunner().invoke(app, ["admin", "tenant", "list", "--home", str(tmp_path)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.splitlines()[-1].startswith("error: --db: database error")
    assert "database is locked" in result.stderr


def test_the_database_of_trainyard_db_is_the_one_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As `trainyard up` reads it: before, admin changed a new SQLite file in the home (and
    overwrote the server's admin token) while the server ran on $TRAINYARD_DB."""
    home, db = tmp_path / "home", tmp_path / "elsewhere.db"
    monkeypatch.setenv("TRAINYARD_HOME", str(home))
    monkeypatch.setenv("TRAINYARD_DB", str(db))
    result = CliRunner().invoke(app, ["admin", "tenant", "add", "acme"])
    assert result.exit_code == 0, result.output
    assert db.is_file() and not (home / "trainyard.db").exists()
    assert stat.S_IMODE(os.stat(db).st_mode) == 0o600  # made here: the server's, private
    listed = CliRunner().invoke(app, ["admin", "tenant", "list", "--json"])
    assert "acme" in [t["name"] for t in json.loads(listed.stdout)]


def test_a_home_whose_server_uses_another_database_is_not_given_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "server.json").write_text('{"url": "http://127.0.0.1:8765", "pid": 1}')
    (home / "admin-token").write_text("the server's\n")
    monkeypatch.setenv("TRAINYARD_HOME", str(home))
    monkeypatch.delenv("TRAINYARD_DB", raising=False)
    result = CliRunner().invoke(app, ["admin", "tenant", "add", "acme"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.startswith(f"error: --db: the server of {home} does not use")
    assert "$TRAINYARD_DB" in result.stderr
    assert not (home / "trainyard.db").exists()
    assert (home / "admin-token").read_text() == "the server's\n"
