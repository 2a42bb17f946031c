"""`trainyard admin job list|describe|cancel` on SQLite and PostgreSQL: the operator sees and
cancels any tenant's jobs; paging says when more exist; the cancel is in the job's events and
the audit trail with the operator's login."""

from __future__ import annotations

import getpass
import json

from test_admin_cli import AdminCli, admin

__all__ = ["admin"]


def _token(admin: AdminCli, user: str) -> str:
    out = admin.ok("token", "issue", user)
    return next(line for line in out.splitlines() if line.startswith("ty_"))


def test_the_operator_lists_describes_and_cancels_any_tenants_jobs(admin: AdminCli) -> None:
    for tenant, user in (("acme", "ada"), ("globex", "gus")):
        admin.ok("tenant", "add", tenant)
        admin.ok("user", "add", user, "--tenant", tenant)
        admin.ok("queue", "add", f"{tenant}-q", "--tenant", tenant)
    ids = {}
    with admin.api() as client:
        for tenant, user in (("acme", "ada"), ("globex", "gus"), ("globex", "gus")):
            spec = {"name": user, "queue": f"{tenant}-q", "command": ["true"]}
            headers = {"Authorization": f"Bearer {_token(admin, user)}"}
            answer = client.post("/v1/jobs", json=spec, headers=headers)
            assert answer.status_code == 201, answer.text
            ids.setdefault(tenant, []).append(answer.json()["id"])
    listed = json.loads(admin.ok("job", "list", "--json"))
    assert {j["tenant"] for j in listed["jobs"]} == {"acme", "globex"}
    assert len(listed["jobs"]) == 3 and listed["more"] is False
    page = json.loads(admin.ok("job", "list", "--json", "--limit", "2"))
    assert len(page["jobs"]) == 2 and page["more"] is True
    assert "more jobs exist: --offset 2" in admin.ok("job", "list", "--limit", "2")
    table = admin.ok("job", "list")  # not a terminal: every id whole, to copy (review 11)
    assert all(job_id in table for group in ids.values() for job_id in group)
    only = json.loads(admin.ok("job", "list", "--json", "--tenant", "acme"))["jobs"]
    assert [j["id"] for j in only] == ids["acme"]
    victim = ids["globex"][0]
    detail = json.loads(admin.ok("job", "describe", victim))
    assert detail["id"] == victim and detail["state"] == "PENDING"
    me = f"os:{getpass.getuser()}"
    assert admin.ok("job", "cancel", victim).strip() == f"job {victim}: CANCELLED (by {me})"
    after = json.loads(admin.ok("job", "describe", victim))
    assert after["state"] == "CANCELLED"
    assert after["events"][-1]["reason"] == f"cancelled by {me}"
    trail = json.loads(admin.ok("audit", "--json"))["events"]
    assert (trail[-1]["actor"], trail[-1]["action"], trail[-1]["target"]) == (
        me,
        "job.cancel",
        victim,
    )
    admin.fail("state", "job", "cancel", victim)  # already CANCELLED: nothing changes
    admin.fail("job", "job", "describe", "j-nope")
    admin.fail("--state", "job", "list", "--state", "sleeping")
