"""The time model against ../shared/planner/published_configs.csv (trainyard.planner.evaluate).

The shared folder is found from TRAINYARD_SHARED (default: <repo>/../shared). Missing data is a
skip locally and a failure when CI=true. The synthetic-CSV tests need no shared data.
"""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import pytest
from published_rows import ROW

from shared_data import SHARED, require
from trainyard.planner.compute import step_time
from trainyard.planner.errors import PlannerError
from trainyard.planner.evaluate import default_csv_path, evaluate, evaluate_paths, row_inputs
from trainyard.planner.memory import memory_per_gpu
from trainyard.planner.rows import row_target
from trainyard.planner.search import HEADROOM

CSV = SHARED / "planner" / "published_configs.csv"

# Issue 5's acceptance: median |error| <= 7 %, every row within 15 %; issue 18 asks for 3.5 %
# and 10 %. Achieved (docs/benchmarks.md, constants refitted with causal flash attention and the
# fp8 rule, pipeline sends split over TP, 2026-12-05): median 2.1 %, max 9.4 % (README_MFU_HFU
# 1T, held out) over the 38 rows that state their layout. With the 13 rows whose split is read
# from their model-parallel size: median 3.2 %, max 12.7 %. Ten of those are README_2021_01,
# the runs of SC21_T1 on the earlier software that SOURCES.md says was slower (+1 % to
# +12.7 %, the model being of the later one); the other three, SC21_T2's 175B, +3.5-3.8 %.
MEDIAN_BOUND = 0.035
MAX_BOUND = 0.10
EARLIER_SOFTWARE_BOUND = 0.15  # README_2021_01, slower software than the model's (above)

FIELDS = [
    "table_id",
    "model",
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "seq_len",
    "vocab_size",
    "gpu_type",
    "gpu_peak_tflops",
    "num_gpus",
    "tensor_parallel",
    "pipeline_parallel",
    "data_parallel",
    "global_batch_size",
    "micro_batch_size",
    "activation_recompute",
    "achieved_tflops_per_gpu",
    "notes",
]


def published_csv() -> Path:
    return require(CSV, "evaluate the time model")


def test_time_model_matches_published_throughput() -> None:
    result = evaluate(published_csv())
    print()
    print(result.table())
    assert len(result.rows) >= 50
    assert result.median_abs_error <= MEDIAN_BOUND
    stated = [abs(r.error) for r in result.rows if not r.split_from_mp]
    assert len(stated) >= 38 and max(stated) <= MAX_BOUND
    from_mp = [r for r in result.rows if r.split_from_mp]
    assert len(from_mp) >= 13 and all("(split from mp)" in r.read_as for r in from_mp)
    for row in from_mp:
        bound = EARLIER_SOFTWARE_BOUND if row.table_id == "README_2021_01" else MAX_BOUND
        assert abs(row.error) <= bound, row
    assert "split from model_parallel_size" in result.table()
    # The constants were fitted on 16 rows (compute.CALIBRATION_ROWS); the rest are held out.
    calibrated = [r for r in result.rows if r.calibration]
    assert len(calibrated) == 16
    held_out = [r for r in result.rows if not r.calibration]
    assert len(held_out) == len(result.rows) - 16
    assert max(abs(r.error) for r in held_out if not r.split_from_mp) <= MAX_BOUND
    assert "held out (not *)" in result.table()


def write(tmp_path: Path, rows: list[dict[str, str]], extra: list[str] | None = None) -> Path:
    path = tmp_path / "planner" / "published_configs.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    fields = FIELDS + (extra or [])
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fields)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: row.get(k, "") for k in fields})
    return path


def test_synthetic_row_is_predicted_with_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, [ROW, {**ROW, "tensor_parallel": ""}, {**ROW, "model": "mfu-only",
                "achieved_tflops_per_gpu": ""}])  # fmt: skip
    result = evaluate(path)
    assert len(result.rows) == 1
    reasons = [s[2] for s in result.skipped]
    assert reasons == [
        "no tensor_parallel / pipeline_parallel split",
        "no published figure (iteration_time_s, tokens_per_sec_per_gpu, "
        "achieved_tflops_per_gpu, percent_of_peak, aggregate_pflops, hfu_pct or mfu_pct)",
    ]
    inputs = row_inputs(ROW)
    assert not isinstance(inputs, str)
    model, layout, device = inputs
    # Missing micro-batch -> 1; a row of a table of today that does not say how it recomputes
    # and fits without -> none, with fused attention; A100 peak 312.
    assert (layout.micro_batch, layout.dp, layout.recompute) == (1, 1, "none")
    assert layout.flash_attention
    assert device.bf16_tflops == 312
    predicted = step_time(model, layout, device).hardware_tflops_per_gpu
    row = result.rows[0]
    assert (row.table_id, row.model, row.gpus) == ("T", "tiny", 1)
    assert row.predicted == pytest.approx(predicted)
    assert row.error == pytest.approx((predicted - 150) / 150)
    assert result.median_abs_error == pytest.approx(abs(row.error))
    assert "median |error|" in result.table()
    # How the row was read, defaults included, is printed beside its error.
    assert row.read_as == "t1 d1 mb1 zero0 rc:none flash"
    assert row.read_as in result.table()


