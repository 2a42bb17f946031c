"""`trainyard simulate` (trainyard.cli.simulate) through typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from test_pollux_speed import shared_pollux
from typer.testing import CliRunner

from trainyard.cli import simulate

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
simulate.register(app)
app.command("noop")(lambda: None)  # keep `simulate` a named subcommand, as in the real app
runner = CliRunner()

BASE = ["simulate", "--workload", "synthetic:300", "--cluster", "4x8", "--seed", "7"]


@pytest.fixture(autouse=True)
def no_shared_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The synthetic workload needs nothing outside the repository: point the shared data
    folder at an empty directory and run from it."""
    empty = tmp_path / "no-shared"
    empty.mkdir()
    monkeypatch.setenv("TRAINYARD_SHARED", str(empty))
    monkeypatch.chdir(empty)


def test_json_is_byte_identical_for_the_same_seed() -> None:
    first = runner.invoke(app, [*BASE, "--json"])
    second = runner.invoke(app, [*BASE, "--json"])
    assert first.exit_code == 0, first.output
    assert first.stdout == second.stdout
    out = json.loads(first.stdout)
    assert out["devices"] == "simulated" and out["jobs"] == 300 and out["gpus"] == 32
    summary = out["summary"]
    assert summary["policy"] == "default" and summary["finished"] == 300
    other = runner.invoke(app, [*BASE[:-1], "8", "--json"])
    assert json.loads(other.stdout)["summary"] != summary


def test_compare_prints_every_policy_side_by_side() -> None:
    result = runner.invoke(app, [*BASE, "--compare", "fifo,tiresias,default"])
    assert result.exit_code == 0, result.output
    assert "simulated GPUs" in result.stdout
    for name in ("fifo", "tiresias", "default"):
        assert any(line.startswith(name) for line in result.stdout.splitlines())
    data = json.loads(runner.invoke(app, [*BASE, "--compare", "fifo,default", "--json"]).stdout)
    assert set(data["policies"]) == {"fifo", "default"}


def test_report_writes_markdown_html_json_and_plots(tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = runner.invoke(app, [*BASE, "--compare", "fifo,default", "--report", str(out)])
    assert result.exit_code == 0, result.output
    names = {p.name for p in out.iterdir()}
    assert {"report.md", "report.html", "summary.json", "jct_cdf.png"} <= names
    text = (out / "report.md").read_text()
    assert "fifo" in text and "default" in text
    assert (out / "jct_cdf.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--workload", "nosuch:x"], "unknown workload kind"),
        (["--workload", "philly:/nonexistent.csv"], "no such file"),
        (["--workload", "synthetic:0"], "synthetic:N"),
        (["--cluster", "16"], "--cluster"),
        (["--profile", "fastest"], "--profile"),
        (["--policy", "fastest"], "--profile"),  # the old spelling still works
        (["--compare", "fifo,fastest"], "--compare"),
        (["--load", "0"], "load"),
        (["--interval", "-1"], "--interval"),
        (["--estimates", "psychic"], "--estimates"),
        (["--option", "novalue"], "--option"),
        (["--workload", "pollux:/nonexistent.csv"], "no such file"),
        (["--elastic-share", "1.5"], "--elastic-share"),
        (["--elastic-share", "-0.1"], "--elastic-share"),
        (["--restart-penalty", "-1"], "--restart-penalty"),
        (["--restart-penalty", "nan"], "--restart-penalty"),
        (["--restart-penalty", "inf"], "--restart-penalty"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], needle: str) -> None:
    result = runner.invoke(app, ["simulate", "--workload", "synthetic:10", *args])
    assert result.exit_code == 2, result.output
    assert needle in result.stderr and "Traceback" not in result.output
    assert len(result.stderr.strip().splitlines()) == 1


def test_malformed_trace_row_names_file_line_and_column(tmp_path: Path) -> None:
    trace = tmp_path / "philly.csv"
    trace.write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2017-10-09 07:01:55,66.0,1,66.0,11cb48\n"
        "2017-10-09 07:02:55,sixty,1,66.0,11cb48\n"
    )
    result = runner.invoke(app, ["simulate", "--workload", f"philly:{trace}"])
    assert result.exit_code == 2
    assert f"{trace}:3:duration" in result.stderr


def test_an_unknown_profile_lists_the_known_ones_once() -> None:
    result = runner.invoke(app, ["simulate", "--workload", "synthetic:10", "-p", "fastest"])
    assert result.exit_code == 2
    assert result.stderr.count("known:") == 1, result.stderr
    assert "tiresias" in result.stderr


