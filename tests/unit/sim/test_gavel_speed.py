"""GavelSpeed: synthetic throughput files and Gavel's published `simulation_throughputs.json`.

The shared folder is found from TRAINYARD_SHARED (default: <repo>/../shared). Missing data is a
skip locally and a failure when CI=true.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from shared_data import SHARED, require
from trainyard.sim.gavel_speed import GavelSpeed
from trainyard.sim.workload import SimJob, WorkloadError

THROUGHPUTS = SHARED / "traces" / "gavel" / "simulation_throughputs.json"

R50 = "ResNet-50 (batch size 64)"


def table(v100: float, k80: float, v100_u: float | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "v100": {
            f"('{R50}', 1)": {"null": v100, f"('{R50}', 1)": [1.0, 1.0]},
            f"('{R50}', 4)": {"null": 3 * v100},
            "('A3C', 1)": {"null": 7.0},
        },
        "k80": {f"('{R50}', 1)": {"null": k80}, f"('{R50}', 4)": {"null": 0.0}},
    }
    if v100_u is not None:
        data["v100_unconsolidated"] = {f"('{R50}', 4)": {"null": v100_u}}
    return data


def write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "tputs.json"
    path.write_text(json.dumps(data, indent=4))
    return path


def job(gpus: int = 1, duration: float | None = 100.0, app: str = R50) -> SimJob:
    return SimJob("j", 0.0, gpus, duration=duration, application=app)


def test_work_and_rates(tmp_path: Path) -> None:
    model = GavelSpeed(write(tmp_path, table(v100=4.0, k80=1.0)))
    assert (model.name, model.first_start_s, model.restart_s) == ("gavel", 0.0, 0.0)
    assert GavelSpeed(write(tmp_path, table(4.0, 1.0)), restart_s=20.0).restart_s == 20.0
    assert model.work(job()) == 400.0  # 100 s x 4 steps/s on the reference
    assert model.rate(job(), (1,), "k80") == 1.0
    assert model.isolated_rate(job()) == 4.0
    assert model.work(job(4)) / model.rate(job(4), (4,), "v100") == pytest.approx(100.0)
    assert model.isolated_rate(job(app="A3C")) == 7.0


def test_unconsolidated_entry_when_spanning_nodes(tmp_path: Path) -> None:
    model = GavelSpeed(write(tmp_path, table(v100=4.0, k80=1.0, v100_u=9.0)))
    assert model.rate(job(4), (4,), "v100") == 12.0
    assert model.rate(job(4), (2, 2), "v100") == 9.0
    assert model.isolated_rate(job(4)) == 12.0
    # no k80_unconsolidated: the consolidated table is used
    assert model.rate(job(1), (1,), "k80") == 1.0


def test_reference_type(tmp_path: Path) -> None:
    model = GavelSpeed(write(tmp_path, table(v100=4.0, k80=2.0)), reference="k80")
    assert model.work(job()) == 200.0
    assert model.isolated_rate(job()) == 2.0
    with pytest.raises(WorkloadError, match="unknown worker type"):
        GavelSpeed(write(tmp_path, table(v100=4.0, k80=2.0)), reference="a100")


def test_zero_throughput_cannot_run(tmp_path: Path) -> None:
    model = GavelSpeed(write(tmp_path, table(v100=4.0, k80=1.0)))
    assert not model.runs_on(job(4), "k80")
    assert model.runs_on(job(4), "v100")
    with pytest.raises(WorkloadError, match="cannot run"):
        model.rate(job(4), (4,), "k80")


def test_job_errors(tmp_path: Path) -> None:
    model = GavelSpeed(write(tmp_path, table(v100=4.0, k80=1.0)))
    with pytest.raises(WorkloadError, match="no throughput"):
        model.rate(job(app="GPT"), (1,), "v100")
    with pytest.raises(WorkloadError, match="no throughput"):
        model.rate(job(2), (2,), "v100")  # scale factor 2 not measured
    with pytest.raises(WorkloadError, match="duration"):
        model.work(job(duration=None))
    with pytest.raises(WorkloadError, match="unknown worker type"):
        model.rate(job(), (1,), "t4")


def test_missing_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError) as e:
        GavelSpeed(tmp_path / "none.json")
    assert e.value.where.endswith("none.json:0:0")
    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "v100": {\n    oops\n}')
    with pytest.raises(WorkloadError) as e:
        GavelSpeed(bad)
    assert e.value.where == f"{bad}:3:5"


def test_bad_key_and_throughput_point_at_their_line(tmp_path: Path) -> None:
    data = table(v100=4.0, k80=1.0)
    data["k80"]["ResNet-50 x1"] = {"null": 1.0}
    path = write(tmp_path, data)
    with pytest.raises(WorkloadError, match="is not") as e:
        GavelSpeed(path)
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if "ResNet-50 x1" in t)
    assert e.value.where == f"{path}:{line}:9"
    data = table(v100=4.0, k80=1.0)
    data["v100"]["('A3C', 1)"] = {"null": "fast"}
    with pytest.raises(WorkloadError, match="throughput >= 0"):
        GavelSpeed(write(tmp_path, data))


def test_real_throughputs() -> None:
    require(THROUGHPUTS, "check Gavel's data")
    model = GavelSpeed(THROUGHPUTS)
    r50 = job()
    # the README's example: ResNet-50 bs64 on 1 GPU
    assert model.rate(r50, (1,), "k80") == pytest.approx(0.619, abs=1e-3)
    assert model.rate(r50, (1,), "p100") == pytest.approx(2.619, abs=1e-3)
    assert model.rate(r50, (1,), "v100") == pytest.approx(4.395, abs=1e-3)
    assert model.work(r50) == pytest.approx(439.5, abs=0.1)
    big = SimJob("b", 0.0, 2, duration=10.0, application="ResNet-50 (batch size 128)")
    assert not model.runs_on(big, "k80")
    four = job(4)
    spread, packed = model.rate(four, (2, 2), "v100"), model.rate(four, (4,), "v100")
    assert spread > 0 and packed > 0 and spread != packed
    for worker, jobs in model.tputs.items():
        assert len(jobs) >= 77, worker
