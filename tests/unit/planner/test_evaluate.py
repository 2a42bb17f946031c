"""The time model against ../shared/planner/published_configs.csv (trainyard.planner.evaluate).

The shared folder is found from TRAINYARD_SHARED (default: <repo>/../shared). Missing data is a
skip locally and a failure when CI=true. The synthetic-CSV tests need no shared data.
"""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import pytest
from published_rows import ROW, write

from shared_data import SHARED, require
from trainyard.planner.compute import step_time
from trainyard.planner.errors import PlannerError
from trainyard.planner.evaluate import default_csv_path, evaluate, row_inputs
from trainyard.planner.memory import memory_per_gpu
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
    # README_2021_04 prints SC21_T1's figures again, without heads or the TP/PP split: read
    # with heads of width 128 and marked as repeating a calibration figure, not held out.
    april = [r for r in result.rows if r.table_id == "README_2021_04"]
    assert len(april) == 10 and all(r.repeats and "(heads assumed: " in r.read_as for r in april)
    summary = result.held_out()
    assert summary is not None and summary["rows"] == len(held_out) - sum(
        r.repeats for r in result.rows
    )
    assert "repeating a calibration figure (=)" in result.table()
    assert "held out (not * or =)" in result.table()


def test_synthetic_row_is_predicted_with_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, [ROW, {**ROW, "tensor_parallel": ""}, {**ROW, "model": "mfu-only",
                "achieved_tflops_per_gpu": ""}])  # fmt: skip
    result = evaluate(path)
    assert len(result.rows) == 1
    reasons = [s[2] for s in result.skipped]
    assert reasons == [
        "no tensor_parallel / pipeline_parallel split",
        "no published figure (iteration_time_s, tokens_per_sec_per_gpu, "
        "achieved_tflops_per_gpu, percent_of_peak, aggregate_pflops, hfu_pct, "
        "model_tflops_per_gpu or mfu_pct)",
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
        {**llama, "model": "uneven-no-split", "num_layers": "25", "first_stage_layers": "",
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
    # the row that states it; 25 layers split no way (full chunks of 4 on 7 stages would leave
    # the last none) and are skipped with the reason.
    assert result.rows[3].read_as == result.rows[0].read_as
    skipped = {model: reason for _, model, reason in result.skipped}
    assert skipped["uneven-no-split"].startswith("pp: layers (25) must split evenly")
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
    big = {  # on a PCIe card, whose host is unknown: no offloading to compete with recompute
        **ROW,
        "num_layers": "48",
        "hidden_size": "8192",
        "num_attention_heads": "64",
        "seq_len": "8192",
        "num_gpus": "8",
        "tensor_parallel": "8",
        "global_batch_size": "8",
        "gpu_type": "H100-PCIe",
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
    assert len(result.rows) == 73 and not result.skipped
    assert result.calibration_rows() is None  # never fitted on
    assert {r.table_id for r in result.rows} == {
        "LLAMA3_405B", "MT_NLG_530B", "BLOOM_176B", "TORCHTITAN_A100", "BRIDGE_H100",
        "BRIDGE_B200", "BRIDGE_MOE_H100", "BRIDGE_MOE_B200", "BRIDGE_GB200", "BRIDGE_GB300",
        "BRIDGE_B300", "DEEPSEEK_V3",
        "NEMOTRON4_340B", "DGXC_H100", "MOE_MODELZOO", "MEGATRON_GPT3_2021",
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


def test_a_shape_far_from_the_stated_size_is_a_skip_not_a_score(tmp_path: Path) -> None:
    """Outside review 7: a typo in a row's shape (hidden 2304 written 23040: 154B parameters
    where the row says 1.7B) was scored (+51 %) and moved the median and max."""
    inputs = row_inputs(ROW)
    assert not isinstance(inputs, str)
    shaped = inputs[0].params / 1e9
    near = {**ROW, "model": "near", "params_billion": f"{shaped * 1.3:.4f}"}
    typo = {**ROW, "model": "typo", "params_billion": f"{shaped / 2:.4f}"}
    result = evaluate(write(tmp_path, [near, typo], extra=["params_billion"]))
    assert [row.model for row in result.rows] == ["near"]
    ((_, model, reason),) = result.skipped
    assert model == "typo" and reason.startswith("params_billion: the row says")
    assert "one of them is wrong" in reason
