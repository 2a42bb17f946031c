"""The command line's handling of what it shows and sends: a timestamp past the platform's
clock (an estimated start behind jobs that stated absurd durations, stored before they were
bounded) prints as a word, not a traceback; a job id that cannot be one is refused before any
request."""

from __future__ import annotations

import time

import pytest
from typer.testing import CliRunner

from trainyard.cli.main import app
from trainyard.cli.remote import clock


def test_clock_of_a_time_beyond_the_platforms_clock() -> None:
    assert clock(8.6e204) == "never"
    assert clock(float("nan")) == "-" and clock(None) == "-"
    assert clock(0.0) == time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(0.0))


@pytest.mark.parametrize("command", ["describe", "cancel", "logs", "wait"])
@pytest.mark.parametrize("job", ["", "../whoami", "j-1/logs", "a b"])
def test_what_is_not_a_job_id_is_said_before_any_request(command: str, job: str) -> None:
    """Not "the server answered with something other than JSON" (an empty id) or a bare "Not
    Found" (a path in the id): nothing listens at the URL, the id is answered first."""
    argv = [command, job, "--url", "http://127.0.0.1:1", "--token", "tk"]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert f"error: {job!r} is not a job id" in result.output


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_wait_refuses_a_timeout_that_is_not_a_number(value: str) -> None:
    argv = ["wait", "j-1", "--timeout", value, "--url", "http://127.0.0.1:1", "--token", "tk"]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2 and "error: --timeout: " in result.output