def test_the_workload_label_names_its_kind_once(tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = runner.invoke(
        app, ["simulate", "--workload", "synthetic:12", "-p", "fifo", "--report", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "synthetic:12" in (out / "report.md").read_text()
    assert "synthetic:synthetic" not in (out / "report.md").read_text()
    assert "synthetic:synthetic" not in (out / "summary.json").read_text()


def test_the_comparison_is_one_rich_table_never_wrapped() -> None:
    result = runner.invoke(
        app, ["simulate", "--workload", "synthetic:30", "--compare", "fifo,tiresias"]
    )
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    header = next(line for line in lines if "policy" in line)
    assert "JCT avg" in header and header.rstrip().endswith("resize")  # no title cut short
    rows = [line for line in lines if line.split()[0] in ("fifo", "tiresias")]
    assert len(rows) == 2 and "…" not in "".join(rows)


def _table(tmp_path: Path, name: str, duration_s: float, cluster: str) -> list[str]:
    """The printed table of three Philly jobs of `duration_s` each on `cluster`."""
    trace = tmp_path / f"{name}.csv"
    rows = [f"2017-10-09 07:0{i}:00,{duration_s},1,{duration_s},c1" for i in range(3)]
    trace.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n" + "\n".join(rows) + "\n")
    args = ["simulate", "--workload", f"philly:{trace}", "--cluster", cluster]
    result = runner.invoke(app, [*args, "--compare", "fifo,tiresias"])
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


def test_two_runs_of_very_different_scale_print_the_same_units(tmp_path: Path) -> None:
    # seconds-long jobs that never wait, and 10-hour jobs that queue for hours behind each
    # other on one GPU: the old table showed the first in s and the second in h
    small = _table(tmp_path, "small", 30.0, "4x8")
    large = _table(tmp_path, "large", 36_000.0, "1x1")
    header = next(line for line in small if line.startswith("policy"))
    assert header == next(line for line in large if line.startswith("policy"))
    for title in ("JCT avg (h)", "wait avg (min)", "wait p99 (min)", "makespan (h)"):
        assert title in header
    assert "(s)" not in header and "|" not in header
    legend = [line.split("  ")[1] for line in small if line.startswith("  ")]
    assert small[-len(legend) :] == large[-len(legend) :]  # the same legend under both
    assert "util waiting (%)" in legend and "frag (%)" in legend
    small_fifo = next(line for line in small if line.startswith("fifo")).split()
    large_fifo = next(line for line in large if line.startswith("fifo")).split()
    # policy, jobs, done, then JCT avg (h): 30 s, and about 10, 20 and 30 hours on one GPU
    assert small_fifo[3] == "0.01" and 19.9 <= float(large_fifo[3]) <= 20.1


def test_elastic_share_makes_trace_jobs_elastic_and_reports_resizes() -> None:
    def run(share: str) -> dict[str, object]:
        result = runner.invoke(app, [*BASE, "--elastic-share", share, "--json"])
        assert result.exit_code == 0, result.output
        summary: dict[str, object] = json.loads(result.stdout)["summary"]
        return summary

    rigid, half = run("0"), run("0.5")
    assert rigid["resizes"] == 0 and rigid["jobs_resized"] == 0
    assert isinstance(half["jobs_resized"], int) and half["jobs_resized"] > 0
    assert run("0.5") == half  # the same jobs are chosen every time


def test_restart_penalty_is_charged_to_pollux_jobs_too(tmp_path: Path) -> None:
    """--restart-penalty used to be read for trace jobs only: a Pollux run ignored it."""
    profiles = shared_pollux() / "profiles"
    trace = tmp_path / "workload.csv"
    trace.write_text(
        "name,time,application,num_replicas,batch_size\n"
        "cifar10-0,0,cifar10,2,256\n"
        "cifar10-1,120,cifar10,4,512\n"
        "bert-2,300,bert,2,24\n"
    )
    args = ["simulate", "--workload", f"pollux:{trace}", "--cluster", "2x4"]
    args += ["--pollux-profiles", str(profiles), "--json"]

    def run(*extra: str) -> dict[str, object]:
        result = runner.invoke(app, [*args, *extra])
        assert result.exit_code == 0, result.output
        out: dict[str, object] = json.loads(result.stdout)
        return out

    default, free, dear = run(), run("--restart-penalty", "0"), run("--restart-penalty", "300")
    assert (default["restart_s"], free["restart_s"], dear["restart_s"]) == (30.0, 0.0, 300.0)
    jct = [float(r["summary"]["jct_avg"]) for r in (free, default, dear)]  # type: ignore[index]
    assert jct[0] < jct[1] < jct[2]  # the elastic jobs resize, and every restart costs
    rigid = run("--rigid", "--restart-penalty", "0")
    assert rigid["restart_s"] == 0.0
    text = runner.invoke(app, [*args[:-1], "--restart-penalty", "12"]).stdout
    assert "12 s lost per restart" in text.splitlines()[0]
    # the elastic policy is told (found by an outside review: it went on charging 90 s)
    assert "the policies charge 36 s a resize" in text.splitlines()[0]
    assert default["resize_restart_cost_s"] is None  # the profile's own
    assert (free["resize_restart_cost_s"], dear["resize_restart_cost_s"]) == (0.0, 900.0)
    told = run("--restart-penalty", "300", "--resize-restart-cost", "90")
    assert told["resize_restart_cost_s"] == 90.0
    assert told["summary"] != dear["summary"]  # the policy decided otherwise
    bad = runner.invoke(app, [*args, "--resize-restart-cost", "-5"])
    assert bad.exit_code == 2 and "--resize-restart-cost" in bad.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--interval", "1e308"], "--interval: must be 0 to 86,400 seconds"),
        (["--fairshare-half-life", "1e308"], "--fairshare-half-life: must be > 0 days"),
        (["--workload", "synthetic:100000000"], "from 1 to 1,000,000"),
        (["--report", ""], "--report: give a folder"),
    ],
)
def test_bounds_an_outside_review_found_missing(args: list[str], says: str) -> None:
    """Each crashed (IndexError, ZeroDivisionError), ran for ever or wrote report.md into the
    current folder unasked."""
    result = runner.invoke(app, [*BASE, *args])
    assert result.exit_code == 2, result.output
    assert says in result.stderr and "Traceback" not in result.output
    assert list(Path.cwd().iterdir()) == []  # nothing written


def test_a_report_path_that_is_a_file_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "taken"
    file.write_text("mine")
    result = runner.invoke(app, [*BASE, "--report", str(file)])
    assert result.exit_code == 2 and f"{file} is a file; give a folder" in result.stderr
    assert file.read_text() == "mine"


def test_files_that_are_not_text_are_one_line(tmp_path: Path) -> None:
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\x00\xe9\xff nodes: 2\n")
    for args in (
        ["simulate", "--workload", "synthetic:10", "--cluster", str(binary)],
        ["simulate", "--workload", f"philly:{binary}", "--cluster", "4x4"],
        ["simulate", "--workload", f"gavel:{binary}", "--cluster", "4x4:v100"],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert "is not UTF-8 text" in result.stderr and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--rigid"], "--rigid: is for Pollux workloads"),
        (["--profiles", "."], "--profiles: is for Pollux workloads"),
        (["--compare", ""], "--compare: give one or more profile names"),
    ],
)
def test_options_that_would_be_ignored_are_refused(args: list[str], says: str) -> None:
    """Found by an outside review: each was silently ignored (`--compare ''` ran `default`)."""
    result = runner.invoke(app, [*BASE, *args])
    assert result.exit_code == 2, result.output
    assert says in result.stderr


