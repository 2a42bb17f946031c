"""`trainyard schedule`: JSON and table output, one-line errors with exit code 2, examples."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from trainyard.cli import schedule
from trainyard.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples" / "scenarios").glob("*.*"))
KEYS = [
    "profile", "now", "placements", "evictions", "reservations", "pending", "resizes",
    "not_grown",
]  # fmt: skip


def _app() -> typer.Typer:
    app = typer.Typer(pretty_exceptions_enable=False)

    @app.callback()
    def _root() -> None:
        """Test app with only the schedule command."""

    schedule.register(app)
    return app


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(_app(), ["schedule", *args], env={"COLUMNS": "200"})
    return result.exit_code, result.stdout, result.stderr


def test_there_are_examples() -> None:
    assert 4 <= len(EXAMPLES) <= 8
    assert {p.suffix for p in EXAMPLES} == {".yaml", ".json"}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples_load_and_print_valid_json(path: Path) -> None:
    scenario = load_scenario(path)
    assert scenario.description, "every example says what it shows"
    code, out, err = invoke("--scenario", str(path), "--json")
    assert code == 0, err
    decision = json.loads(out)
    if scenario.steps:  # one decision per cycle; the first is checked like a single one
        cycles = decision["cycles"]
        assert [list(c)[:2] for c in cycles] == [["step", "cycle"]] * len(cycles)
        assert len(cycles) == sum(step.repeat for step in scenario.steps)
        decision = {k: cycles[0][k] for k in KEYS}
        pending_ids = {j.id for j in scenario.snapshot.pending} | {
            j.id for j in scenario.steps[0].submit
        }
    else:
        pending_ids = {j.id for j in scenario.snapshot.pending}
    assert list(decision) == KEYS
    placed = {p["job"] for p in decision["placements"]}
    assert placed <= pending_ids
    assert set(decision["pending"]) | placed >= pending_ids
    for reason in decision["pending"].values():
        assert list(reason) == ["code", "message", "estimated_start"] and reason["message"]
    code2, out2, _ = invoke("--scenario", str(path), "--json")
    assert (code2, out2) == (code, out), "output is deterministic"


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples_print_tables(path: Path) -> None:
    code, out, err = invoke("--scenario", str(path))
    assert code == 0, err
    decision = json.loads(invoke("--scenario", str(path), "--json")[1])
    if "cycles" in decision:
        assert out.lstrip("─ ").startswith("step 0, cycle 0")
        out = out.split("\n", 1)[1]
        decision = decision["cycles"][0]
    assert out.startswith(f"profile {decision['profile']} at t=")
    for section, title in (("placements", "Placements"), ("pending", "Pending")):
        assert (title in out) == bool(decision[section])
    for p in decision["placements"]:
        assert p["job"] in out
    for job, reason in decision["pending"].items():
        assert job in out and reason["code"] in out


ELASTIC = """
description: an elastic job grows into idle GPUs; a younger one is held by its resize hold
now: 10000
nodes: [{name: "n{i}", count: 2, gpus: 4}]
running:
  - {id: young, gpus: 1, min_gpus: 1, max_gpus: 4, started_at: 9970, submit_time: 0,
     placement: [{node: n0, devices: [0]}],
     elastic: {batch: 128, max_batch: 2048, max_local_batch: 256, grad_sqr: 1.0, grad_var: 4.0,
               samples: [{gpus: 1, nodes: 1, batch: 128, step_time: 0.40}]}}
  - {id: other, gpus: 1, min_gpus: 1, max_gpus: 2, started_at: 0,
     placement: [{node: n0, devices: [1]}],
     elastic: {batch: 128, max_batch: 2048, max_local_batch: 256, grad_sqr: 1.0, grad_var: 4.0,
               samples: [{gpus: 1, nodes: 1, batch: 128, step_time: 0.40}]}}
