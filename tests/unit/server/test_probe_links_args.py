"""`trainyard probe links` refuses what it could not honour before it submits the job: a
wait without end (`--timeout nan` / `inf`, which pass typer's minimum) and an `--out` it
could not write once the probe has run (a folder, or a file in a missing folder). The
server named is not listening: a refusal must come before the command connects."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from trainyard.cli.main import app


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--timeout", "nan"], "--timeout: nan is not a number of seconds"),
        (["--timeout", "inf"], "--timeout: inf is not a number of seconds"),
        (["--out", "{tmp}"], "--out: {tmp} must be a file in a folder that exists"),
        (
            ["--out", "{tmp}/no/x.json"],
            "--out: {tmp}/no/x.json must be a file in a folder that exists",
        ),
    ],
)
def test_refused_before_the_job_is_submitted(args: list[str], said: str, tmp_path: object) -> None:
    args = [a.format(tmp=tmp_path) for a in args]
    result = CliRunner().invoke(app, ["probe", "links", *args, "--url", "http://127.0.0.1:9"])
    assert result.exit_code == 2
    assert f"error: {said.format(tmp=tmp_path)}" in result.output
    assert "Traceback" not in result.output
