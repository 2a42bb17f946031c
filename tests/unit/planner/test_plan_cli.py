"""`trainyard plan` (trainyard.cli.plan) through typer's CliRunner on an app with only `plan`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from shared_data import SHARED, require
from trainyard.cli import plan
from trainyard.planner.search import HEADROOM

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
plan.register(app)
# A second command keeps `plan` a named subcommand, as in the real app.
app.command("noop")(lambda: None)
runner = CliRunner()


def test_json_output_parses_and_is_ranked() -> None:
    result = runner.invoke(
        app, ["plan", "--model", "gpt3-1.3b", "--gpus", "8", "--gpu-type", "H100", "--json"]
    )
    assert result.exit_code == 0, result.output
    plans = json.loads(result.stdout)["plans"]
    assert len(plans) == 5
    times = [p["step_time_s"]["iteration_s"] for p in plans]
    assert times == sorted(times)
    for p in plans:
        lay = p["layout"]
        assert lay["tp"] * lay["pp"] * lay["dp"] == 8
        assert p["memory_gb"]["total"] <= HEADROOM * 80
        assert p["tokens_per_s"] > 0 and 0 < p["mfu"] < 1
        # the rate as Megatron-LM logs it (attention counted causal): lower by one ratio
        assert p["mfu_causal"] < p["mfu"]
        ratio = p["tflops_per_gpu_causal"] / p["tflops_per_gpu"]
        assert ratio == pytest.approx(p["mfu_causal"] / p["mfu"])


def test_top_and_nodes_of() -> None:
    args = ["plan", "-m", "gpt3-1.3b", "-n", "16", "-g", "A100", "--top", "2", "--json"]
    result = runner.invoke(app, [*args, "--nodes-of", "2"])
    assert result.exit_code == 0, result.output
    plans = json.loads(result.stdout)["plans"]
    assert len(plans) == 2
    assert all(p["layout"]["tp"] <= 2 for p in plans)


def test_no_flash_attention_plans_with_stored_scores() -> None:
    args = ["plan", "-m", "gpt3-1.3b", "-n", "8", "-g", "A100", "--top", "50", "--json"]
    flash = json.loads(runner.invoke(app, args).stdout)["plans"]
    result = runner.invoke(app, [*args, "--no-flash-attention"])
    assert result.exit_code == 0, result.output
    stored = json.loads(result.stdout)["plans"]
    assert all(p["layout"]["flash_attention"] for p in flash)
    assert not any(p["layout"]["flash_attention"] for p in stored)
    assert flash[0]["step_time_s"]["iteration_s"] <= stored[0]["step_time_s"]["iteration_s"]
    table = ["plan", "-m", "gpt3-1.3b", "-n", "8", "-g", "A100"]
    assert "(flash attention)" in runner.invoke(app, table).stdout
    assert "(stored scores)" in runner.invoke(app, [*table, "--no-flash-attention"]).stdout


def test_precision_option_plans_fp8_where_the_gpu_has_it() -> None:
    args = ["plan", "-m", "llama3-8b", "-n", "8", "--top", "1", "--json"]
    bf16 = json.loads(runner.invoke(app, [*args, "-g", "H100"]).stdout)["plans"][0]
    result = runner.invoke(app, [*args, "-g", "H100", "--precision", "FP8"])
    assert result.exit_code == 0, result.output
    fp8 = json.loads(result.stdout)["plans"][0]
    assert fp8["step_time_s"]["iteration_s"] < bf16["step_time_s"]["iteration_s"]
    table = runner.invoke(app, ["plan", "-m", "llama3-8b", "-n", "8", "-g", "H100",
                                "--precision", "fp8", "--launch"])  # fmt: skip
    assert "fp8 GEMMs; MFU over the 16-bit" in table.stdout and "--fp8-format" in table.stdout
    no_fp8 = runner.invoke(app, [*args, "-g", "A100", "--precision", "fp8"])
    assert no_fp8.exit_code == 0 and "no fp8 tensor cores; planned in bf16" in no_fp8.output
    bad = runner.invoke(app, [*args, "-g", "H100", "--precision", "int4"])
    assert bad.exit_code == 2 and "precision: must be one of bf16, fp16, fp8" in bad.output


def test_table_output() -> None:
    result = runner.invoke(app, ["plan", "--model", "sc21-1.7b", "--gpus", "32", "-g", "A100"])
    assert result.exit_code == 0, result.output
    assert "sc21-1.7b on 32 x A100-80GB" in result.stdout
    for header in ("tp", "pp", "dp", "zero", "recompute", "mem GB", "step s", "MFU"):
        assert header in result.stdout
    # The rates' FLOP count is said, with how much lower Megatron-LM's log would put them:
    # GPT-1.7B at 2,048 tokens (h 2,304): the layers' s/(12h) of 1 + s/(6h), less the logits.
    text = " ".join(result.stdout.split())
    assert "count the whole attention score matrix" in text
    assert "Megatron-LM logs its causal half, 6.0% lower here" in text
    # and which kernel the fused attention is priced as (other kernels run slower on Hopper)
    assert "priced as cuDNN's fused kernel" in text
    stored = runner.invoke(
        app, ["plan", "-m", "sc21-1.7b", "-n", "32", "-g", "A100", "--no-flash-attention"]
    )
    assert stored.exit_code == 0 and "stored scores" in stored.stdout, stored.output
    assert "priced as cuDNN" not in " ".join(stored.stdout.split())


def test_model_from_yaml_file(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text("{preset: gpt3-125m, global_batch: 64}\n")
    result = runner.invoke(app, ["plan", "-m", str(path), "-n", "4", "-g", "H100", "--json"])
    assert result.exit_code == 0, result.output
    assert all(
        p["layout"]["tp"] * p["layout"]["pp"] * p["layout"]["dp"] == 4
        for p in json.loads(result.stdout)["plans"]
    )


def test_bad_preset_is_one_helpful_line_and_exit_2() -> None:
    result = runner.invoke(app, ["plan", "--model", "gpt3-13bb", "--gpus", "8", "-g", "H100"])
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: model: unknown model preset 'gpt3-13bb'")
    assert "Did you mean 'gpt3-13b'" in lines[0]


def test_other_bad_inputs_exit_2(tmp_path: Path) -> None:
    cases = [
        (["-m", "gpt3-1.3b", "-n", "0", "-g", "H100"], "error: --gpus:"),
        (["-m", "gpt3-1.3b", "-n", "8", "-g", "H900"], "error: --gpu-type: unknown GPU"),
        (["-m", "gpt3-175b", "-n", "8", "-g", "H100"], "smallest GPU count that fits"),
        (["-m", str(tmp_path / "missing.yaml"), "-n", "8", "-g", "H100"], "not found"),
        # sizing's fields by their flags; absurd but finite goals refused
        (["-m", "gpt3-1.3b", "-g", "H100", "--max-gpus", "8", "--tokens", "1e308"],
         "error: --tokens: must be a number of tokens > 0 and <= 1e+17"),
        (["-m", "gpt3-1.3b", "-g", "H100", "--max-gpus", "8", "--tokens", "1e9",
          "--price", "1e300"], "error: --price: must be a price >= 0"),
        (["-m", "gpt3-1.3b", "-g", "H100", "--max-gpus", "8", "--tokens", "1e9",
          "--deadline", "-1"], "error: --deadline: must be a number of hours > 0"),
    ]  # fmt: skip
    for args, expected in cases:
        result = runner.invoke(app, ["plan", *args])
        assert result.exit_code == 2, (args, result.output)
        assert expected in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


def _published_csv() -> Path:
    return require(SHARED / "planner" / "published_configs.csv", "evaluate the time model")


def test_evaluate_prints_predicted_vs_published() -> None:
    path = _published_csv()
    result = runner.invoke(app, ["plan", "--evaluate", str(path), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert len(out["rows"]) >= 30
    assert out["median_abs_error"] <= 0.07  # the target for the median
    assert out["max_abs_error"] <= 0.15  # ... and for every row
    fitted = sum(r["calibration"] for r in out["rows"])
    repeats = sum(r["repeats"] for r in out["rows"])  # README_2021_04 prints SC21_T1 again
    assert fitted == 16 and repeats == out["repeating_calibration"]["rows"] >= 10
    assert out["held_out"]["rows"] == len(out["rows"]) - fitted - repeats
    assert out["held_out"]["max_abs_error"] <= out["max_abs_error"]
    table = runner.invoke(app, ["plan", "--evaluate", str(path)])
    assert "median |error|" in table.stdout
    assert "held out (not * or =)" in table.stdout


def test_plan_needs_a_model_or_evaluate() -> None:
    result = runner.invoke(app, ["plan", "--gpus", "8"])
    assert result.exit_code == 2
    assert "--model" in result.output and "--evaluate" in result.output
    missing = runner.invoke(app, ["plan", "--evaluate", "/no/such.csv"])
    assert missing.exit_code == 2 and "not found" in missing.output


def test_evaluate_finds_a_relative_path_under_trainyard_shared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # as `simulate --workload` does: the path as given when it exists, else under
    # $TRAINYARD_SHARED; the error names every place tried
    # the real one, if there is one (test_evaluate_prints_predicted_vs_published requires it)
    published = (SHARED / "planner" / "published_configs.csv").resolve()
    shared, elsewhere = tmp_path / "shared", tmp_path / "elsewhere"
    (shared / "planner").mkdir(parents=True)
    elsewhere.mkdir()
    (shared / "planner" / "mine.csv").write_text("table_id,model\n")  # no usable row
    monkeypatch.setenv("TRAINYARD_SHARED", str(shared))
    monkeypatch.chdir(elsewhere)
    found = runner.invoke(app, ["plan", "--evaluate", "planner/mine.csv"])
    assert found.exit_code == 2  # read, and refused for its content, under shared/
    assert f"{shared / 'planner' / 'mine.csv'}: " in found.stderr
    (elsewhere / "planner").mkdir()
    (elsewhere / "planner" / "mine.csv").write_text("table_id\n")  # the path as given wins
    local = runner.invoke(app, ["plan", "--evaluate", "planner/mine.csv"])
    assert "--evaluate: planner/mine.csv: " in local.stderr
    missing = runner.invoke(app, ["plan", "--evaluate", "planner/none.csv"])
    assert missing.exit_code == 2 and len(missing.stderr.strip().splitlines()) == 1
    assert "not found" in missing.stderr
    assert f"tried planner/none.csv, {shared / 'planner' / 'none.csv'}" in missing.stderr
    if published.exists():  # the real file, named relative to the shared folder
        monkeypatch.setenv("TRAINYARD_SHARED", str(published.parents[1]))
        real = runner.invoke(app, ["plan", "--evaluate", "planner/published_configs.csv"])
        assert real.exit_code == 0, real.output
        assert "median |error|" in real.stdout


def test_json_carries_launch_settings_of_the_best_plan() -> None:
    args = ["plan", "-m", "gpt3-13b", "-n", "64", "-g", "H100", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    best = out["plans"][0]["layout"]
    launch = out["launch"]
    assert launch["nodes"] * launch["gpus_per_node"] == 64
    megatron = " ".join(launch["megatron"])
    assert f"--tensor-model-parallel-size {best['tp']}" in megatron
    assert launch["env"]["TRAINYARD_PLAN_TP"] == str(best["tp"])


def test_launch_flag_prints_torchrun_and_deepspeed() -> None:
    args = ["plan", "-m", "gpt3-13b", "-n", "16", "-g", "A100", "--launch", "--top", "1"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "torchrun --nnodes=2 --nproc-per-node=8" in result.stdout
    assert '"train_batch_size"' in result.stdout
    assert "export TRAINYARD_PLAN_TP=" in result.stdout


def test_allocation_replans_for_uneven_nodes() -> None:
    args = ["plan", "-m", "gpt3-1.3b", "--allocation", "8,4,4", "-g", "A100", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["allocation"] == [8, 4, 4] and out["gpus"] == 16
    for p in out["plans"]:
        lay = p["layout"]
        assert lay["tp"] * lay["pp"] * lay["dp"] == 16
        assert 4 % lay["tp"] == 0  # a tensor-parallel group fits on every node
    table = runner.invoke(app, ["plan", "-m", "gpt3-1.3b", "--allocation", "8,4,4", "-g", "A100"])
    assert "(8,4,4 GPUs per node, flash attention)" in table.stdout


def test_max_gpus_sizes_for_a_goal() -> None:
    args = ["plan", "-m", "gpt3-1.3b", "-g", "H100", "--max-gpus", "64", "--tokens", "1e10"]
    result = runner.invoke(app, [*args, "--objective", "cost", "--price", "2.5", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    costs = [o["cost"] for o in out["options"]]
    assert costs == sorted(costs) and out["gpus"] == out["options"][0]["gpus"] <= 64
    table = runner.invoke(app, args)
    assert table.exit_code == 0, table.output
    assert "GPU counts, best first" in table.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--gpus", "8", "--max-gpus", "8"], "only one of"),
        (["--allocation", "8,x"], "--allocation"),
        (["--allocation", "8,,8"], "--allocation"),  # a typo, not two nodes
        (["--allocation", "8,0"], "--allocation: node 1 has 0 GPUs"),  # the flag, not a field
        (["--allocation", "8,-1"], "--allocation: node 1 has -1 GPUs"),
        (["--max-gpus", "64", "--objective", "fastest"], "objective"),
        (["--max-gpus", "64", "--tokens", "-5"], "tokens"),
        (["--max-gpus", "64", "--price", "-1", "--objective", "cost"], "price"),
    ],
)
def test_sizing_and_allocation_errors_name_the_option(args: list[str], needle: str) -> None:
    result = runner.invoke(app, ["plan", "-m", "gpt3-1.3b", "-g", "H100", *args])
    assert result.exit_code == 2
    assert needle in result.stderr and "Traceback" not in result.output


def test_job_spec_with_model_gets_gpus_layout_and_environment(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: pretrain\n"
        "model: {preset: gpt3-1.3b, global_batch: 256}\n"
        "gpu_type: H100\n"
        "planner: {max_gpus: 32, tokens: 2e10, objective: time}\n"
        "command: [python, train.py]\n"
    )
    result = runner.invoke(app, ["plan", "--job", str(spec), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert 1 <= out["gpus"] <= 32
    assert out["env"]["TRAINYARD_PLAN_GPUS"] == str(out["gpus"])
    lay = out["layout"]
    assert lay["tp"] * lay["pp"] * lay["dp"] == out["gpus"]
    text = runner.invoke(app, ["plan", "--job", str(spec)])
    assert text.exit_code == 0 and "torchrun" in text.stdout


def test_bad_job_specs_exit_2(tmp_path: Path) -> None:
    cases = {
        "missing.yaml": None,
        "bad.yaml": "model: [unclosed\n",
        "list.yaml": "- 1\n",
        "nomax.yaml": "model: gpt3-1.3b\ngpu_type: H100\n",
        "unknown.yaml": "model: gpt3-1.3b\ngpu_type: H100\nplanner: {max_gpu: 8}\n",
    }
    needles = {
        "missing.yaml": "not found",
        "bad.yaml": "not valid YAML",
        "list.yaml": "mapping",
        "nomax.yaml": "planner.max_gpus",
        "unknown.yaml": "planner.max_gpu",
    }
    for name, text in cases.items():
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        result = runner.invoke(app, ["plan", "--job", str(path)])
        assert result.exit_code == 2, (name, result.output)
        assert needles[name] in result.stderr, (name, result.stderr)


def test_gb200_plans_on_its_rack_and_launches_on_hosts_of_four() -> None:
    """Without --nodes-of a GB200 plan is timed on its NVLink domain of 72 (a data-parallel
    group of 128 is two domains of 64, not 16 boards of 8) and started on hosts of 4."""
    args = ["plan", "-m", "llama3-70b", "-n", "128", "-g", "GB200", "--launch"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "# 32 node(s) x 4 GPUs" in result.stdout
    assert "torchrun --nnodes=32 --nproc-per-node=4 --rdzv-backend=static" in result.stdout
    assert "2 nodes x 64 GPUs" in result.stdout or "64 GPUs in one node" in result.stdout
    boards = runner.invoke(app, [*args, "--nodes-of", "8"])  # timed on domains of 8
    assert boards.exit_code == 0, boards.output
    assert "# 32 node(s) x 4 GPUs" in boards.stdout  # still the trays' hosts of 4
    assert "16 nodes x 8 GPUs" in boards.stdout


def test_gpu_file_adds_and_changes_catalogue_entries(tmp_path: Path) -> None:
    """--gpu-file: a GPU the catalogue lacks can be planned on, a known one's field changed,
    and a bad file is one line naming the field."""
    new = tmp_path / "gpus.yaml"
    new.write_text(
        "MI300X: {bf16_tflops: 1307, fp8_tflops: 2615, fp32_tflops: 163.4, memory_gb: 192,\n"
        "         memory_bw_tbs: 5.3, nvlink_gb_s: 448, gpus_per_node: 8, network_gb_s: 50,\n"
        "         network_latency_us: 5}\n"
    )
    args = ["plan", "-m", "gpt3-13b", "-n", "16", "-g", "MI300X", "--json"]
    result = runner.invoke(app, [*args, "--gpu-file", str(new)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["gpu_type"] == "MI300X"
    assert runner.invoke(app, args).exit_code == 2  # unknown without the file
    fp8 = ["plan", "-m", "gpt3-13b", "-n", "8", "-g", "H100", "--precision", "fp8", "--json"]
    fast = tmp_path / "fast.yaml"
    fast.write_text("H100-SXM: {fp8_backward_slowdown: 1}\n")
    shipped = json.loads(runner.invoke(app, fp8).stdout)["plans"][0]
    changed = runner.invoke(app, [*fp8, "--gpu-file", str(fast)])
    assert changed.exit_code == 0, changed.output
    best = json.loads(changed.stdout)["plans"][0]
    assert best["step_time_s"]["iteration_s"] < shipped["step_time_s"]["iteration_s"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("H100-SXM: {fp8_backward_slowdown: 0.5}\n")
    result = runner.invoke(app, [*fp8, "--gpu-file", str(bad)])
    assert result.exit_code == 2
    assert "H100-SXM.fp8_backward_slowdown" in result.output
    assert "Traceback" not in result.output
    result = runner.invoke(app, [*fp8, "--gpu-file", str(tmp_path / "none.yaml")])
    assert result.exit_code == 2 and "--gpu-file" in result.output


def test_volta_plans_in_fp16_without_fused_attention() -> None:
    """Found by an outside review: a V100 plan used bf16 and FlashAttention, neither of which
    Volta runs (`GPU.compute_capability` 7.0)."""
    args = ["plan", "-m", "gpt3-13b", "-n", "8", "-g", "V100", "--top", "3"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    assert "no bf16 tensor cores; planned in fp16" in result.output
    plans = json.loads(result.stdout)["plans"]
    assert plans and not any(p["layout"]["flash_attention"] for p in plans)
    launch = runner.invoke(app, [*args, "--launch"])
    assert "--fp16" in launch.stdout and "--bf16" not in launch.stdout
    assert "FLASH_ATTENTION=0" in launch.stdout and "(flash attention)" not in launch.stdout
    fp8 = runner.invoke(app, [*args, "--precision", "fp8"])
    assert "no fp8 tensor cores; planned in fp16" in fp8.output
    placed = runner.invoke(app, ["plan", "-m", "gpt3-13b", "--allocation", "8", "-g", "V100"])
    assert placed.exit_code == 0 and "flash attention" not in placed.stdout  # same search
    a100 = runner.invoke(app, ["plan", "-m", "gpt3-13b", "-n", "8", "-g", "A100", "--launch"])
    assert "--bf16" in a100.stdout and "(flash attention)" in a100.stdout


def test_launch_with_an_allocation_is_refused_not_silently_dropped() -> None:
    result = runner.invoke(
        app, ["plan", "-m", "llama3-70b", "--allocation", "8,8,8,4,4", "-g", "H100", "--launch"]
    )
    assert result.exit_code == 2 and result.stdout == ""
    assert "--launch: not with --allocation" in result.stderr


def test_files_that_are_not_text_are_one_line(tmp_path: Path) -> None:
    """Found by an outside review: a binary file gave UnicodeDecodeError's traceback."""
    binary = tmp_path / "model.yaml"
    binary.write_bytes(b"\xff\xfe\x00name: x\n")
    for args, field in (
        (["plan", "-m", str(binary), "-n", "8", "-g", "H100"], "model"),
        (["plan", "--job", str(binary)], "--job"),
        (["plan", "-m", "gpt3-13b", "-n", "8", "-g", "H100", "--gpu-file", str(binary)],
         "catalogue"),
    ):  # fmt: skip
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert result.stderr.startswith(f"error: {field}: {binary} is not UTF-8 text"), args
        assert "Traceback" not in result.output


