"""`row_files`: the columns `plan --evaluate` reads (`READ_COLUMNS`, kept equal to what the row
readers ask for) and the columns of a file it does not read, named (outside review 13, F7)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from published_rows import ROW, write

import trainyard.planner.cells as cells
from trainyard.planner.evaluate import evaluate, evaluate_paths, package_csv_path
from trainyard.planner.hardware import CATALOGUE
from trainyard.planner.row_files import READ_COLUMNS, columns_not_read

PLANNER = Path(cells.__file__).parent
_READ_CALL = re.compile(
    r"\b(?:row_cell|number|count|flag|percent|integer)\((?:row|raw), \"([a-z_0-9]+)\""
)


def test_every_column_a_reader_names_is_a_read_column() -> None:
    named = {m for path in PLANNER.glob("*.py") for m in _READ_CALL.findall(path.read_text())}
    assert named and named <= READ_COLUMNS, sorted(named - READ_COLUMNS)


def test_every_column_asked_while_evaluating_is_a_read_column(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: set[str] = set()
    original = cells.row_cell

    def recording(row: cells.Row, field: str) -> str:
        asked.add(field)
        return original(row, field)

    monkeypatch.setattr(cells, "row_cell", recording)
    for name, module in list(sys.modules.items()):
        if name.startswith("trainyard.planner.") and getattr(module, "row_cell", None) is original:
            monkeypatch.setattr(module, "row_cell", recording)
    evaluate(package_csv_path())
    assert len(asked) > 40 and asked <= READ_COLUMNS, sorted(asked - READ_COLUMNS)


def test_columns_the_planner_does_not_read_are_named(tmp_path: Path) -> None:
    rows = [{**ROW, "tensor_paralel": "2", "_line": "3", "torch_compile": ""}]
    assert columns_not_read(rows) == ["tensor_paralel"]  # an empty column says nothing
    assert columns_not_read([{**ROW, "tp": "2", "tokens/sec/gpu": "100"}]) == []  # other names
    path = write(tmp_path, [{**ROW, "zero_bubble": "yes"}], ["zero_bubble"])
    result = evaluate_paths([path])
    assert result.not_read == (("published_configs.csv", ("zero_bubble",)),)
    assert "columns not read" in result.table() and "zero_bubble" in result.table()


def test_rows_may_name_a_gpu_of_a_gpu_file(tmp_path: Path) -> None:
    # outside review 13, F11: --gpu-file was accepted with --evaluate and ignored
    from trainyard.planner.hardware import load_catalogue

    gpus = tmp_path / "gpus.yaml"
    gpus.write_text(
        "MI300X: {bf16_tflops: 1307, fp8_tflops: 2615, fp32_tflops: 163.4, memory_gb: 204,"
        " memory_bw_tbs: 5.3, nvlink_gb_s: 448, gpus_per_node: 8, network_gb_s: 50,"
        " network_latency_us: 5}\n"
        "A100-80GB: {bf16_tflops: 156}\n"  # a known GPU's field changed
    )
    path = write(tmp_path, [{**ROW, "gpu_type": "AMD MI300X OAM"}, ROW])
    plain = evaluate_paths([path])
    assert [s[2] for s in plain.skipped] == [
        f"gpu_type: unknown GPU 'AMD MI300X OAM'; name one of {', '.join(CATALOGUE)} "
        "(or describe it in a --gpu-file)"
    ]
    result = evaluate_paths([path], catalogue=load_catalogue(gpus))
    assert not result.skipped and len(result.rows) == 2
    mi300x, a100 = result.rows  # in the file's order
    assert mi300x.published == plain.rows[0].published
    assert a100.predicted < 0.75 * plain.rows[0].predicted  # the A100 at half its peak