def test_hfu_rows_compare_executed_flop_rate_with_interleaving(tmp_path: Path) -> None:
    row = {**ROW, "table_id": "README_MFU_HFU", "model": "hfu", "num_gpus": "4",
           "pipeline_parallel": "2", "data_parallel": "1", "tensor_parallel": "2",
           "global_batch_size": "8", "activation_recompute": "selective + sequence parallel",
           "achieved_tflops_per_gpu": "", "hfu_pct": "50",
           "notes": "interleaved pipeline v=2 per calculon config"}  # fmt: skip
    inputs = row_inputs(row)
    assert not isinstance(inputs, str)
    model, layout, device = inputs
    assert (layout.virtual_stages, layout.recompute, layout.sequence_parallel) == (
        2,
        "selective",
        True,
    )
    result = evaluate(write(tmp_path, [row], extra=["hfu_pct"]))
    assert result.rows[0].published == pytest.approx(0.5 * 312)
    predicted = step_time(model, layout, device).hardware_tflops_per_gpu
    assert result.rows[0].predicted == pytest.approx(predicted)


def test_gpu_peaks_from_type_and_column(tmp_path: Path) -> None:
    for gpu_type, peak_cell, peak in (("V100 (DGX-2)", "", 125), ("H100", "", 989),
                                      ("H100", "900", 900)):  # fmt: skip
        inputs = row_inputs({**ROW, "gpu_type": gpu_type, "gpu_peak_tflops": peak_cell})
        assert not isinstance(inputs, str)
        assert inputs[2].bf16_tflops == peak
    h100 = row_inputs({**ROW, "table_id": "README_2024_H100", "gpu_type": "H100"})
    assert not isinstance(h100, str)
    assert h100[1].recompute == "none"


def test_bad_rows_and_paths_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(PlannerError) as exc:
        row_inputs({**ROW, "gpu_type": "TPU v4"})
    assert exc.value.field == "gpu_type"
    with pytest.raises(PlannerError) as exc:
        row_inputs({**ROW, "hidden_size": "lots"})
    assert exc.value.field == "hidden_size"
    with pytest.raises(PlannerError) as exc:
        row_inputs({**ROW, "hidden_size": "1000"})  # not divisible by 16 heads
    assert exc.value.field == "hidden"
    with pytest.raises(PlannerError) as exc:
        evaluate(tmp_path / "missing.csv")
    assert exc.value.field == "path"
    with pytest.raises(PlannerError) as exc:
        evaluate(write(tmp_path, [{**ROW, "achieved_tflops_per_gpu": ""}]))
    assert exc.value.field == "path"


def test_default_path_follows_trainyard_shared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINYARD_SHARED", str(tmp_path))
    assert default_csv_path() == tmp_path / "planner" / "published_configs.csv"
    monkeypatch.delenv("TRAINYARD_SHARED")
    monkeypatch.chdir(tmp_path)
    assert default_csv_path() == tmp_path.parent / "shared" / "planner" / "published_configs.csv"


def test_optional_columns_modern_rows_and_skips_never_abort(tmp_path: Path) -> None:
    extra = ["num_kv_heads", "ffn_hidden_size", "mlp", "context_parallel", "virtual_pipeline",
             "first_stage_layers", "last_stage_layers", "sharding", "precision",
             "tokens_per_sec_per_gpu", "iteration_time_s", "mfu_pct", "num_experts",
             "moe_topk", "moe_ffn_hidden_size", "expert_parallel", "head_dim"]  # fmt: skip
    llama = {**ROW, "model": "llama-ish", "num_layers": "30", "num_kv_heads": "4",
             "ffn_hidden_size": "2816", "mlp": "swiglu", "gpu_type": "H100 SXM",
             "num_gpus": "32", "tensor_parallel": "2", "pipeline_parallel": "8",
             "context_parallel": "2", "first_stage_layers": "3", "last_stage_layers": "3",
             "virtual_pipeline": "", "sharding": "zero1", "precision": "fp8",
             "achieved_tflops_per_gpu": "", "tokens_per_sec_per_gpu": "9000"}  # fmt: skip
    timed = {**ROW, "model": "timed", "achieved_tflops_per_gpu": "", "iteration_time_s": "2.5"}
    fsdp = {**ROW, "model": "fsdp", "num_gpus": "8", "sharding": "fsdp", "mfu_pct": "40",
            "achieved_tflops_per_gpu": ""}  # fmt: skip
    rows = [
        llama, timed, fsdp,
        {**llama, "model": "uneven-unsaid", "first_stage_layers": "", "last_stage_layers": ""},
        {**llama, "model": "uneven-no-split", "num_layers": "29", "first_stage_layers": "",
         "last_stage_layers": ""},
        {**ROW, "model": "moe", "num_gpus": "8", "num_experts": "8", "moe_topk": "2",
         "moe_ffn_hidden_size": "1024", "expert_parallel": "8", "head_dim": "128"},
        {**ROW, "model": "moe-bad-ep", "num_gpus": "8", "num_experts": "8", "expert_parallel": "3"},
        {**ROW, "model": "bad-sharding", "sharding": "zero9"},
        {**ROW, "model": "bad-number", "num_layers": "eight"},
        {**ROW, "model": "no-figure", "achieved_tflops_per_gpu": ""},
    ]  # fmt: skip
    result = evaluate(write(tmp_path, rows, extra))
    assert [r.model for r in result.rows] == ["llama-ish", "timed", "fsdp", "uneven-unsaid", "moe"]
    assert [r.metric for r in result.rows] == [
        "tokens_per_sec_per_gpu", "iteration_time_s", "mfu_tflops", "tokens_per_sec_per_gpu",
        "tflops_per_gpu",
    ]  # fmt: skip
    # 30 layers on 8 stages unsaid: 30 + embedding + loss = 8 x 4, so 3 on each end stage, as
    # the row that states it; 29 layers split neither way and are skipped with the reason.
    assert result.rows[3].read_as == result.rows[0].read_as
    skipped = {model: reason for _, model, reason in result.skipped}
    assert skipped["uneven-no-split"].startswith("pp: layers (29) must split evenly")
    assert "first_stage_layers" in skipped["uneven-no-split"]
    assert skipped["moe-bad-ep"].startswith("ep: ep (3) must divide the 8 experts")
    moe = row_inputs(rows[5])
    assert not isinstance(moe, str)
    assert (moe[0].experts, moe[0].moe_topk, moe[0].head_dim, moe[1].ep) == (8, 2, 128, 8)
    assert "e8/8x2" in next(r for r in result.rows if r.model == "moe").read_as
    assert skipped["bad-sharding"].startswith("sharding: unknown sharding 'zero9'")
    assert skipped["bad-number"].startswith("num_layers: must be a number")
    assert skipped["no-figure"].startswith("no published figure")
    inputs = row_inputs(llama)
    assert not isinstance(inputs, str)
    model, layout, device = inputs
    assert (layout.cp, layout.dp, layout.stage_layers(model)[0]) == (2, 1, 3)
    assert model.precision == "fp8" and model.kv_heads == 4 and device.name == "H100-SXM"
    # an iteration time compares as throughput: a prediction twice as fast is +100 %
    row = next(r for r in result.rows if r.model == "timed")
    assert row.error == pytest.approx(row.published / row.predicted - 1)


