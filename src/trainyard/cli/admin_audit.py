"""`trainyard admin audit`: the audit trail (who did what and when), every tenant's and the
operator's, oldest first, on the server's database (`--home` / `--db`)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from sqlalchemy.orm import Session

from trainyard.cli.admin import Db, Home, Json, _run, _table, _when, admin_app
from trainyard.server.services import audit


def _read(session: Session, since: float, limit: int) -> tuple[list[dict[str, Any]], bool]:
    rows, more = audit.events(session, tenant_id=None, since=since, limit=limit)
    keys = ("time", "actor", "tenant_id", "action", "target", "details")
    return [{k: getattr(r, k) for k in keys} for r in rows], more


@admin_app.command("audit")
def audit_list(
    since: Annotated[float, typer.Option(help="From this time (epoch seconds).")] = 0.0,
    limit: Annotated[int, typer.Option(min=1, max=100_000, help="At most this many.")] = 100,
    home: Home = None,
    db: Db = None,
    as_json: Json = False,
) -> None:
    """Who did what and when: submits, cancels, tokens, users, queues, drains."""
    rows, more = _run(home, db, lambda s: _read(s, since, limit))
    if as_json:
        typer.echo(json.dumps({"events": rows, "more": more}, indent=2))
        return
    table = [
        (_when(r["time"]), r["actor"], r["action"], r["target"],
         json.dumps(r["details"]) if r["details"] else "")
        for r in rows
    ]  # fmt: skip
    _table("audit trail", ["time", "actor", "action", "target", "details"], table)
    if more:
        typer.echo(f"(more entries exist: --since {rows[-1]['time']} or a larger --limit)")
