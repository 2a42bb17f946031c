"""`trainyard plan --evaluate` on a Markdown page of published runs, as Megatron-Bridge prints
its performance summary (trainyard.planner.markdown_tables, evaluate): pipe tables, the model,
system and release named in headings, Markdown inside cells, and fine-tuning sections.
Synthetic pages only: no shared data needed.
"""

from __future__ import annotations

from pathlib import Path

from published_rows import ROW, write

from trainyard.planner.evaluate import evaluate, evaluate_paths
from trainyard.planner.markdown_tables import is_markdown, markdown_rows

_COLUMNS = (
    "| System | #-GPUs | Precision | GBS | MBS | Sequence Length | TP | PP | CP | VP | EP "
    "| Tokens / sec / GPU | Model TFLOP / sec / GPU |\n"
    "|--------|--------|-----------|-----|-----|-----------------|----|----|----|----|----"
    "|-----------------------|-------------------------|\n"
)

# A page laid out as Megatron-Bridge's docs/performance-summary.md: the release and the model
# in headings, the system in a column; then a release whose tables put the system in a
# heading and the model in a column; a LoRA section; a footnote.
PAGE = (
    "# Performance\n\nSome prose with a | pipe in it.\n\n"
    "## 26.06 NeMo Container\n\n### Pre-Training Performance\n\n"
    "#### Model: LLAMA3_70B\n\n"
    + _COLUMNS
    + "| DGX-H100 | 64 | FP8 | 128 | 1 | 8192 | 4 | 8 | 1 | 5 | n/a | 1602[^note] | |\n"
    "| **DGX-B200** | 64 | BF16 | 128 | 1 | 8192 | 4 | 8 | 1 | 5 | n/a | | 1100 |\n\n"
    "#### Model: LLAMA3_8B\n\n"
    + _COLUMNS
    + "| [DGX-H100](https://example.com) | 8 | BF16 | 128 | 1 | 8192 | 1 | 1 | 1 | n/a "
    "| n/a | 11000 | |\n\n"
    "### LoRA Performance\n\n#### Model: LLAMA3_70B\n\n"
    + _COLUMNS
    + "| DGX-H100 | 8 | FP8 | 32 | 1 | 4096 | 2 | 4 | 1 | 20 | n/a | 2643 | 735 |\n\n"
    "## 25.11 NeMo Container\n\n#### System: DGX-H100\n\n"
    "| Model | #-GPUs | Precision | GBS | MBS | Sequence Length | TP | PP | CP | VP | EP "
    "| Tokens / sec / GPU |\n"
    "|:--|--:|:-:|---|---|---|---|---|---|---|---|---|\n"
    "| LLAMA3_8B | 8 | BF16 | 128 | 1 | 8192 | 1 | 1 | 1 | n/a | n/a | 12000 |\n"
    "| Nemotron_3_Super | 64 | BF16 | 512 | 1 | 8192 | 1 | 1 | 1 | n/a | 64 | 9000 |\n\n"
    "[^note]: A footnote.\n"
)


def test_a_performance_page_in_markdown_is_read_table_by_table(tmp_path: Path) -> None:
    path = tmp_path / "performance-summary.md"
    path.write_text(PAGE)
    result = evaluate(path)
    read = {(r.table_id, r.model, r.gpus, r.metric): r for r in result.rows}
    assert len(result.rows) == 4
    h100 = read["26.06 NeMo Container", "LLAMA3_70B", 64, "tokens_per_sec_per_gpu"]
    assert h100.published == 1602  # the footnote reference is not part of the figure
    assert h100.read_as.startswith("t4 p8 v5 d2") and h100.read_as.endswith("fp8")
    b200 = read["26.06 NeMo Container", "LLAMA3_70B", 64, "mfu_tflops"]
    assert b200.published == 1100 and not b200.read_as.endswith("fp8")
    assert read["26.06 NeMo Container", "LLAMA3_8B", 8, "tokens_per_sec_per_gpu"].published == 11000
    # The system named in a heading is the GPU of the table's lines; the model is a column.
    older = read["25.11 NeMo Container", "LLAMA3_8B", 8, "tokens_per_sec_per_gpu"]
    assert older.published == 12000
    assert (
        older.predicted
        == read["26.06 NeMo Container", "LLAMA3_8B", 8, "tokens_per_sec_per_gpu"].predicted
    )
    reasons = {(t, m): why for t, m, why in result.skipped}
    assert len(result.skipped) == 2
    # a skipped row is named by its line in the page (outside review 9, L6)
    assert reasons["26.06 NeMo Container", "LLAMA3_70B (line 28)"].startswith("a LoRA / adapter")
    assert (
        "not one the planner knows by name"
        in reasons["25.11 NeMo Container", "Nemotron_3_Super (line 37)"]
    )


def test_a_page_is_markdown_by_its_suffix_or_its_table_delimiter(tmp_path: Path) -> None:
    # A page saved without the .md suffix is still read as Markdown; a CSV is not.
    plain = tmp_path / "summary.txt"
    plain.write_text(PAGE)
    assert len(evaluate(plain).rows) == 4
    assert is_markdown("x.txt", "a | b\n---|---\n1 | 2\n")
    assert not is_markdown("runs.csv", "model,num_gpus\nx,8\n")
    csv_file = write(tmp_path, [ROW])
    assert len(evaluate_paths([csv_file, plain]).rows) == 5