def test_unsaid_recompute_and_attention_are_read_as_the_run_must_have_had_them() -> None:
    # The shared file's pre-2023 Megatron-LM tables: whole-layer recompute, scores stored.
    legacy = row_inputs({**ROW, "table_id": "SC21_T1"})
    assert not isinstance(legacy, str)
    assert (legacy[1].recompute, legacy[1].flash_attention) == ("full", False)
    # Any other table: fused attention, and the lightest recompute that fits the GPU.
    small = row_inputs(ROW)
    assert not isinstance(small, str) and small[1].recompute == "none"
    big = {
        **ROW,
        "num_layers": "48",
        "hidden_size": "8192",
        "num_attention_heads": "64",
        "seq_len": "8192",
        "num_gpus": "8",
        "tensor_parallel": "8",
        "global_batch_size": "8",
    }
    inputs = row_inputs(big)
    assert not isinstance(inputs, str)
    model, layout, device = inputs
    assert layout.recompute in ("selective", "full")
    lighter = "none" if layout.recompute == "selective" else "selective"
    assert (
        memory_per_gpu(model, replace(layout, recompute=lighter)).total
        > HEADROOM * device.memory_gb
    )
    # Both HFU and MFU given: their ratio says it (full recompute executes 4/3 of the FLOPs).
    full = row_inputs({**ROW, "achieved_tflops_per_gpu": "", "hfu_pct": "53.3", "mfu_pct": "40"})
    none = row_inputs({**ROW, "achieved_tflops_per_gpu": "", "hfu_pct": "40", "mfu_pct": "40"})
    assert not isinstance(full, str) and not isinstance(none, str)
    assert (full[1].recompute, none[1].recompute) == ("full", "none")
    # A stated cell always wins.
    stated = row_inputs({**ROW, "activation_recompute": "selective", "flash_attention": "no"})
    assert not isinstance(stated, str)
    assert (stated[1].recompute, stated[1].flash_attention) == ("selective", False)


@pytest.mark.parametrize(
    "column", ["num_gpus", "tensor_parallel", "pipeline_parallel", "data_parallel",
               "context_parallel", "micro_batch_size", "num_layers", "global_batch_size"],
)  # fmt: skip
@pytest.mark.parametrize("value", ["0", "-2"])
def test_a_count_below_one_is_a_skip_naming_its_column(column: str, value: str) -> None:
    # (0 used to read as "not given", and a negative count surfaced as a product mismatch)
    with pytest.raises(PlannerError) as caught:
        row_inputs({**ROW, column: value})
    assert caught.value.field == column and ">= 1" in caught.value.message


def test_sequence_parallel_by_default_with_tp_except_in_the_old_tables() -> None:
    tp = {**ROW, "num_gpus": "4", "tensor_parallel": "4"}
    cases = [(tp, True), ({**tp, "table_id": "SC21_T1"}, False),
             ({**tp, "sequence_parallel": "no"}, False), (ROW, False)]  # fmt: skip
    for row, expected in cases:
        inputs = row_inputs(row)
        assert not isinstance(inputs, str) and inputs[1].sequence_parallel is expected


def test_gpus_follow_from_the_split_when_not_stated() -> None:
    row = {**ROW, "num_gpus": "", "tensor_parallel": "2", "data_parallel": "4"}
    inputs = row_inputs(row)
    assert not isinstance(inputs, str) and (inputs[1].gpus, inputs[1].dp) == (8, 4)


def test_virtual_pipeline_zero_means_none_and_new_gpus_are_known() -> None:
    inputs = row_inputs({**ROW, "virtual_pipeline": "0"})
    assert not isinstance(inputs, str) and inputs[1].virtual_stages == 1
    for text, name in (("NVIDIA H800 SXM5", "H800"), ("A800 80GB", "A800-80GB"),
                       ("GH200 (96 GB)", "H200"), ("GB200 NVL72", "GB200"),
                       ("DGX-GB300", "GB300"), ("HGX B300", "B300")):  # fmt: skip
        inputs = row_inputs({**ROW, "gpu_type": text})
        assert not isinstance(inputs, str) and inputs[2].name == name


