"""`trainyard simulate` with jobs larger than the cluster (`--oversize`), the notes the header
prints about them and about `--elastic-share`, and the GPU-hours column (outside review 9:
one oversize job of the Philly trace stopped a whole run with an error naming neither the
file nor a way out, and a policy that bought JCT with GPU-time read as a plain win)."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from typer.testing import CliRunner

from trainyard.cli import simulate
from trainyard.sim.workload import SimJob, larger_than

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
simulate.register(app)
app.command("noop")(lambda: None)
runner = CliRunner()

TRACE = (
    "timestamp,duration,num_gpus,gpu_time,cluster\n"
    "2017-10-09 07:01:55,66.0,1,66.0,11cb48\n"
    "2017-10-09 07:02:55,600.0,4096,1,11cb48\n"
    "2017-10-09 07:03:55,300.0,2,600,11cb48\n"
    "2017-10-09 07:04:55,300.0,16,600,11cb48\n"
)


def _trace(tmp_path: Path) -> str:
    path = tmp_path / "trace.csv"
    path.write_text(TRACE)
    return f"philly:{path}"


def test_an_oversize_job_is_refused_naming_it_its_line_and_the_way_out(tmp_path: Path) -> None:
    spec = _trace(tmp_path)
    result = runner.invoke(app, ["simulate", "-w", spec, "--cluster", "2x4"])
    assert result.exit_code == 2
    error = result.stderr
    assert "Traceback" not in result.output
    assert spec in error and "2 job(s) need more GPUs than the cluster's 8" in error
    assert "philly-3 (4096 GPUs)" in error and "philly-5 (16 GPUs)" in error
    assert "line N of the file" in error
    assert "at least 4096 GPUs" in error and "--oversize skip" in error


def test_skip_leaves_them_out_and_says_so(tmp_path: Path) -> None:
    spec = _trace(tmp_path)
    result = runner.invoke(app, ["simulate", "-w", spec, "-c", "2x4", "--oversize", "skip"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("2 jobs of ")
    assert "left out (--oversize skip): 2 job(s) larger than the cluster" in lines[1]
    data = json.loads(
        runner.invoke(
            app, ["simulate", "-w", spec, "-c", "2x4", "--oversize", "skip", "--json"]
        ).stdout
    )
    assert data["jobs"] == 2 and data["left_out"] == ["philly-3", "philly-5"]
    assert data["summary"]["finished"] == 2


def test_a_bad_oversize_value_and_a_cluster_nothing_fits_are_refused(tmp_path: Path) -> None:
    spec = _trace(tmp_path)
    bad = runner.invoke(app, ["simulate", "-w", spec, "--oversize", "maybe"])
    assert bad.exit_code == 2 and "--oversize: must be fail or skip" in bad.stderr
    path = tmp_path / "big.csv"
    path.write_text(TRACE.splitlines()[0] + "\n" + TRACE.splitlines()[2] + "\n")
    none = runner.invoke(app, ["simulate", "-w", f"philly:{path}", "--oversize", "skip"])
    assert none.exit_code == 2 and "no job fits on 64 GPUs" in none.stderr


def test_elastic_jobs_larger_than_the_cluster_are_capped_and_the_header_says_so(
    tmp_path: Path,
) -> None:
    spec = _trace(tmp_path)
    args = ["simulate", "-w", spec, "-c", "2x4", "--elastic-share", "1", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["left_out"] == [] and data["summary"]["finished"] == 4
    capped, share = data["notes"]
    assert capped.startswith("2 elastic job(s) ask for more than the cluster's 8 GPUs")
    assert "philly-3 (4096 GPUs)" in capped
    assert share.startswith("4 of 4 jobs elastic") and "not across shares" in share


def test_larger_than_sorts_unfit_from_capped() -> None:
    jobs = (
        SimJob("rigid", 0, 16),
        SimJob("fits", 0, 4),
        SimJob("elastic", 0, 16, min_gpus=2, max_gpus=32),
        SimJob("elastic-min", 0, 16, min_gpus=12, max_gpus=32),
    )
    unfit, capped = larger_than(jobs, 8)
    assert [j.id for j in unfit] == ["rigid", "elastic-min"]
    assert [j.id for j in capped] == ["elastic"]


def test_the_table_shows_the_gpu_hours_each_policy_spent(tmp_path: Path) -> None:
    spec = _trace(tmp_path)
    args = ["simulate", "-w", spec, "-c", "4x4", "--oversize", "skip", "--compare"]
    table = runner.invoke(app, [*args, "fifo,default"])
    assert table.exit_code == 0, table.output
    data = json.loads(runner.invoke(app, [*args, "fifo,default", "--json"]).stdout)
    header = next(line for line in table.stdout.splitlines() if line.startswith("policy"))
    assert "makespan (h)   GPU-h   util (%)" in header
    for name, summary in data["policies"].items():
        row = next(line for line in table.stdout.splitlines() if line.startswith(name))
        assert f"{summary['gpu_hours']:.2f}" in row.split()
    assert "GPU-h" in table.stdout.split("resize", 1)[1]  # and the legend explains it