def test_goal_flags_without_max_gpus_are_refused_not_ignored() -> None:
    """Found by an outside review: --tokens, --price, --deadline and --objective were
    silently ignored without --max-gpus."""
    base = ["plan", "-m", "gpt3-1.3b", "-g", "H100", "-n", "8"]
    for extra in (["--tokens", "1e10"], ["--price", "2"], ["--deadline", "5"],
                  ["--objective", "cost"]):  # fmt: skip
        result = runner.invoke(app, [*base, *extra])
        assert result.exit_code == 2, (extra, result.output)
        assert result.stderr.startswith(f"error: {extra[0]}: only with --max-gpus"), extra
    sized = ["plan", "-m", "gpt3-1.3b", "-g", "H100", "--max-gpus", "16", "--objective", "COST"]
    assert runner.invoke(app, [*sized, "--price", "2"]).exit_code == 0


def test_the_smallest_count_that_fits_counts_uneven_stages() -> None:
    """Found by an outside review: 13B on one H100 said 4 GPUs were the fewest that fit, but
    3 do (40 layers on 3 stages of 13 or 14: the search's uneven stages)."""
    result = runner.invoke(app, ["plan", "-m", "gpt3-13b", "-n", "1", "-g", "H100"])
    assert result.exit_code == 2 and result.stderr.startswith("error: --gpus: no layout")
    assert "the smallest GPU count that fits is 3" in result.stderr
    assert runner.invoke(app, ["plan", "-m", "gpt3-13b", "-n", "3", "-g", "H100"]).exit_code == 0