def test_the_published_runs_shipped_with_the_planner_are_all_held_out() -> None:
    from trainyard.planner.evaluate import package_csv_path

    result = evaluate(package_csv_path())
    assert len(result.rows) == 72 and not result.skipped
    assert result.calibration_rows() is None  # never fitted on
    assert {r.table_id for r in result.rows} == {
        "LLAMA3_405B", "MT_NLG_530B", "BLOOM_176B", "TORCHTITAN_A100", "BRIDGE_H100",
        "BRIDGE_B200", "BRIDGE_MOE_H100", "BRIDGE_MOE_B200", "BRIDGE_GB200", "BRIDGE_GB300",
        "BRIDGE_B300", "DEEPSEEK_V3",
        "NEMOTRON4_340B", "DGXC_H100", "MOE_MODELZOO",
    }  # fmt: skip
    with package_csv_path().open() as f:
        for row in csv.DictReader(f):
            assert row["source"] and row["split"] == "held_out"


@pytest.mark.parametrize("sep", ["\t", ";"])
def test_a_spreadsheet_export_reads_as_the_csv(tmp_path: Path, sep: str) -> None:
    """A byte-order mark, a tab or semicolon separator and headers written as a person would
    ("Num GPUs", "Tensor-Parallel") give the same evaluation as the CSV."""
    plain = evaluate(write(tmp_path, [ROW]))
    header = [k.replace("_", " ").title().replace("Tensor Parallel", "Tensor-Parallel")
              for k in ROW]  # fmt: skip
    path = tmp_path / "export.txt"
    lines = [sep.join(header), sep.join(ROW.values())]
    path.write_text("\ufeff" + "\r\n".join(lines) + "\r\n", encoding="utf-8")
    exported = evaluate(path)
    assert not exported.skipped
    assert [r.predicted for r in exported.rows] == [r.predicted for r in plain.rows]
    assert exported.rows[0].table_id == "T"


def test_gpus_may_be_given_as_nodes_of_a_size() -> None:
    """A table that counts nodes (16 nodes of 8) without num_gpus or dp is 128 GPUs, not one
    replica of tp x pp."""
    row = {**ROW, "num_gpus": "", "num_nodes": "16", "gpus_per_node": "8",
           "tensor_parallel": "8", "pipeline_parallel": "2", "global_batch_size": "64"}  # fmt: skip
    inputs = row_inputs(row)
    assert not isinstance(inputs, str)
    assert (inputs[1].gpus, inputs[1].dp) == (128, 8)
    clash = row_inputs({**row, "num_gpus": "64"})  # the stated count wins, and must add up
    assert not isinstance(clash, str) and clash[1].dp == 4


@pytest.mark.parametrize(
    ("cells", "split"),
    [
        ({"tensor_parallel": "8", "pipeline_parallel": "", "data_parallel": "4"}, (8, 1, 4)),
        ({"tensor_parallel": "", "pipeline_parallel": "2", "data_parallel": "2"}, (8, 2, 2)),
        ({"tensor_parallel": "", "pipeline_parallel": "", "data_parallel": "32"}, (1, 1, 32)),
        ({"tensor_parallel": "", "pipeline_parallel": "", "sharding": "FSDP"}, (1, 1, 32)),
    ],
)
def test_a_split_left_out_is_read_when_the_rest_leaves_one_reading(
    cells: dict[str, str], split: tuple[int, int, int]
) -> None:
    row = {**ROW, "num_gpus": "32", **cells}
    inputs = row_inputs(row)
    assert not isinstance(inputs, str), inputs
    layout = inputs[1]
    assert (layout.tp, layout.pp, layout.dp) == split


@pytest.mark.parametrize(
    "cells",
    [
        {"tensor_parallel": "8", "pipeline_parallel": ""},  # dp not stated: pp or dp?
        {"tensor_parallel": "", "pipeline_parallel": ""},  # neither, not sharded
        {"tensor_parallel": "", "pipeline_parallel": "", "data_parallel": "8"},  # tp x pp = 4
        {"tensor_parallel": "3", "pipeline_parallel": "", "data_parallel": "4"},  # 32 / 12
    ],
)
def test_an_ambiguous_split_is_still_a_skip(cells: dict[str, str]) -> None:
    assert row_inputs({**ROW, "num_gpus": "32", **cells}) == (
        "no tensor_parallel / pipeline_parallel split"
    )


@pytest.mark.parametrize(
    ("cells", "split"),
    [
        # SC'21's rule: tensor parallel over the node's GPUs that divide the size, then pipeline
        ({"model_parallel_size": "96"}, (8, 12, 4)),
        ({"model_parallel_size": "4"}, (4, 1, 96)),
        ({"mp": "24", "data_parallel": "16"}, (8, 3, 16)),
        ({"model_parallel_size": "6"}, (2, 3, 64)),
        # a stated degree fixes the other
        ({"model_parallel_size": "96", "tensor_parallel": "4"}, (4, 24, 4)),
        ({"model_parallel_size": "96", "pipeline_parallel": "6"}, (16, 6, 4)),
    ],
)
def test_a_model_parallel_size_gives_the_split(
    cells: dict[str, str], split: tuple[int, int, int]
) -> None:
    row = {**ROW, "num_gpus": "384", "num_layers": "96", "hidden_size": "12288",
           "num_attention_heads": "96", "global_batch_size": "1536", "tensor_parallel": "",
           "pipeline_parallel": "", **cells}  # fmt: skip
    if split[0] > 8:  # a tensor-parallel group larger than a node is still read as stated
        row["gpu_type"] = "GB200"
    inputs = row_inputs(row)
    assert not isinstance(inputs, str), inputs
    layout = inputs[1]
    assert (layout.tp, layout.pp, layout.dp) == split


