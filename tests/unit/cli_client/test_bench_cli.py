"""`trainyard bench scheduler` from the command line: a small cluster prints one JSON object
of timings, and sizes it could not build (or would build for ever) are refused in one line
naming the flag, exit 2."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from trainyard.cli.main import app

runner = CliRunner()


def test_a_small_cluster_prints_one_json_object() -> None:
    args = ["bench", "scheduler", "--gpus", "16", "--pending", "8", "--repeats", "1",
            "--arrivals", "1", "--json"]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert isinstance(out, dict) and "devices" in out


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--gpus", "4"], "--gpus must be 8 to 1,048,576, got 4"),
        (["--gpus", "100000000000"], "--gpus must be 8 to 1,048,576"),
        (["--pending", "-1"], "--pending must be 0 to 1,000,000"),
        (["--arrivals", "0"], "--arrivals must be 1 to 1,000,000"),
        (["--repeats", "-1"], "--repeats must be 0 to 1,000"),
        (["--profile", "nope"], "--profile:"),
    ],
)
def test_sizes_it_cannot_build_are_refused(args: list[str], said: str) -> None:
    result = runner.invoke(app, ["bench", "scheduler", *args])
    assert result.exit_code == 2
    assert f"error: {said}" in result.stderr
    assert "Traceback" not in result.output