def test_cells_lose_their_markdown_and_escaped_pipes_stay() -> None:
    rows = markdown_rows(
        "# Runs\n\n| Model | Notes | GPUs |\n|---|---|---|\n"
        "| `llama3-8b` | a \\| b<br>c | **8** |\n| short |\n"
    )
    assert rows[0] == {
        "model": "llama3-8b", "notes": "a | b c", "gpus": "8", "table_id": "Runs", "_line": "5"
    }  # fmt: skip
    # A line with fewer cells than the header leaves the rest missing, the model its own.
    assert rows[1]["model"] == "short" and "gpus" not in rows[1]


def test_a_page_without_a_table_is_one_skipped_entry(tmp_path: Path) -> None:
    page = tmp_path / "notes.md"
    page.write_text("# Notes\n\nNo table here.\n")
    result = evaluate_paths([write(tmp_path, [ROW]), page])
    assert [(t, why.split(":")[0]) for t, _m, why in result.skipped] == [("notes.md", "no rows")]


def test_tables_without_outer_pipes_and_code_blocks_are_read_as_markdown_means_them() -> None:
    page = (
        "# Results\n\n```bash\n# not a heading\nx | y\n---|---\n```\n\n"
        "## **Model:** [llama3-8b](https://example.com)\n\n"
        "num_gpus | seq_len\n---|---\n8 | 8192\n\nprose after the table | with a pipe\n"
    )
    rows = markdown_rows(page)
    assert rows == [
        {
            "num_gpus": "8", "seq_len": "8192", "table_id": "Model: llama3-8b",
            "model": "llama3-8b", "_line": "13",
        }
    ]  # fmt: skip


def test_headings_that_name_the_gpu_or_the_precision_fill_those_columns() -> None:
    page = (
        "# Llama 3\n\n## Results on DGX H100\n\n### FP8 Performance\n\n"
        "| Model | GPUs |\n|---|---|\n| LLAMA3-8B | 8 |\n\n"
        "### BF16 vs FP8\n\n| Model | GPUs |\n|---|---|\n| LLAMA3-8B | 8 |\n\n"
        "## Elsewhere\n\n| Model | GPUs |\n|---|---|\n| LLAMA3-8B | 8 |\n"
    )
    fp8, both, bare = markdown_rows(page)
    assert (fp8["gpu_type"], fp8["precision"]) == ("Results on DGX H100", "FP8 Performance")
    assert both["gpu_type"] == "Results on DGX H100" and "precision" not in both
    assert "gpu_type" not in bare and "precision" not in bare


# NeMo 24.07's fine-tuning table (NVIDIA/NeMo docs/source/performance/performance_summary.md at
# 8e3d65dcfe): the kind of training in a "Task" column, the packed sequences' length, and
# Nemotron-4 340B named as NeMo names it.
NEMO_FINETUNING = (
    "### Finetuning, FP8 on H100\n\n"
    "| Model | Task | #-GPUs | GBS | MBS | Packed Sequence Length | TP | PP "
    "| Tokens / sec / GPU |\n"
    "|---|---|---|---|---|---|---|---|---|\n"
    "| LLAMA2-7B | SFT | 8 | 32 | 1 | 4096 | 1 | 1 | 16891 |\n"
    "| LLAMA2-7B | LoRA | 8 | 32 | 1 | 4096 | 1 | 1 | 24824 |\n"
    "| Nemotron-340B | SFT | 128 | 32 | 1 | 4096 | 8 | 8 | 326 |\n"
)


def test_a_task_column_names_adapters_and_packed_sequences_are_the_length(
    tmp_path: Path,
) -> None:
    path = tmp_path / "nemo.md"
    path.write_text(NEMO_FINETUNING)
    result = evaluate(path)
    read = {r.model: r for r in result.rows}
    assert sorted(read) == ["LLAMA2-7B", "Nemotron-340B"]  # the SFT rows: every weight trained
    assert read["LLAMA2-7B"].published == 16891 and read["LLAMA2-7B"].read_as.endswith("fp8")
    assert read["Nemotron-340B"].read_as.startswith("t8 p8 d2")
    [(_table, model, why)] = result.skipped
    assert model == "LLAMA2-7B (line 6)" and why.startswith("a LoRA / adapter")


def test_a_heading_that_names_a_preset_among_other_words_gives_the_model(tmp_path: Path) -> None:
    # Headings as a paper or a blog writes them (outside review 9, F3): the model's name with
    # the system beside it, or the system in a heading of its own under the model's.
    table = "| GPUs | TP | PP | DP | Seq. Len. | TFLOPs/GPU |\n|---|---|---|---|---|---|\n"
    line = "| 8192 | 8 | 16 | 64 | 8192 | 430 |\n"
    for headings in (
        "## Llama 3.1 405B on H100\n\n",
        "## Llama 3.1 405B (H100)\n\n",
        "## Training Llama 3.1 405B, H100 (BF16)\n\n",
        "## Llama 3.1 405B\n\n### H100 (BF16)\n\n",
    ):
        [row] = markdown_rows("# Llama 3\n\n" + headings + table + line)
        assert row["model"] == "Llama 3.1 405B", headings
    # No heading naming a preset: the nearest heading, as before.
    [row] = markdown_rows("# Runs\n\n## My model\n\n" + table + line)
    assert row["model"] == "My model"