def test_a_model_parallel_size_that_disagrees_names_the_column(tmp_path: Path) -> None:
    base = {**ROW, "num_gpus": "32", "tensor_parallel": "2", "pipeline_parallel": "1"}
    for cells in (
        {"model_parallel_size": "4"},
        {"model_parallel_size": "3", "pipeline_parallel": ""},
        {"model_parallel_size": "64", "tensor_parallel": "", "pipeline_parallel": ""},
    ):  # the last: 64 does not divide the 32 GPUs
        with pytest.raises(PlannerError) as exc:
            row_inputs({**base, **cells})
        assert exc.value.field == "model_parallel_size"
    # In an evaluation such a row is skipped with that reason; the others are evaluated.
    path = write(tmp_path, [ROW, {**base, "model_parallel_size": "4"}],
                 extra=["model_parallel_size"])  # fmt: skip
    result = evaluate(path)
    assert len(result.rows) == 1 and not result.rows[0].split_from_mp
    assert [s[2].split(":")[0] for s in result.skipped] == ["model_parallel_size"]
    assert result.split_from_mp() is None
    mp_only = {**ROW, "tensor_parallel": "", "pipeline_parallel": "", "model_parallel_size": "1"}
    read = write(tmp_path, [mp_only], extra=["model_parallel_size"])
    row = evaluate(read).rows[0]
    assert row.split_from_mp and row.read_as.endswith("(split from mp)")


def test_a_share_of_peak_or_an_aggregate_rate_is_the_published_figure(tmp_path: Path) -> None:
    # SC'21's "percent of theoretical peak" and the aggregate PFLOP/s of its Table 1 are the
    # achieved rate in other units: a row that gives only one of them is compared the same way.
    rows = [
        {**ROW, "model": "rate"},
        {**ROW, "model": "share", "achieved_tflops_per_gpu": "", "percent_of_peak": "50 %"},
        {**ROW, "model": "aggregate", "achieved_tflops_per_gpu": "", "num_gpus": "2",
         "data_parallel": "2", "global_batch_size": "64", "aggregate_pflops": "0.3 PFLOP/s"},
    ]  # fmt: skip
    result = evaluate(write(tmp_path, rows, extra=["percent_of_peak", "aggregate_pflops"]))
    by_name = {r.model: r for r in result.rows}
    assert set(by_name) == {"rate", "share", "aggregate"}
    assert {r.metric for r in result.rows} == {"tflops_per_gpu"}
    assert by_name["share"].published == pytest.approx(156.0)  # 50 % of the A100's 312
    assert by_name["share"].predicted == pytest.approx(by_name["rate"].predicted)
    assert by_name["aggregate"].published == pytest.approx(150.0)  # 300 TFLOP/s over 2 GPUs
    bad = write(tmp_path, [ROW, {**rows[1], "percent_of_peak": "half"}], extra=["percent_of_peak"])
    reasons = [s[2] for s in evaluate(bad).skipped]
    assert reasons == ["percent_of_peak: must be a number, got 'half'"]


def test_unstated_sharding_is_the_distributed_optimizer_of_todays_stacks() -> None:
    big = {**ROW, "num_layers": "96", "hidden_size": "18432", "num_attention_heads": "96",
           "num_kv_heads": "8", "mlp": "squared_relu", "seq_len": "4096",
           "vocab_size": "256000", "tied_embeddings": "no", "gpu_type": "H100-SXM",
           "num_gpus": "1536", "tensor_parallel": "8", "pipeline_parallel": "12",
           "global_batch_size": "768"}  # fmt: skip
    # Nemotron-4 340B's layout: with ZeRO-1 it fits without recomputing; read as plain data
    # parallelism it would have to recompute every layer to fit, and run a third slower.
    inputs = row_inputs(big)
    assert not isinstance(inputs, str)
    assert (inputs[1].zero, inputs[1].recompute) == (1, "none")
    stated = row_inputs({**big, "sharding": "none"})
    assert not isinstance(stated, str)
    assert (stated[1].zero, stated[1].recompute) == (0, "full")
    # One data-parallel rank has nothing to shard; the pre-2023 tables ran without it.
    alone = row_inputs({**ROW, "sharding": ""})
    assert not isinstance(alone, str) and alone[1].zero == 0
    legacy = row_inputs({**ROW, "table_id": "SC21_T1", "num_gpus": "8", "data_parallel": "8",
                         "global_batch_size": "64"})  # fmt: skip
    assert not isinstance(legacy, str) and legacy[1].zero == 0


