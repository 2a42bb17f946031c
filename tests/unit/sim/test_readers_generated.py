"""Generated workloads (Gavel, synthetic) and the readers on the real ../shared data."""

from __future__ import annotations

import builtins
import io
import itertools
import json
import random
import statistics
from collections import Counter
from pathlib import Path

import pytest

from shared_data import SHARED, require
from trainyard.sim.readers import read_workload
from trainyard.sim.workload import WorkloadError, arrivals

R50 = "ResNet-50 (batch size 64)"


def _throughputs(tmp_path: Path) -> Path:
    table: dict[str, dict[str, dict[str, float]]] = {}
    for worker, speed in (("v100", 4.0), ("k80", 1.0)):
        table[worker] = {str((R50, sf)): {"null": speed * sf} for sf in (1, 2, 4, 8)} | {
            str(("A3C", 1)): {"null": speed}
        }
    path = tmp_path / "tput.json"
    path.write_text(json.dumps(table, indent=1))
    return path


def test_gavel_jobs_follow_the_documented_rule(tmp_path: Path) -> None:
    spec = f"gavel:{_throughputs(tmp_path)}"
    w = read_workload(spec, seed=1, options={"limit": "4000"})
    assert len(w.jobs) == 4000 and w.jobs[0].submit_time == 0.0
    sizes = Counter(j.gpus for j in w.jobs)
    assert set(sizes) == {1, 2, 4, 8}
    assert abs(sizes[1] / 4000 - 0.7) < 0.03 and abs(sizes[8] / 4000 - 0.05) < 0.015
    assert all(j.application == R50 for j in w.jobs if j.gpus > 1)  # A3C has no multi-GPU
    assert {j.application for j in w.jobs} == {R50, "A3C"}
    assert all(j.batch_size == (64 if j.application == R50 else None) for j in w.jobs)
    durations = [j.duration or 0.0 for j in w.jobs]
    assert min(durations) >= 60 * 10**1.5 and max(durations) <= 60 * 10**4
    long_share = sum(d > 60_000 for d in durations) / len(durations)
    assert abs(long_share - 0.2) < 0.03
    gaps = [b.submit_time - a.submit_time for a, b in itertools.pairwise(w.jobs)]
    assert abs(statistics.mean(gaps) - 1800.0) < 90  # default 2 jobs/hour


def test_gavel_is_seeded_and_takes_options(tmp_path: Path) -> None:
    spec = f"gavel:{_throughputs(tmp_path)}"
    assert read_workload(spec, seed=3) == read_workload(spec, seed=3)
    assert read_workload(spec, seed=3).jobs != read_workload(spec, seed=4).jobs
    assert len(read_workload(spec).jobs) == 500
    single = read_workload(spec, options={"multi_gpu": "false", "limit": "50"})
    assert {j.gpus for j in single.jobs} == {1}
    base = read_workload(spec, options={"limit": "50"})
    fast = read_workload(spec, options={"limit": "50", "rate_per_hour": "4"})
    assert fast.jobs[-1].submit_time == pytest.approx(base.jobs[-1].submit_time / 2)
    loaded = read_workload(spec, load=2.0, options={"limit": "50"})
    assert loaded.jobs[-1].submit_time == pytest.approx(base.jobs[-1].submit_time / 2)
    for name, value in (("rate_per_hour", "0"), ("multi_gpu", "maybe"), ("limit", "x")):
        with pytest.raises(WorkloadError) as info:
            read_workload(spec, options={name: value})
        assert info.value.where == name


def test_gavel_bad_json_and_structure(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "v100": {\n    "x": ,\n  }\n}\n')
    with pytest.raises(WorkloadError) as info:
        read_workload(f"gavel:{bad}")
    assert info.value.where == f"{bad}:3:10"
    key = str(("ResNet", 1))
    nonpositive = tmp_path / "zero.json"
    nonpositive.write_text(json.dumps({"v100": {key: {"null": 0}}}, indent=1))
    with pytest.raises(WorkloadError) as info:
        read_workload(f"gavel:{nonpositive}")
    assert info.value.where == f"{nonpositive}:3:{key}"
    no_v100 = tmp_path / "k80.json"
    no_v100.write_text(json.dumps({"k80": {key: {"null": 1.0}}}))
    with pytest.raises(WorkloadError) as info:
        read_workload(f"gavel:{no_v100}")
    assert info.value.where == f"{no_v100}:1:v100"


