"""`trainyard admin gc`: apply the retention policy (`server/services/retention.py`) to the
server's home and database: the runs and logs, checkpoints and stale tokens of jobs that
ended long enough ago. `--dry-run` only reports. The run is recorded in the audit trail.
Run it from cron (or a systemd timer) on the server's machine, as the server's user."""

from __future__ import annotations

import time
from typing import Annotated

import typer
from sqlalchemy.orm import Session

from trainyard.cli.admin import Db, Home, _home, _run, admin_app
from trainyard.server.config import ServerConfig
from trainyard.server.services import admin as svc
from trainyard.server.services import retention


@admin_app.command("gc")
def gc_command(
    runs: Annotated[str, typer.Option(help="Keep runs and logs of ended jobs this long.")] = "30d",
    checkpoints: Annotated[
        str, typer.Option(help="Keep checkpoints of ended jobs this long.")
    ] = "30d",
    tokens: Annotated[str, typer.Option(help="Keep revoked or expired tokens this long.")] = "7d",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Report only.")] = False,
    home: Home = None,
    db: Db = None,
) -> None:
    """Remove what the retention policy no longer keeps (runs, checkpoints, tokens)."""
    runs_dir = ServerConfig(home=_home(home)).runs_dir

    def work(session: Session) -> retention.GcReport:
        return retention.collect(
            session, runs_dir, now=time.time(),
            runs_age_s=svc.parse_duration(runs, "--runs"),
            checkpoints_age_s=svc.parse_duration(checkpoints, "--checkpoints"),
            tokens_age_s=svc.parse_duration(tokens, "--tokens"), dry_run=dry_run,
        )  # fmt: skip

    details = {"runs": runs, "checkpoints": checkpoints, "tokens": tokens}
    report = _run(home, db, work, None if dry_run else ("gc", str(runs_dir), details))
    verb = "would remove" if dry_run else "removed"
    typer.echo(
        f"{verb}: runs and logs of {len(report.runs)} job(s), checkpoints of "
        f"{len(report.checkpoints)}, {report.tokens} token(s); "
        f"{report.bytes_freed / 1e6:.1f} MB"
    )
