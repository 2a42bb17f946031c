"""The SC'21 Table 1 presets against ../shared/planner/published_configs.csv (rows SC21_T1).

The shared folder is found from TRAINYARD_SHARED (default: <repo>/../shared). Missing data is a
skip locally and a failure when CI=true.
"""

from __future__ import annotations

import csv

import pytest

from shared_data import SHARED, require
from trainyard.planner.layout import ParallelLayout
from trainyard.planner.memory import memory_per_gpu
from trainyard.planner.presets import preset

CSV = SHARED / "planner" / "published_configs.csv"


def sc21_rows() -> list[dict[str, str]]:
    require(CSV, "check the presets")
    with CSV.open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["table_id"] == "SC21_T1"]
    assert len(rows) == 10
    return rows


def test_sc21_presets_match_published_shapes() -> None:
    for row in sc21_rows():
        m = preset("sc21-" + row["model"].removeprefix("GPT-").lower())
        shape = (m.layers, m.hidden, m.heads, m.seq_len, m.vocab, m.global_batch)
        published = tuple(
            int(row[k])
            for k in ("num_layers", "hidden_size", "num_attention_heads", "seq_len",
                      "vocab_size", "global_batch_size")
        )  # fmt: skip
        assert shape == published, row["model"]
        # Eq. 2 rounds to the table's parameter count within 3% (1.7B is 1.65B by Eq. 2).
        assert m.params / 1e9 == pytest.approx(float(row["params_billion"]), rel=0.03)


def test_sc21_layouts_are_valid_and_fit_in_80gb() -> None:
    for row in sc21_rows():
        m = preset("sc21-" + row["model"].removeprefix("GPT-").lower())
        tp, pp, dp = (
            int(row[k]) for k in ("tensor_parallel", "pipeline_parallel", "data_parallel")
        )
        assert tp * pp * dp == int(row["num_gpus"])
        layout = ParallelLayout(tp=tp, pp=pp, dp=dp, recompute="full", fp32_grads=True)
        assert memory_per_gpu(m, layout).total < 80, row["model"]