def test_synthetic_is_seeded_and_reads_no_file(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"synthetic opened a file: {args}")

    monkeypatch.setattr(builtins, "open", refuse)
    monkeypatch.setattr(io, "open", refuse)
    monkeypatch.setattr(Path, "open", refuse)
    a = read_workload("synthetic:300", seed=5)
    assert a == read_workload("synthetic:300", seed=5)
    assert a.jobs != read_workload("synthetic:300", seed=6).jobs
    assert len(a.jobs) == 300 and len(read_workload("synthetic").jobs) == 1000
    assert a.kind == "synthetic" and a.queues == ("q0",)
    assert all(j.duration is not None and j.duration >= 1.0 for j in a.jobs)
    assert all(j.gpus >= 1 for j in a.jobs)


def test_synthetic_queues_and_load() -> None:
    w = read_workload("synthetic:400", options={"queues": "3"})
    assert w.queues == ("q0", "q1", "q2")
    assert {j.queue for j in w.jobs} == {"q0", "q1", "q2"}
    with pytest.raises(WorkloadError) as info:
        read_workload("synthetic", options={"queues": "none"})
    assert info.value.where == "queues"
    with pytest.raises(WorkloadError) as info:
        read_workload("synthetic", options={"clusters": "a"})
    assert info.value.where == "clusters"
    base = read_workload("synthetic:400", seed=2).jobs[-1].submit_time
    fast = read_workload("synthetic:400", seed=2, load=2.0).jobs[-1].submit_time
    assert 0.35 * base < fast < 0.65 * base


def test_synthetic_arrivals_follow_the_stored_numbers() -> None:
    times = arrivals.sample_arrivals(random.Random(11), 40_000)
    hours = Counter(int(t % 86_400 // 3_600) for t in times)
    for h, share in enumerate(arrivals.HOURLY_SHARE):
        assert abs(hours[h] / len(times) - share) < 0.015
    taus = [arrivals.operational_time(t) for t in times]
    gaps = sorted(b - a for a, b in itertools.pairwise(taus))
    median = dict(arrivals.GAP_QUANTILES)[0.5]
    assert abs(gaps[len(gaps) // 2] - median) < 0.1 * median
    assert 0.8 * arrivals.MEAN_GAP_S < times[-1] / len(gaps) < 1.3 * arrivals.MEAN_GAP_S
    for t in (0.0, 1234.5, 86_400 * 2 + 40_000.0):
        assert arrivals.real_time(arrivals.operational_time(t)) == pytest.approx(t)


def _shared() -> Path:
    require(SHARED / "traces" / "pollux" / "philly.csv", "check the real traces")
    return SHARED


def test_real_data_reads() -> None:
    shared = _shared()
    philly = read_workload("philly:pollux/philly.csv", shared=shared / "traces")
    assert len(philly.jobs) == 82_247 and len(philly.queues) == 15
    one = read_workload(
        "philly:traces/pollux/philly.csv", shared=shared, options={"clusters": "11cb48"}
    )
    assert len(one.jobs) == 16_091
    for sub, count in (("workloads", 160), ("workloads-0.5", 80), ("workloads-2.0", 320)):
        w = read_workload(f"pollux:traces/pollux/{sub}/workload-6.csv", shared=shared)
        assert len(w.jobs) == count  # the relative-load sets hold load x 160 jobs
    gavel = read_workload("gavel:traces/gavel/simulation_throughputs.json", shared=shared)
    assert len(gavel.jobs) == 500
    assert {j.gpus for j in gavel.jobs} == {1, 2, 4, 8}


def test_stored_arrival_numbers_match_the_trace() -> None:
    shared = _shared()
    fitted = arrivals.fit(shared / "traces" / "pollux" / "philly.csv")
    assert tuple(fitted["hourly_share"]) == arrivals.HOURLY_SHARE  # type: ignore[arg-type]
    quantiles = [tuple(q) for q in fitted["gap_quantiles"]]  # type: ignore[attr-defined]
    assert quantiles == list(arrivals.GAP_QUANTILES)
    assert fitted["mean_gap_s"] == arrivals.MEAN_GAP_S