@pytest.mark.parametrize(
    ("row", "says"),
    [
        ("x-1,50,cifar10,2,99999999999999999999", "outside cifar10's profiled global batch"),
        ("x-1,50,cifar10,2,64", "outside cifar10's profiled global batch sizes 128..4096"),
        ("x-1,0,yolov3,64,8", "less than one sample for each of its 64 GPUs"),
    ],
)
def test_a_pollux_batch_outside_the_profiles_is_refused(
    tmp_path: Path, row: str, says: str
) -> None:
    """Found by an outside review: any batch_size was read, and `--rigid` then extrapolated
    far beyond the profiles (mean JCTs of 10^14 hours), with no word."""
    trace = tmp_path / "workload.csv"
    trace.write_text(
        f"name,time,application,num_replicas,batch_size\ncifar10-0,0,cifar10,2,256\n{row}\n"
    )
    for mode in ([], ["--rigid"]):
        result = runner.invoke(
            app,
            ["simulate", "--workload", f"pollux:{trace}", "--cluster", "16x4", "--pollux-profiles",
             str(shared_pollux() / "profiles"), *mode],
        )  # fmt: skip
        assert result.exit_code == 2, result.output
        assert "x-1:batch_size" in result.stderr and says in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


def test_a_pollux_workload_elsewhere_finds_the_shared_profiles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by an outside review: a workload written outside the shared tree was refused
    with "--profiles: ... is not a folder", a flag the user had not given. The shared
    data's profiles are used then, and without them the error says what was looked for."""
    trace = tmp_path / "mine" / "workload.csv"
    trace.parent.mkdir()
    trace.write_text("name,time,application,num_replicas,batch_size\ncifar10-0,0,cifar10,2,256\n")
    args = ["simulate", "--workload", f"pollux:{trace}", "--cluster", "2x4", "--json"]
    monkeypatch.setenv("TRAINYARD_SHARED", str(shared_pollux().parent.parent))
    ran = runner.invoke(app, args)
    assert ran.exit_code == 0, ran.output
    monkeypatch.setenv("TRAINYARD_SHARED", str(tmp_path / "nothing"))
    refused = runner.invoke(app, args)
    assert refused.exit_code == 2
    assert refused.stderr.startswith("error: --pollux-profiles: ")
    assert "$TRAINYARD_SHARED/traces/pollux" in refused.stderr
