"""`trainyard admin usage`: every tenant's GPU/CPU/memory usage in a window, for the operator,
straight from the server's database (`--home` / `--db`). The options and the output are
`trainyard usage`'s (`cli/usage.py`), which shows one tenant, its caller's; here `--by`
defaults to `tenant`, and user, queue and job names are unique across tenants."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy.orm import Session

from trainyard.cli import usage as usage_cli
from trainyard.cli.admin import Db, Home, _run, admin_app
from trainyard.server.services import usage


def _read(session: Session, params: dict[str, Any]) -> dict[str, Any]:
    now = time.time()
    since, until = params["since"], params.get("until", now)
    rows = usage.usage(session, tenant_id=None, since=since, until=until, by=params["by"],
                       now=now)  # fmt: skip
    out = [
        {"key": r.key, "gpu_seconds": r.gpu_seconds, "gpu_hours": r.gpu_seconds / 3600,
         "cpu_seconds": r.cpu_seconds, "memory_gb_seconds": r.memory_gb_seconds,
         "intervals": r.intervals, "jobs": len(r.jobs)}
        for r in rows
    ]  # fmt: skip
    return {"since": since, "until": until, "by": params["by"], "rows": out}


@admin_app.command("usage")
def usage_all(
    since: usage_cli.Since = "30d",
    until: usage_cli.Until = None,
    by: usage_cli.By = "tenant",
    output: usage_cli.Output = "table",
    as_json: usage_cli.AsJson = False,
    home: Home = None,
    db: Db = None,
) -> None:
    """GPU/CPU/memory usage of every tenant in a window, to the second."""
    output, params = usage_cli.checked(since, until, by, output, as_json)
    usage_cli.render(_run(home, db, lambda s: _read(s, params)), by, output)
