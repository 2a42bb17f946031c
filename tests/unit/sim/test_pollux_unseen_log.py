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


def test_a_mean_may_stand_in_for_the_log() -> None:
    bench = _bench()
    assert bench.parse("w.csv:p.log") == (Path("w.csv"), Path("p.log"))
    assert bench.parse("/tmp/u05-9.csv=2050") == (Path("/tmp/u05-9.csv"), 2050.0)
    for bad in ("w.csv", "w.csv=", "w.csv=abc", "w.csv=-3", "w.csv=0", "=2050", "w.csv=inf"):
        with pytest.raises(SystemExit, match=r"WORKLOAD\.csv=SECONDS"):
            bench.parse(bad)


def test_the_means_are_compared(monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench()
    runs = {"60": {"a": 100.0, "b": 300.0}, "events": {"a": 90.0, "b": 270.0}}
    monkeypatch.setattr(bench, "ours", lambda workload, speed: runs)
    out = bench.compare_mean(Path("w.csv"), 250.0, None)
    assert out["jobs"] == 2 and out["pollux_jct_avg"] == 250.0
    assert out["ours_60_jct_avg"] == 200.0 and out["ours_60_vs_pollux"] == 0.8
    assert out["ours_events_vs_pollux"] == 0.72
