"""How `trainyard plan --evaluate` reads published tables as they are printed: the FLOP count a
table uses for attention, the peak its percentages are of, the formats of Megatron-Bridge's,
torchtitan's, MosaicML's and the Megatron-LM README's tables, a run's era, and files that are
not CSV text (trainyard.planner.evaluate, rows, cells). Synthetic rows only: no shared data
needed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from published_rows import ROW, write

from trainyard.planner.errors import PlannerError
from trainyard.planner.evaluate import evaluate, evaluate_paths, row_inputs
from trainyard.planner.rows import row_target


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


def test_a_model_tflop_rate_is_compared_without_the_recompute(tmp_path: Path) -> None:
    # Outside review 13, F2: "Model TFLOP/sec/GPU" (Megatron-LM's logged rate, no recompute
    # term) was compared with the executed FLOPs, so a full-recompute run scored -6.5 %
    # where its model-FLOP comparison gives -29.6 %.
    full = {**ROW, "achieved_tflops_per_gpu": "", "activation_recompute": "full"}
    model_rate = evaluate(
        write(
            tmp_path,
            [{**full, "model_tflops_per_gpu": "150"}],
            ["activation_recompute", "model_tflops_per_gpu"],
        )
    ).rows[0]
    mfu = evaluate(
        write(
            tmp_path,
            [{**full, "mfu_pct": f"{100 * 150 / 312}"}],
            ["activation_recompute", "mfu_pct"],
        )
    ).rows[0]
    executed = evaluate(write(tmp_path, [{**full, "achieved_tflops_per_gpu": "150"}],
                              ["activation_recompute"])).rows[0]  # fmt: skip
    assert model_rate.metric == mfu.metric == "mfu_tflops"
    assert model_rate.predicted == pytest.approx(mfu.predicted)
    assert executed.metric == "tflops_per_gpu" and executed.predicted > model_rate.predicted * 1.2


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
    assert "zero3/hsdp4" in hybrid.read_as and hybrid.metric == "mfu_tflops"  # a model TFLOP/s
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
        ("MicroBatchSize", "micro_batch_size"),  # CamelCase, as MosaicML's tables write them
        ("GlobalBatchSize (T)", "global_batch_size_(t)"),
        ("NumKVHeads", "num_kv_heads"),
        ("Activation CPUOffload", "activation_cpu_offload"),
        ("numGPUs", "num_gpus"),
        ("GPUs", "gpus"),  # a plural, not "GP Us"
        ("MoE TopK", "moe_topk"),  # a one-letter part: an abbreviation, kept whole
        ("mfu(%)", "mfu(%)"),
    ],
)
def test_header_cells_name_their_columns(header: str, column: str) -> None:
    from trainyard.planner.cells import column_name as _column

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


@pytest.mark.parametrize(
    ("gpus", "tp", "group", "sharding"),
    [
        (64, 1, 8, "hsdp"),  # the 8 ranks of a host shard, 8 replicas
        (96, 2, 4, "hsdp"),  # 4 data-parallel ranks a host (8 GPUs over tp 2)
        (24, 4, 2, "hsdp"),
        (128, 8, 1, "hsdp"),  # one rank a host: every host a whole replica
        (2, 1, 2, "zero3"),  # the whole data-parallel group within one host: fully sharded
        (12, 1, 4, "hsdp"),  # 12 ranks: host groups of 8 would not divide them; 4 do
    ],
)
def test_hybrid_sharding_without_a_group_shards_within_a_host(
    gpus: int, tp: int, group: int, sharding: str
) -> None:
    # PyTorch's HYBRID_SHARD default: shard over a host's data-parallel ranks, replicate
    # across hosts (before, a group of 8 was assumed, and 2 or 12 ranks were skipped)
    cells = {"num_gpus": str(gpus), "tensor_parallel": str(tp), "sharding": "hsdp"}
    inputs = row_inputs({**ROW, "num_attention_heads": "32", "global_batch_size": "384", **cells})
    assert not isinstance(inputs, str)
    assert (inputs[1].shard_group, inputs[1].sharding) == (group, sharding)


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
    # 29 + 2 does not split in 4: full stages of 8 but the last (Megatron-Bridge's rule).
    chunked = row_inputs({**base, "num_layers": "29"})
    assert not isinstance(chunked, str)
    assert (chunked[1].first_stage_layers, chunked[1].last_stage_layers) == (8, 5)
    with pytest.raises(PlannerError) as err:  # 9 layers: stages of 3 would leave the last none
        row_inputs({**base, "num_layers": "9"})
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
    # torchtitan runs its local batch at once: 4 sequences a rank are one micro-batch of 4
    assert [r.read_as.split(" flash")[0] for r in titan_rows] == [
        "t1 d64 mb1 zero3 rc:op", "t8 d8 mb4 zero3 rc:full sp"
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


def test_a_table_as_mosaicmls_llm_foundry_prints_it_is_read(tmp_path: Path) -> None:
    # llm-foundry's MPT benchmark tables (scripts/train/benchmarking/README.md): CamelCase
    # headers, units in parentheses, PyTorch FSDP's strategy names and no tensor / pipeline
    # degree; the model's shape in columns of its own (the tables name it "7b" only).
    page = tmp_path / "mpt.md"
    page.write_text(
        "## H100 80GB BF16\n"
        "| Model | num_layers | hidden_size | num_attention_heads | vocab_size | mlp "
        "| SeqLen (T) | # GPUs | GPU | MFU | MicroBatchSize | GradAccum | GlobalBatchSize "
        "| Throughput (T/s/GPU) | GlobalBatchSize (T) | Precision | Sharding Strategy "
        "| Activation Checkpointing |\n" + "|---" * 18 + "|\n"
        "| 7b | 32 | 4096 | 32 | 50368 | gelu | 2048 | 8 | h100_80gb | 46.44 | 6 | 1 | 48 "
        "| 10643 | 98304 | amp_bf16 | FULL_SHARD | False |\n"
        "| 3b | 32 | 2560 | 20 | 50368 | gelu | 2048 | 128 | h100_80gb | 42.43 | 8 | 1 | 1024 "
        "| 23422 | 2097152 | amp_bf16 | SHARD_GRAD_OP | False |\n"
        "| 7b | 32 | 4096 | 32 | 50368 | gelu | 4096 | 8 | h100_80gb | 53.9 | 16 | 2 | 256 "
        "| 8611 | 1048576 | amp_fp8 | FULL_SHARD | True |\n"
    )
    evaluation = evaluate(page)
    assert not evaluation.skipped
    fsdp, grad_op, fp8 = evaluation.rows
    assert [r.published for r in evaluation.rows] == [10643, 23422, 8611]
    assert fsdp.metric == "tokens_per_sec_per_gpu" and fsdp.read_as.startswith("t1 d8 mb6 zero3")
    # SHARD_GRAD_OP shards gradients and optimizer states: ZeRO-2, all 128 GPUs data parallel
    assert grad_op.read_as.startswith("t1 d128 mb8 zero2 rc:none")
    assert fp8.read_as.startswith("t1 d8 mb16 zero3 rc:full") and fp8.read_as.endswith("fp8")


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


def _micro_batch(gpus: int, batch: int, **cells: str) -> int:
    """The micro-batch a data-parallel row of `gpus` GPUs and `batch` sequences is read with,
    its micro-batch cell empty unless `cells` give one."""
    row = {**ROW, "num_gpus": str(gpus), "tensor_parallel": "1", "pipeline_parallel": "1",
           "global_batch_size": str(batch), "micro_batch_size": "", **cells}  # fmt: skip
    inputs = row_inputs(row)
    assert not isinstance(inputs, str)
    return inputs[1].micro_batch


def test_a_fully_sharded_run_without_a_micro_batch_runs_its_local_batch_at_once() -> None:
    # FSDP gathers every layer again per micro-batch, so an unstated micro-batch is the local
    # batch (here 4 sequences a rank) or the largest part of it that fits, not 1.
    assert _micro_batch(64, 256, sharding="fsdp") == 4
    assert _micro_batch(64, 256, sharding="fsdp", micro_batch_size="1") == 1
    assert _micro_batch(64, 256, sharding="zero1") == 1
    assert 1 <= _micro_batch(64, 65536, sharding="fsdp") < 1024  # 1,024 a rank cannot fit


def test_gradient_accumulation_steps_give_the_micro_batch() -> None:
    # Megatron-Bridge's GA column: 128 sequences over dp 8 in 16 steps are micro-batches of 1.
    assert _micro_batch(8, 128, ga="16") == 1
    assert _micro_batch(8, 128, ga="4") == 4
    with pytest.raises(PlannerError) as err:  # 128 is no 8 x 3 x a whole micro-batch
        _micro_batch(8, 128, ga="3")
    assert err.value.field == "gradient_accumulation_steps"


def test_a_semicolon_export_reads_commas_in_numbers_as_decimal_marks(tmp_path: Path) -> None:
    # Outside review 13, F8: "0,57" s (a European spreadsheet's export) was read as 57 s.
    from trainyard.planner.cells import decimal_comma

    assert [decimal_comma(t) for t in ("0,57", "34,3 %", "1.234,5 s", "-2,5")] == [
        "0.57", "34.3 %", "1234.5 s", "-2.5",
    ]  # fmt: skip
    assert [decimal_comma(t) for t in ("TP8, PP2", "1,2,3", "8x8", "", None)] == [
        "TP8, PP2", "1,2,3", "8x8", "", None,
    ]  # fmt: skip
    row = {**ROW, "achieved_tflops_per_gpu": "", "iteration_time_s": "0,5"}
    path = tmp_path / "export.csv"
    path.write_text(";".join(row) + "\n" + ";".join(row.values()) + "\n", encoding="utf-8")
    read = evaluate(path).rows[0]
    assert (read.metric, read.published) == ("iteration_time_s", 0.5)


def test_a_batch_that_does_not_split_over_the_replicas_is_skipped_in_the_rows_words() -> None:
    # outside review 13, F14: the advice was to "change micro_batch or dp", neither stated
    why = row_inputs({**ROW, "num_gpus": "3", "global_batch_size": "64"})
    assert why == (
        "global_batch_size: 64 sequences do not split over the run's 3 data-parallel replicas "
        "(3 GPUs over tp x cp x pp = 1); one of the row's figures is not the run's"
    )
