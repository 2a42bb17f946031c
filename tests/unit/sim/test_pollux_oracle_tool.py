"""`bench/pollux_oracle.py`'s options: a bad value stops it with a message naming the option,
before any simulation runs."""

from __future__ import annotations

import sys

import pytest

from bench_scripts import load


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--restart-s", "-1"], "--restart-s"),
        (["--restart-s", "nan"], "--restart-s"),
        (["--explore", "0"], "--explore"),
    ],
)
def test_a_bad_option_is_named(
    argv: list[str], named: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    tool = load("pollux_oracle")
    monkeypatch.setattr(sys, "argv", ["pollux_oracle.py", *argv])
    with pytest.raises(SystemExit) as stop:
        tool.main()
    assert named in str(stop.value)
