"""`trainyard demo`: a simulator run on a synthetic day, printed for people."""

from __future__ import annotations

from typer.testing import CliRunner

from trainyard import demo
from trainyard.cli.main import app


def _run(**kwargs: object) -> tuple[list[str], object]:
    lines: list[str] = []
    result = demo.run_day(echo=lines.append, **kwargs)  # type: ignore[arg-type]
    return lines, result


def test_demo_is_a_simulator_run_that_finishes_every_job() -> None:
    lines, result = _run(seed=3, jobs=120, show=15)
    assert "VIRTUAL devices" in lines[0]
    records = result.records  # type: ignore[attr-defined]
    assert len(records) == 120
    assert all(r.end is not None for r in records)
    detail = [line for line in lines[1:] if "  hour  " not in line]
    assert 0 < len(detail) <= 15  # at most `show` decisions in full
    assert any("  hour  " in line for line in lines)


def test_demo_is_deterministic() -> None:
    first, _ = _run(seed=5, jobs=80, show=30)
    again, _ = _run(seed=5, jobs=80, show=30)
    assert first == again


def test_demo_workload_keeps_its_tenants_and_flags() -> None:
    work = demo.workload(seed=1, jobs=200)
    assert {j.queue for j in work.jobs} == set(demo.QUEUES)
    assert all(j.duration is not None and 120 <= j.duration <= 8 * 3600 for j in work.jobs)
    assert any(not j.preemptible for j in work.jobs)
    assert all(j.preemptible for j in work.jobs if j.queue != "product")


def test_demo_cli_prints_the_summary_and_refuses_bad_options() -> None:
    runner = CliRunner()
    out = runner.invoke(app, ["demo", "--jobs", "40", "--show", "5"])
    assert out.exit_code == 0, out.output
    assert "finished 40 jobs" in out.output
    assert "GPU utilisation over the run" in out.output
    bad = runner.invoke(app, ["demo", "--jobs", "0"])
    assert bad.exit_code == 2 and "--jobs" in bad.output
    wrong = runner.invoke(app, ["demo", "--profile", "nope"])
    assert wrong.exit_code == 2 and "--profile" in wrong.output
