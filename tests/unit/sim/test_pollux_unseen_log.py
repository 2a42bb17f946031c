"""`bench/pollux_unseen.py` reads Pollux's per-job JCTs from the artifact's log (its last
"Completed jobs" line), and refuses a log that has none (an unfinished run)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from bench_scripts import load


def _bench() -> ModuleType:
    return load("pollux_unseen")


def test_the_last_completed_jobs_line_is_read(tmp_path: Path) -> None:
    log = tmp_path / "pollux.log"
    log.write_text(
        "---------------- SIMULATOR TIME: 60 ----------------\n"
        "Completed jobs:\n{}\nAverage JCT: 0\n"
        "---------------- SIMULATOR TIME: 120 ----------------\n"
        "Active jobs:\n    ncf-1:\t[epoch 0]\t[restarts 0]\n"
        "Completed jobs:\n{'cifar10-0': 724, 'ncf-1': 104}\nAverage JCT: 414.0\n"
    )
    assert _bench().pollux_jcts(log) == {"cifar10-0": 724.0, "ncf-1": 104.0}


def test_a_log_without_completed_jobs_is_refused(tmp_path: Path) -> None:
    log = tmp_path / "pollux.log"
    log.write_text("---------------- SIMULATOR TIME: 60 ----------------\nActive jobs:\n")
    with pytest.raises(SystemExit, match="Completed jobs"):
        _bench().pollux_jcts(log)