"""


def test_resizes_and_jobs_not_grown_are_shown(tmp_path: Path) -> None:
    # Before, `trainyard schedule` printed neither: an elastic scenario looked like nothing
    # happened.
    path = tmp_path / "elastic.yaml"
    path.write_text(ELASTIC)
    out = json.loads(invoke("--scenario", str(path), "--json")[1])
    (resize,) = out["resizes"]
    assert (resize["job"], resize["from_gpus"], resize["gpus"]) == ("other", 1, 2)
    assert resize["reason"].startswith("grown 1 -> 2")
    assert out["not_grown"]["young"]["until"] == 10030.0
    code, text, _err = invoke("--scenario", str(path))
    assert code == 0 and "1 resized" in text and "Resizes" in text and "1 -> 2" in text
    assert "Not grown" in text and "resize hold" in text


def test_profile_option_overrides_the_scenario() -> None:
    path = ROOT / "examples" / "scenarios" / "workstation.yaml"
    out = json.loads(invoke("--scenario", str(path), "--json", "--profile", "fifo")[1])
    assert out["profile"] == "fifo"


@pytest.mark.parametrize(
    ("text", "args", "fragment"),
    [
        (None, (), "cannot read the file"),
        ("nodes: [\n", (), "not valid YAML"),
        ("nodes: [{name: a, gpus: 8}]\npending: [{id: j, gpus: -1}]\n", (), "pending[0].gpus"),
        ("nodes: [{name: a, gpus: 8}]\npending: [{id: j, gpu: 1}]\n", (), "did you mean 'gpus'"),
        ("nodes: [{name: a, gpus: 8}]\n", ("--profile", "fifoo"), "unknown profile 'fifoo'"),
        ("nodes: [{name: a, gpus: 8}]\nprofile: nope\n", (), "profile: unknown profile"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(
    tmp_path: Path, text: str | None, args: tuple[str, ...], fragment: str
) -> None:
    path = tmp_path / "s.yaml"
    if text is not None:
        path.write_text(text)
    code, out, err = invoke("--scenario", str(path), *args)
    assert code == 2
    assert out == ""
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert fragment in err and "Traceback" not in err


def test_scenario_option_is_required() -> None:
    code, _out, _err = invoke()
    assert code == 2


def test_installed_command() -> None:
    path = ROOT / "examples" / "scenarios" / "priority-preemption.yaml"
    cmd = [sys.executable, "-m", "trainyard.cli.main", "schedule", "-s", str(path), "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["evictions"][0]["job"] == "batch-low"
    bad = subprocess.run(
        [*cmd[:-2], str(path) + ".missing"], capture_output=True, text=True, timeout=60, check=False
    )
    assert bad.returncode == 2 and bad.stderr.startswith("error: ") and not bad.stdout


def test_steps_run_cycles_with_time_advancing() -> None:
    """The multi-cycle example: a reclaim in the first cycle, then nothing moves (no
    ping-pong) until research's long job ends and its evicted job starts again."""
    path = ROOT / "examples" / "scenarios" / "reclaim-settles.yaml"
    code, out, err = invoke("--scenario", str(path), "--json")
    assert code == 0, err
    cycles = json.loads(out)["cycles"]
    assert [(c["step"], c["cycle"], c["now"]) for c in cycles] == [
        (0, 0, 1000.0), (1, 0, 1060.0), (1, 1, 1120.0), (1, 2, 1180.0), (2, 0, 1240.0)
    ]  # fmt: skip
    assert [e["job"] for e in cycles[0]["evictions"]] == ["res-big"]
    assert [p["job"] for p in cycles[0]["placements"]] == ["prod-train"]
    assert all(not c["placements"] and not c["evictions"] for c in cycles[1:4])
    assert [p["job"] for p in cycles[4]["placements"]] == ["res-big"]


def test_a_step_naming_a_job_that_is_not_running_is_an_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "now: 0\nnodes: [{name: n0, gpus: 2}]\npending: [{id: a, gpus: 1}]\n"
        "steps:\n  - {advance: 10}\n  - {finish: [ghost]}\n"
    )
    code, _out, err = invoke("--scenario", str(bad))
    assert code == 2
    assert err.startswith("error: ") and "steps[1].finish[0]" in err and "ghost" in err
    assert "Traceback" not in err
    bad.write_text("now: 0\nnodes: [{name: n0, gpus: 2}]\nsteps: [{repeat: 0}]\n")
    code, _out, err = invoke("--scenario", str(bad))
    assert code == 2 and "steps[0].repeat" in err
