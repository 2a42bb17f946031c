"""What the option parser refuses is one `error:` line with exit code 2, as the errors the
commands check themselves (outside review 12, F9: a five-line box before); `--help`, no
arguments and `--version` are unchanged."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainyard.cli.main", *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("submit", "--gpus", "-1", "--", "true"), "'--gpus' / '-G': -1 is not in the range"),
        (("submit", "--bogus"), "No such option: --bogus"),
        (("jobs", "--limit", "abc"), "'abc' is not a valid int"),
        (("nosuchcommand",), "No such command 'nosuchcommand'"),
    ],
)
def test_a_refused_flag_is_one_error_line(args: tuple[str, ...], words: str) -> None:
    done = _run(*args)
    assert done.returncode == 2, done
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    assert words in done.stderr and "--help" in done.stderr and done.stdout == ""


def test_help_no_arguments_and_version_are_as_before() -> None:
    assert _run("--version").stdout.startswith("trainyard ")
    helped = _run("submit", "--help")
    assert helped.returncode == 0 and "Usage" in helped.stdout
    bare = _run()
    assert bare.returncode == 2 and "Usage" in bare.stdout + bare.stderr


def test_help_into_a_closed_pipe_ends_without_a_traceback() -> None:
    # Outside review 13, F13: `trainyard --help | head -1` printed a traceback: the handler
    # for an aborted command named an exception that Typer 0.28 does not have, which raised
    # while any other exception was being matched against it.
    done = subprocess.run(
        f"{sys.executable} -m trainyard.cli.main --help | head -c 1",
        shell=True, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert "Traceback" not in done.stderr and "AttributeError" not in done.stderr, done.stderr