def test_a_table_that_counts_causal_attention_is_compared_in_its_own_count(
    tmp_path: Path,
) -> None:
    # The same run at 32K tokens stated as TFLOP/s, as MFU and as tokens/s, counted whole and
    # counted causal: the FLOP rates differ by the ratio of the two counts, the token rate not.
    long = {**ROW, "seq_len": "32768", "global_batch_size": "8"}
    rows = [
        {**long, "model": "whole"},
        {**long, "model": "causal", "attention_flops": "causal"},
        {**long, "model": "mfu", "attention_flops": "causal", "achieved_tflops_per_gpu": "",
         "mfu_pct": "40"},
        {**long, "model": "tokens", "attention_flops": "causal", "achieved_tflops_per_gpu": "",
         "tokens_per_sec_per_gpu": "1000"},
    ]  # fmt: skip
    extra = ["attention_flops", "tokens_per_sec_per_gpu", "mfu_pct"]
    result = evaluate(write(tmp_path, rows, extra))
    whole, causal, mfu, tokens = result.rows
    inputs = row_inputs(long)
    assert not isinstance(inputs, str)
    model, _layout, _gpu = inputs
    full = model.flops_per_iteration(recompute=False)
    ratio = model.flops_per_iteration(recompute=False, attention="causal") / full
    assert 0.5 < ratio < 0.8  # at 32K tokens the core is most of a small model's work
    assert causal.predicted == pytest.approx(whole.predicted * ratio)
    assert mfu.predicted == pytest.approx(whole.predicted * ratio)  # nothing recomputed
    assert "causal-flops" in causal.read_as and "causal-flops" not in whole.read_as
    assert "causal-flops" not in tokens.read_as  # a token rate has no FLOP count
    unmarked = evaluate(write(tmp_path, [{**rows[3], "attention_flops": ""}], extra))
    assert tokens.predicted == pytest.approx(unmarked.rows[0].predicted)
    # A table that leaves attention out (an MFU of 6 x parameters x tokens) is read so too.
    six_n = evaluate(write(tmp_path, [{**long, "attention_flops": "6N"}], extra)).rows[0]
    none = model.flops_per_iteration(recompute=False, attention="none")
    assert six_n.predicted == pytest.approx(whole.predicted * none / full)
    assert "no-attention-flops" in six_n.read_as
    bad = evaluate(write(tmp_path, [long, {**long, "attention_flops": "sometimes"}], extra))
    assert len(bad.rows) == 1 and bad.skipped[0][2].startswith("attention_flops: must be full")


def test_a_stated_peak_is_the_one_the_tables_percentages_are_of(tmp_path: Path) -> None:
    # An fp8 run's MFU taken against the H100's fp8 peak (1,979) reads as that share of
    # 1,979, on an H100 whose 16-bit peak stays 989; a 16-bit peak stated lower (a capped
    # clock) scales both peaks.
    h100 = {**ROW, "gpu_type": "H100 SXM", "achieved_tflops_per_gpu": "", "mfu_pct": "30"}
    fp8 = {**h100, "precision": "fp8"}
    plain = row_inputs(fp8)
    stated = row_inputs({**fp8, "gpu_peak_tflops": "1979"})
    assert not isinstance(plain, str) and not isinstance(stated, str)
    assert stated[2].bf16_tflops == pytest.approx(plain[2].bf16_tflops, rel=1e-3)
    assert stated[2].fp8_tflops == pytest.approx(1979)
    assert row_target({**fp8, "gpu_peak_tflops": "1979"}, stated[2]) == (
        "mfu_tflops",
        pytest.approx(0.30 * 1979),
    )
    assert row_target(fp8, plain[2]) == ("mfu_tflops", pytest.approx(0.30 * 989))
    capped = row_inputs({**h100, "gpu_peak_tflops": "900"})
    assert not isinstance(capped, str)
    assert capped[2].bf16_tflops == pytest.approx(900)
    assert capped[2].fp8_tflops == pytest.approx(plain[2].fp8_tflops * 900 / 989, rel=1e-3)
    # A 16-bit run that states the fp8 figure is taken at its word: a 16-bit peak of 1,979.
    doubled = row_inputs({**h100, "gpu_peak_tflops": "1979"})
    assert not isinstance(doubled, str) and doubled[2].bf16_tflops == pytest.approx(1979)
    result = evaluate(write(tmp_path, [{**fp8, "gpu_peak_tflops": "1979"}],
                            ["precision", "mfu_pct"]))  # fmt: skip
    assert result.rows[0].published == pytest.approx(0.30 * 1979)


def test_a_performance_table_as_megatron_bridge_prints_it_is_read(tmp_path: Path) -> None:
    # Megatron-Bridge's performance summary: its column names ("#-GPUs", "Tokens / sec /
    # GPU", System, Dtype, an FSDP size), model names as it spells them, and Llama 3.1 405B's
    # 126 layers on 8 x 8 chunks with the embedding and the loss counted as layers.
    path = tmp_path / "bridge.csv"
    path.write_text(
        "Model,System,Dtype,#-GPUs,GBS,MBS,Sequence Length,FSDP,TP,PP,CP,VP,EP,GA,"
        "Tokens / sec / GPU,Model TFLOP / sec / GPU\n"
        "LLAMA3_8B,DGX-H100,FP8-CS,8,128,1,8192,8,1,1,1,1,1,16,14451,\n"
        "LLAMA3_70B,DGX-H100,FP8-CS,64,128,1,8192,0,4,8,1,5,1,64,1602,\n"
        "LLAMA3.1_405B,DGX-H100,FP8-CS,1024,1536,1,8192,0,8,8,2,8,1,192,311,\n"
        "LLAMA3_8B,DGX-H100,BF16,16,128,1,8192,4,1,1,1,1,1,8,,650\n"
    )
    result = evaluate(path)
    assert not result.skipped and len(result.rows) == 4
    small, mid, large, hybrid = result.rows
    assert (small.gpus, small.metric, small.published) == (8, "tokens_per_sec_per_gpu", 14451)
    assert small.read_as.startswith("t1 d8 mb1 zero3") and small.read_as.endswith("fp8")
    assert mid.read_as.startswith("t4 p8 v5 d2 mb1 zero1")
    assert large.read_as.startswith("t8 c2 p8(15/15) v8 d8")
    assert "zero3/hsdp4" in hybrid.read_as and hybrid.metric == "tflops_per_gpu"
    assert not hybrid.read_as.endswith("fp8")


