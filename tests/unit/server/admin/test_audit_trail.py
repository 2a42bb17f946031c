"""The audit trail (issue 14, acceptance 5), on SQLite and PostgreSQL: every listed action,
through the API (submit, cancel, token create and revoke) and through `trainyard admin`
(tenant, user, role, disable, enable, token issue and revoke, queue add, set and rm, node
drain and undrain), is recorded with its actor and time; `trainyard admin audit` and
`GET /v1/audit` read it (a tenant admin sees its tenant only); rows cannot be changed."""

from __future__ import annotations

import getpass
import json
import time

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from test_admin_cli import AdminCli, admin

from trainyard.server.db import Device, Node, make_session_factory

__all__ = ["admin"]


def test_every_listed_action_is_recorded_with_actor_and_time(admin: AdminCli) -> None:
    began = time.time()
    admin.ok("tenant", "add", "acme")
    admin.ok("user", "add", "ada", "--tenant", "acme", "--role", "member")
    admin.ok("user", "add", "boss", "--tenant", "acme", "--role", "member")
    admin.ok("user", "role", "boss", "admin")
    admin.ok("user", "disable", "ada")
    admin.ok("user", "enable", "ada")
    ada = next(line for line in admin.ok("token", "issue", "ada").splitlines()
               if line.startswith("ty_"))  # fmt: skip
    boss = next(line for line in admin.ok("token", "issue", "boss").splitlines()
                if line.startswith("ty_"))  # fmt: skip
    admin.ok("queue", "add", "research", "--tenant", "acme", "-g", "2")
    admin.ok("queue", "set", "research", "--max-priority", "5")
    admin.ok("queue", "add", "scratch")
    admin.ok("queue", "rm", "scratch")
    with make_session_factory(admin.engine)() as s:
        s.add(Node(name="n0", cpus=8, memory_gb=32, registered_at=began,
                   devices=[Device(index=0, gpu_type="A100", memory_gb=80.0)]))  # fmt: skip
        s.commit()
    admin.ok("node", "drain", "n0")
    admin.ok("node", "undrain", "n0")
    member = {"Authorization": f"Bearer {ada}"}
    with admin.api() as client:
        spec = {"name": "t", "queue": "research", "command": ["true"], "gpus": 1}
        job = client.post("/v1/jobs", json=spec, headers=member).json()["id"]
        assert client.post(f"/v1/jobs/{job}/cancel", headers=member).status_code == 200
        made = client.post("/v1/tokens", json={"name": "ci"}, headers=member).json()
        assert client.delete(f"/v1/tokens/{made['token_id']}", headers=member).status_code == 200
        api_trail = client.get("/v1/audit", headers={"Authorization": f"Bearer {boss}"})
        refused = client.get("/v1/audit", headers=member)
    trail = json.loads(admin.ok("audit", "--json"))["events"]
    seen = [(e["actor"], e["action"], e["target"]) for e in trail]
    me = f"os:{getpass.getuser()}"
    assert seen == [
        (me, "tenant.add", "acme"), (me, "user.add", "ada"), (me, "user.add", "boss"),
        (me, "user.role", "boss"), (me, "user.disable", "ada"), (me, "user.enable", "ada"),
        (me, "token.issue", "ada"), (me, "token.issue", "boss"), (me, "queue.add", "research"),
        (me, "queue.set", "research"), (me, "queue.add", "scratch"), (me, "queue.rm", "scratch"),
        (me, "node.drain", "n0"), (me, "node.undrain", "n0"),
        ("ada", "job.submit", job), ("ada", "job.cancel", job),
        ("ada", "token.create", made["token_id"]), ("ada", "token.revoke", made["token_id"]),
    ]  # fmt: skip
    assert all(began - 1 <= e["time"] <= time.time() + 1 for e in trail)
    assert trail[9]["details"] == {"max_priority": 5}
    assert trail[14]["details"] == {"queue": "research", "gpus": 1, "priority": 0}
    assert api_trail.status_code == 200, api_trail.text
    # the tenant's own: its API actions and the operator's changes to it, its users, their
    # tokens and its queues (found by an outside review: the operator's were left out);
    # not the shared queue's nor the nodes'
    assert [e["action"] for e in api_trail.json()["events"]] == [
        "tenant.add", "user.add", "user.add", "user.role", "user.disable", "user.enable",
        "token.issue", "token.issue", "queue.add", "queue.set",
        "job.submit", "job.cancel", "token.create", "token.revoke",
    ]  # fmt: skip
    assert refused.status_code == 403
    table = admin.ok("audit", "--limit", "3")
    assert "tenant.add" in table and "more entries exist" in table


def test_the_trail_is_append_only(admin: AdminCli) -> None:
    admin.ok("tenant", "add", "acme")
    with admin.engine.connect() as conn:
        for statement in ("UPDATE audit_events SET actor = 'someone else'",
                          "DELETE FROM audit_events"):  # fmt: skip
            with pytest.raises(DBAPIError, match="append-only"):
                conn.execute(text(statement))
            conn.rollback()
        count = conn.execute(text("SELECT count(*) FROM audit_events")).scalar()
    assert count == 1
