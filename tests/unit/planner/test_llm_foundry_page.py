"""`bench/llm_foundry_page.py`, the blind check on MosaicML's MPT benchmark page (issue 18):
the shape columns it adds after Model leave every printed cell as it is, and the page it
writes is read by `--evaluate` row for row. A synthetic page of the same form."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from bench_scripts import load
from trainyard.planner import attention

PAGE = """# MPT Training Benchmarks

## A100 80GB with 1600 Gbps node-node interconnect (RoCE)

|  Model | SeqLen (T) | # GPUs | GPU | MFU | MicroBatchSize | GradAccum | GlobalBatchSize \
| Throughput (T/s/GPU) | Precision | Sharding Strategy | Activation Checkpointing |
|  --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
|  7b | 2048 | 8 | a100_80gb | 55.9 | 6 | 1 | 48 | 4641 | amp_bf16 | FULL_SHARD | False |
|  125m | 2048 | 8 | a100_80gb | 44.1 | 26 | 3 | 624 | 136334 | bf16 | FULL_SHARD | False |
|  1b | 32768 | 8 | a100_80gb | 33.5 | 1 | 4 | 32 | 6275 | amp_bf16 | FULL_SHARD | False |
"""


@pytest.fixture(scope="module")
def tool() -> ModuleType:
    return load("llm_foundry_page")


def test_the_shapes_go_after_the_model_and_the_printed_cells_stay(tool: ModuleType) -> None:
    shaped = tool.with_shapes(PAGE).splitlines()
    header = [c.strip() for c in shaped[4].strip().strip("|").split("|")]
    assert header[:7] == ["Model", *tool.ADDED, "SeqLen (T)"]
    row = [c.strip() for c in shaped[6].strip().strip("|").split("|")]
    assert row[:6] == ["7b", "32", "4096", "32", "50368", "gelu"]
    assert row[6:] == ["2048", "8", "a100_80gb", "55.9", "6", "1", "48", "4641", "amp_bf16",
                       "FULL_SHARD", "False"]  # fmt: skip
    assert shaped[0] == "# MPT Training Benchmarks"  # text outside tables untouched


def test_the_check_reads_every_row(
    tool: ModuleType,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    page = tmp_path / "mpt.md"
    page.write_text(PAGE)
    monkeypatch.setattr(sys, "argv", ["llm_foundry_page.py", str(page)])
    tool.main()
    report = json.loads(capsys.readouterr().out)
    assert report["rows"] == 3 and report["skipped"] == []
    assert set(report["by_gpu"]) == {"A100-80GB"} and report["by_gpu"]["A100-80GB"]["rows"] == 3
    # only the 32K-token run says how fast its attention core ran: slower than priced
    (implied,) = report["implied_attention_efficiency"]["A100-80GB"]
    assert 0 < implied < attention.fused_attention_efficiency(32768)[1]
    assert (tmp_path / "mpt-shapes.md").is_file()