@pytest.mark.parametrize(
    ("header", "column"),
    [
        ("#-GPUs", "num_gpus"),
        ("# of GPUs", "num_gpus"),
        ("Number of GPUs", "num_gpus"),
        ("number_of_gpus", "num_gpus"),
        ("num_gpus", "num_gpus"),
        ("tokens_per_sec_per_gpu", "tokens_per_sec_per_gpu"),
        ("Tokens / sec / GPU", "tokens/sec/gpu"),
        ("Model TFLOP / sec / GPU", "model_tflop/sec/gpu"),
        ("Sequence Length", "sequence_length"),
    ],
)
def test_header_cells_name_their_columns(header: str, column: str) -> None:
    from trainyard.planner.evaluate import _column

    assert _column(header) == column


@pytest.mark.parametrize(
    ("cells", "zero", "group"),
    [
        ({"fsdp": "yes"}, 3, 0),
        ({"fsdp": "1"}, 3, 0),
        ({"fsdp": "8"}, 3, 0),  # all 8 data-parallel ranks
        ({"fsdp": "4"}, 3, 4),  # shards of 4, replicated twice: hybrid
        ({"fsdp": "0"}, 1, 0),  # none: today's default, the distributed optimizer
        ({"fsdp": "no"}, 1, 0),
        ({"zero_stage": "2"}, 2, 0),
        ({"data_parallel_shard_degree": "-1"}, 3, 0),  # torchtitan's config: all the rest
        ({"dp_shard": "4"}, 3, 4),
        ({"sharding": "0"}, 0, 0),
    ],
)
def test_an_fsdp_size_or_a_zero_stage_number_gives_the_sharding(
    cells: dict[str, str], zero: int, group: int
) -> None:
    inputs = row_inputs({**ROW, "num_gpus": "8", **cells})
    assert not isinstance(inputs, str)
    assert (inputs[1].zero, inputs[1].shard_group) == (zero, group)


def test_uneven_end_stages_are_inferred_only_where_they_make_the_split(tmp_path: Path) -> None:
    base = {**ROW, "num_layers": "30", "num_gpus": "4", "pipeline_parallel": "4"}
    inputs = row_inputs(base)  # 30 + 2 = 32 = 4 x 8: 7 + 8 + 8 + 7
    assert not isinstance(inputs, str)
    assert (inputs[1].first_stage_layers, inputs[1].last_stage_layers) == (7, 7)
    stated = row_inputs({**base, "first_stage_layers": "6", "last_stage_layers": "8"})
    assert not isinstance(stated, str)
    assert (stated[1].first_stage_layers, stated[1].last_stage_layers) == (6, 8)
    even = row_inputs({**base, "num_layers": "32"})
    assert not isinstance(even, str) and even[1].first_stage_layers == 0
    with pytest.raises(PlannerError) as err:  # 29 + 2 does not split in 4 either
        row_inputs({**base, "num_layers": "29"})
    assert err.value.field == "pp"


def test_when_no_row_can_be_evaluated_the_error_names_the_reasons(tmp_path: Path) -> None:
    rows = [{**ROW, "model": f"m{i}", "tensor_parallel": ""} for i in range(7)]
    with pytest.raises(PlannerError) as err:
        evaluate(write(tmp_path, rows))
    message = err.value.message
    assert "no row could be evaluated (7 skipped)" in message
    assert "T m0: no tensor_parallel / pipeline_parallel split" in message
    assert "and 2 more" in message


@pytest.mark.parametrize(
    ("text", "degrees"),
    [
        ("TP8 PP16 DP64", {"tensor_parallel": 8, "pipeline_parallel": 16, "data_parallel": 64}),
        ("TP=4, CP=2, PP=8, VP=5", {"tensor_parallel": 4, "context_parallel": 2,
                                    "pipeline_parallel": 8, "virtual_pipeline": 5}),
        ("8-way tensor, 12-way pipeline", {"tensor_parallel": 8, "pipeline_parallel": 12}),
        ("tensor parallel 2, pipeline parallel 4", {"tensor_parallel": 2, "pipeline_parallel": 4}),
        ("EP8 TP2 PP4 VPP 3", {"expert_parallel": 8, "tensor_parallel": 2,
                               "pipeline_parallel": 4, "virtual_pipeline": 3}),
        ("2D (FSDP 8, TP 8)", {"tensor_parallel": 8, "fsdp": 8}),
    ],
)  # fmt: skip
def test_a_free_text_parallelism_cell_gives_the_degrees(text: str, degrees: dict[str, int]) -> None:
    from trainyard.planner.cells import count

    row = {"parallelism": text}
    for field in ("tensor_parallel", "pipeline_parallel", "context_parallel", "data_parallel",
                  "expert_parallel", "virtual_pipeline", "fsdp"):  # fmt: skip
        assert count(row, field) == degrees.get(field)
    # a degree's own column wins over the free text
    assert count({**row, "tensor_parallel": "1"}, "tensor_parallel") == 1


