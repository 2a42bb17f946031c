"""`--since` / `--until` of the client commands (`cli/remote.parse_when`): epoch seconds, a
duration ago, an ISO date (UTC unless it names a zone); anything else is one error naming
the option, exit 2. `nan` is refused: it was read as 1970 (`usage --since nan`)."""

from __future__ import annotations

import pytest
import typer

from trainyard.cli.remote import parse_when

NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1700000000", 1_700_000_000.0),
        ("7d", NOW - 7 * 86_400),
        ("90m", NOW - 5_400),
        ("2026-12-01", 1_796_083_200.0),
        ("2026-12-01T08:00+01:00", 1_796_108_400.0),
    ],
)
def test_times_read(text: str, seconds: float) -> None:
    assert parse_when(text, "--since", NOW) == seconds


@pytest.mark.parametrize("text", ["nan", "NaN", "soon", "7x", ""])
def test_what_is_not_a_time_is_one_error_naming_the_option(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(typer.Exit) as exit_:
        parse_when(text, "--since", NOW)
    assert exit_.value.exit_code == 2
    assert capsys.readouterr().err.startswith("error: --since: ")
