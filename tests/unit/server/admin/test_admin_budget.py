"""`trainyard admin tenant budget` on SQLite and PostgreSQL: it sets, shows and removes a
tenant's GPU-hour budget, refuses bad values naming the option, and is in the audit trail."""

from __future__ import annotations

import json

from test_admin_cli import AdminCli, admin

__all__ = ["admin"]
DAY = 86_400.0


def test_the_admin_command_sets_lists_and_audits_budgets(admin: AdminCli) -> None:
    admin.ok("tenant", "add", "acme")
    out = admin.ok("tenant", "budget", "acme", "--gpu-hours", "100", "--period", "7d")
    assert out.strip() == "tenant acme: budget 100 GPU-hours / 7 days"
    listed = {t["name"]: t for t in admin.json("tenant", "list")}
    assert (listed["acme"]["budget_gpu_hours"], listed["acme"]["budget_period_s"]) == (100, 7 * DAY)
    assert "100 GPU-hours / 7 days" in admin.ok("tenant", "list")
    hourly = admin.ok("tenant", "budget", "acme", "--gpu-hours", "0.5", "--period", "1h")
    assert hourly.strip() == "tenant acme: budget 0.5 GPU-hours / 1 hours"  # not 0.0417 days
    admin.ok("tenant", "budget", "acme", "--gpu-hours", "100", "--period", "7d")
    admin.fail("--gpu-hours", "tenant", "budget", "acme")
    admin.fail("gpu_hours", "tenant", "budget", "acme", "--gpu-hours", "-1")
    admin.fail("--period", "tenant", "budget", "acme", "--gpu-hours", "1", "--period", "soon")
    admin.fail("tenant", "tenant", "budget", "nope", "--gpu-hours", "1")
    admin.ok("tenant", "budget", "acme", "--none")
    listed = {t["name"]: t for t in admin.json("tenant", "list")}
    assert listed["acme"]["budget_gpu_hours"] is None
    trail = json.loads(admin.ok("audit", "--json"))["events"]
    budget = [e for e in trail if e["action"] == "tenant.budget"]
    assert [e["details"]["gpu_hours"] for e in budget] == [100, 0.5, 100, None]
