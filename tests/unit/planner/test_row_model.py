"""The model a published row describes (trainyard.planner.row_model): its shape columns, or the
preset its model cell names when it leaves them out."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import pytest

from trainyard.planner.evaluate import row_inputs
from trainyard.planner.presets import preset, preset_named
from trainyard.planner.row_model import heads_assumed, row_model

# Llama 3.1 405B as Meta's paper gives its run: no shape columns, only the name and the layout.
NAMED = {
    "table_id": "T", "model": "Llama 3.1 405B", "seq_len": "8192", "global_batch_size": "2048",
    "gpu_type": "H100", "num_gpus": "8192", "tensor_parallel": "8", "pipeline_parallel": "16",
    "first_stage_layers": "7", "last_stage_layers": "7", "virtual_pipeline": "8",
    "precision": "bf16", "achieved_tflops_per_gpu": "430",
}  # fmt: skip


@pytest.mark.parametrize(
    ("text", "name"),
    [("Llama 3.1 405B", "llama3-405b"), ("Llama-3.3-70B", "llama3-70b"),
     ("GPT-3 175B", "gpt3-175b"), ("Mixtral 8x7B", "mixtral-8x7b"),
     ("Qwen3-235B-A22B", "qwen3-235b-a22b"), ("DeepSeek-V3", "deepseek-v3"),
     ("llama2_13b", "llama2-13b"), ("GPT-3 1.3B", "gpt3-1.3b"), ("GPT-3 13B", "gpt3-13b"),
     ("Kimi_K2", "kimi-k2"), ("DeepSeekV3 (w/o MTP)", "deepseek-v3"),
     ("DeepSeekV3 (dropless)", "deepseek-v3"), ("Qwen3_30B_a3B (tokendrop)", "qwen3-30b-a3b"),
     ("Nemotron-4 340B", "nemotron4-340b"), ("Grok-1", "grok-1-314b"),
     ("Megatron-Turing NLG 530B", "mt-nlg-530b"), ("BLOOM 176B", "bloom-176b"),
     ("Nemotron-340B", "nemotron4-340b")],
)  # fmt: skip
def test_published_model_names_find_their_preset(text: str, name: str) -> None:
    assert preset_named(text) == preset(name)


@pytest.mark.parametrize(
    "text",
    ["", "Gemma 2 9B", "Qwen2.5 3B", "GPT-1.7B", "Falcon 180B", "llama3", "DeepSeekV3 (w/ MTP)"],
)
def test_other_names_find_none(text: str) -> None:
    assert preset_named(text) is None


def test_a_row_without_shape_takes_its_named_presets_shape() -> None:
    inputs = row_inputs(NAMED)
    assert not isinstance(inputs, str)
    model, layout, _device = inputs
    base = preset("llama3-405b")
    assert (model.layers, model.hidden, model.heads, model.kv_heads, model.ffn_hidden) == (
        base.layers, base.hidden, base.heads, base.kv_heads, base.ffn_hidden,
    )  # fmt: skip
    assert (model.seq_len, model.global_batch, model.name) == (8192, 2048, "Llama 3.1 405B")
    assert layout.stage_layers(model)[0] == 7 and layout.dp == 64


def test_stated_shape_columns_replace_the_presets() -> None:
    model = row_model({**NAMED, "seq_len": "131072", "num_kv_heads": "16", "num_layers": "128"})
    assert not isinstance(model, str)
    assert (model.seq_len, model.kv_heads, model.layers) == (131072, 16, 128)
    assert dataclasses.replace(model, seq_len=8192, kv_heads=8, layers=126, name="x") == (
        dataclasses.replace(preset("llama3-405b"), global_batch=2048, name="x")
    )


def test_the_run_s_own_figures_are_never_taken_from_a_preset() -> None:
    assert row_model({**NAMED, "global_batch_size": ""}) == "no global_batch_size"
    assert row_model({**NAMED, "seq_len": ""}) == "no seq_len"
    reason = row_model({**NAMED, "model": "Falcon 180B"})
    assert isinstance(reason, str) and reason.startswith("no num_layers")


@pytest.mark.parametrize(
    ("text", "sequences"), [("16M", 2048), ("16M tokens", 2048), ("16,777,216", 2048), ("4M", 512)]
)
def test_a_batch_given_in_tokens_is_read_as_sequences(text: str, sequences: int) -> None:
    model = row_model({**NAMED, "global_batch_size": "", "global_batch_tokens": text})
    assert not isinstance(model, str) and model.global_batch == sequences


def test_a_batch_column_that_says_tokens_is_read_as_a_token_batch() -> None:
    model = row_model({**NAMED, "global_batch_size": "16M tokens"})
    assert not isinstance(model, str) and model.global_batch == 2048
    assert row_model({**NAMED, "global_batch_size": "2048"}) == model


@pytest.mark.parametrize("text", ["abc", "1000", "5000 tokens"])
def test_a_token_batch_that_is_not_whole_sequences_names_its_column(text: str) -> None:
    from trainyard.planner.errors import PlannerError

    with pytest.raises(PlannerError) as caught:
        row_model({**NAMED, "global_batch_size": "", "global_batch_tokens": text})
    assert caught.value.field == "global_batch_tokens"


# A row as the Megatron-LM README's April 2021 image prints it: the shape but not the heads.
NO_HEADS = {
    "table_id": "T", "model": "GPT-39.1B", "num_layers": "48", "hidden_size": "8192",
    "seq_len": "2048", "vocab_size": "51200", "global_batch_size": "1536", "gpu_type": "A100",
    "num_gpus": "512", "tensor_parallel": "8", "pipeline_parallel": "2",
    "achieved_tflops_per_gpu": "138",
}  # fmt: skip


@pytest.mark.parametrize(("hidden", "heads"), [("8192", 64), ("2304", 18), ("2112", 33)])
def test_a_row_without_heads_is_read_with_heads_of_width_128_else_64(
    hidden: str, heads: int
) -> None:
    model = row_model({**NO_HEADS, "hidden_size": hidden, "tensor_parallel": "1"})
    assert not isinstance(model, str)
    assert model.heads == heads and heads_assumed(NO_HEADS)
    stated = row_model({**NO_HEADS, "num_attention_heads": "32"})
    assert not isinstance(stated, str) and stated.heads == 32
    assert not heads_assumed({**NO_HEADS, "num_attention_heads": "32"})


def test_heads_are_assumed_only_when_they_are_all_that_is_missing() -> None:
    # hidden 100 has no head width of 128 or 64; without layers too the row stays a skip.
    assert row_model({**NO_HEADS, "hidden_size": "100"}) == (
        "no num_attention_heads, and the model is not one the planner knows by name"
    )
    no_layers = {k: v for k, v in NO_HEADS.items() if k != "num_layers"}
    assert row_model(no_layers) == (
        "no num_layers, and the model is not one the planner knows by name"
    )
    assert not heads_assumed(no_layers)
    # A named model's heads are its preset's, not assumed.
    named = {**NO_HEADS, "model": "GPT-3 175B", "num_layers": "96", "hidden_size": "12288"}
    model = row_model(named)
    assert not isinstance(model, str) and model.heads == 96 and not heads_assumed(named)


def test_an_evaluation_labels_assumed_heads_and_sets_repeated_figures_apart(
    tmp_path: Path,
) -> None:
    from trainyard.planner.evaluate import evaluate

    fitted = {**NO_HEADS, "num_attention_heads": "64", "split": "calibration"}
    again = {**NO_HEADS, "table_id": "T2"}  # the same figure, printed without heads
    other = {**NO_HEADS, "table_id": "T3", "achieved_tflops_per_gpu": "128"}
    path = tmp_path / "rows.csv"
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=[*fitted])
        writer.writeheader()
        writer.writerows([fitted, again, other])
    result = evaluate(path)
    by_table = {r.table_id: r for r in result.rows}
    assert by_table["T"].calibration and not by_table["T"].repeats
    assert by_table["T2"].repeats and by_table["T2"].read_as.endswith("(heads assumed: 64)")
    assert not by_table["T3"].repeats
    held, repeats = result.held_out(), result.repeats()
    assert held is not None and held["rows"] == 1
    assert repeats is not None and repeats["rows"] == 1
    assert " = t8 p2" in result.table()
