"""`bench/pollux_paired.py`: a knob change against the shipped policy, workload by workload.
Its variant is `default` with the knobs given (a name that is no Profile field is refused),
the same knobs give the same mean JCT (ratio 1: the comparison is paired, not noisy), and the
summary says how many workloads got better and how sure the mean ratio is."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from bench_scripts import load
from shared_data import SHARED, require
from trainyard.core import get_profile


def _bench() -> ModuleType:
    return load("pollux_paired")


def test_the_variant_is_default_with_the_knobs_given() -> None:
    changed = _bench().variant(["resize_horizon_s=600", "resize_hold_s=30"])
    shipped = get_profile("default")
    assert (changed.resize_horizon_s, changed.resize_hold_s) == (600.0, 30.0)
    assert changed.resize_min_gain == shipped.resize_min_gain
    with pytest.raises(SystemExit, match="resize_horizon"):
        _bench().variant(["resize_horizon=600"])


def test_the_summary_of_the_ratios() -> None:
    out = _bench().summary("extra", [0.98, 1.0, 1.02, 0.96], ["resize_hold_s=30"])
    assert out["workloads"] == 4 and out["better"] == 2
    assert out["mean_ratio"] == pytest.approx(0.99)
    assert out["standard_error"] == pytest.approx(out["spread"] / 2)


def test_a_workload_under_the_same_knobs_gives_the_same_mean(tmp_path: Path) -> None:
    require(SHARED / "traces" / "pollux" / "profiles", "run the Pollux jobs")
    csv = tmp_path / "w.csv"
    csv.write_text(
        "name,time,application,num_replicas,batch_size\n"
        "cifar10-0,0,cifar10,2,128\nncf-1,30,ncf,1,32768\nbert-2,60,bert,1,12\n"
    )
    bench = _bench()
    same = bench.variant(["resize_hold_s=" + str(get_profile("default").resize_hold_s)])
    shipped = bench.mean_jct(csv, get_profile("default"), 60.0)
    assert shipped > 0 and bench.mean_jct(csv, same, 60.0) == shipped