def test_tables_as_torchtitan_and_the_megatron_readme_write_them_are_read(tmp_path: Path) -> None:
    # torchtitan: "# of GPUs", a Parallelism cell, a batch per data-parallel rank, TPS/GPU.
    titan = tmp_path / "titan.csv"
    titan.write_text(
        "Model,# of GPUs,Parallelism,Local batch size,Seq len,Dtype,TPS/GPU,GPU,AC\n"
        "Llama 3 8B,64,FSDP 64,1,8192,bf16,2973,A100,selective op\n"
        'Llama 3 70B,64,"2D (FSDP 8, TP 8)",4,8192,bf16,331,A100,full\n'
    )
    titan_rows = evaluate(titan).rows
    assert [r.read_as.split(" flash")[0] for r in titan_rows] == [
        "t1 d64 mb1 zero3 rc:op", "t8 d8 mb1 zero3 rc:full sp"
    ]  # fmt: skip
    inputs = row_inputs({"model": "Llama 3 70B", "num_gpus": "64", "parallelism": "FSDP 8, TP 8",
                         "local_batch_size": "4", "seq_len": "8192", "gpu_type": "A100",
                         "tokens_per_sec_per_gpu": "331"})  # fmt: skip
    assert not isinstance(inputs, str) and inputs[0].global_batch == 32
    # The Megatron-LM README's table: its long header names, the batch as "Batch size".
    readme = tmp_path / "readme.csv"
    readme.write_text(
        "Model size,Attention heads,Hidden size,Number of layers,Number of GPUs,Batch size,"
        "Sequence length,Vocabulary size,GPU,Tensor MP size,Pipeline MP size,"
        "Achieved teraFLOP/s per GPU,Percentage of theoretical peak FLOP/s,"
        "Achieved aggregate petaFLOP/s,Activation recompute,Flash attention\n"
        "39.1B,64,8192,48,512,1536,2048,51200,A100,8,2,138,44%,70.8,full,no\n"
    )
    (row,) = evaluate(readme).rows
    assert (row.model, row.gpus, row.published) == ("39.1B", 512, 138)
    assert row.read_as.startswith("t8 p2 d32 mb1") and "rc:full" in row.read_as


@pytest.mark.parametrize(
    ("cells", "year"),
    [
        ({}, None),
        ({"year": "2022"}, 2022),
        ({"date": "2021-11-03"}, 2021),
        ({"source": "Black et al., GPT-NeoX-20B, arXiv:2204.06745"}, 2022),
        ({"source": "arXiv:2204.06745, revised 2024-05"}, 2024),  # the latest one named
        ({"source": "a page", "notes": "measured 2025-03-01"}, 2025),
        ({"source": "Smith et al., 2022"}, 2022),
        ({"source": "a talk (2021)"}, 2021),
        ({"notes": "on 2016 GPUs, batch 2032"}, None),  # counts, not years
    ],
)
def test_the_year_of_a_run_is_read_from_its_cells(cells: dict[str, str], year: int | None) -> None:
    from trainyard.planner.rows import run_year

    assert run_year({**ROW, **cells}) == year


def test_a_run_before_2023_is_read_with_the_stacks_of_its_time() -> None:
    # Unless it says otherwise: scores stored (no fused attention), no sequence parallelism,
    # no distributed optimizer, whole layers recomputed, as the shared file's old tables.
    row = {**ROW, "num_gpus": "16", "tensor_parallel": "2", "gpu_type": "A100"}
    old = row_inputs({**row, "source": "Black et al., arXiv:2204.06745"})
    new = row_inputs({**row, "year": "2024"})
    assert not isinstance(old, str) and not isinstance(new, str)
    assert (old[1].flash_attention, old[1].sequence_parallel, old[1].zero) == (False, False, 0)
    assert old[1].recompute == "full"
    assert (new[1].flash_attention, new[1].sequence_parallel, new[1].zero) == (True, True, 1)
    stated = row_inputs({**row, "year": "2022", "flash_attention": "yes", "sharding": "zero1"})
    assert not isinstance(stated, str) and (stated[1].flash_attention, stated[1].zero) == (True, 1)


def test_a_file_that_is_not_csv_text_is_skipped_with_what_to_do(tmp_path: Path) -> None:
    # A spreadsheet's own format, another encoding or a header alone: each file is one skipped
    # entry saying how to fix it, and the other files are still evaluated.
    good = write(tmp_path, [ROW])
    sheet = tmp_path / "runs.xlsx"
    sheet.write_bytes(b"PK\x03\x04 not text")
    latin = tmp_path / "latin.csv"
    latin.write_bytes(b"model,num_gpus\n\xe9t\xe9,8\n")
    empty = tmp_path / "empty.csv"
    empty.write_text("model,num_gpus\n")
    result = evaluate_paths([good, sheet, latin, empty])
    assert len(result.rows) == 1
    reasons = {name: why for name, _model, why in result.skipped}
    assert reasons["runs.xlsx"].startswith("a spreadsheet file: export it as CSV")
    assert reasons["latin.csv"].startswith("not UTF-8 text: export it as CSV")
    assert reasons["empty.csv"].startswith("no rows: a header line")
    assert "skipped runs.xlsx: a spreadsheet file" in result.table()
    with pytest.raises(PlannerError) as err:
        evaluate_paths([sheet])
    assert "runs.xlsx: a spreadsheet file: export it as CSV" in err.value.message
