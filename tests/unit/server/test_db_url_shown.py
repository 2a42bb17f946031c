"""A database URL's password is never printed: not in `trainyard up`'s error when the database
cannot be reached, nor in its banner or the admin commands' messages (`shown_url`)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from trainyard.cli.main import app
from trainyard.server.db import shown_url

URL = "postgresql://trainyard:s3cret-pw@127.0.0.1:1/trainyard"  # port 1: nothing listens


def test_shown_url_hides_the_password_only() -> None:
    assert shown_url(URL) == "postgresql://trainyard:***@127.0.0.1:1/trainyard"
    assert shown_url("sqlite:////var/lib/trainyard/trainyard.db").endswith("trainyard.db")
    assert shown_url("not a url") == "not a url"


def test_up_on_an_unreachable_database_does_not_print_its_password(tmp_path: Path) -> None:
    env = {"TRAINYARD_DB": URL, "TRAINYARD_HOME": str(tmp_path / "home")}
    result = CliRunner().invoke(app, ["up", "--port", "0"], env=env)
    assert result.exit_code != 0
    assert "s3cret-pw" not in result.output and "trainyard:***@127.0.0.1:1" in result.output
