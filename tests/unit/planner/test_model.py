"""Model shapes: validation, parameter counts, SC'21 Eq. 3 FLOPs, presets and YAML loading."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trainyard.planner.errors import PlannerError
from trainyard.planner.model import Model
from trainyard.planner.presets import PRESETS, load_model, preset


def gpt(**kw: Any) -> Model:
    base: dict[str, Any] = dict(
        name="t", layers=4, hidden=256, heads=8, seq_len=128, vocab=1000, global_batch=8
    )
    base.update(kw)
    return Model(**base)


def test_defaults_resolve_kv_heads_and_ffn() -> None:
    m = gpt()
    assert (m.kv_heads, m.ffn_hidden, m.head_dim) == (8, 1024, 32)


def test_gpt_params_match_sc21_eq2_plus_final_norm() -> None:
    m = gpt()
    n, h, v, s = 4, 256, 1000, 128  # n = layers
    eq2 = 12 * n * h * h * (1 + 13 / (12 * h) + (v + s) / (12 * n * h))
    assert m.params == pytest.approx(eq2 + 2 * h, rel=1e-12)


def test_gpt3_175b_parameter_count() -> None:
    assert preset("gpt3-175b").params == pytest.approx(174.6e9, rel=1e-3)


@pytest.mark.parametrize(
    ("name", "billions"),
    [("llama2-7b", 6.74), ("llama2-70b", 68.98), ("llama3-8b", 8.03), ("llama3-70b", 70.55)],
)
def test_llama_parameter_counts(name: str, billions: float) -> None:
    assert preset(name).params / 1e9 == pytest.approx(billions, abs=0.01)


@pytest.mark.parametrize(
    ("name", "total_b", "non_embedding_b"),
    [
        ("nemotron4-15b", 15.6, 12.5),  # arXiv:2402.16819 §2: 3.2B embedding + 12.5B other
        ("nemotron4-340b", 341.0, 331.6),  # arXiv:2406.11704 §2.1: 9.4B + 331.6B
        ("mt-nlg-530b", 530.0, None),  # arXiv:2201.11990: 530B
        ("bloom-176b", 176.2, None),  # arXiv:2211.05100 Table 3: 176,247M
        ("grok-1-314b", 314.0, None),  # xai-org/grok-1 README: 314B
    ],
)
def test_published_runs_models_parameter_counts(
    name: str, total_b: float, non_embedding_b: float | None
) -> None:
    model = preset(name)
    assert model.params / 1e9 == pytest.approx(total_b, rel=0.01)
    if non_embedding_b is not None:
        assert model.layers * model.layer_params / 1e9 == pytest.approx(non_embedding_b, rel=0.01)


@pytest.mark.parametrize(
    ("name", "billions"),
    [  # the parameter counts the model cards state
        ("llama3.2-1b", 1.24),  # meta-llama/Llama-3.2-1B: 1.23B (tied embeddings)
        ("llama3.2-3b", 3.21),  # meta-llama/Llama-3.2-3B: 3.21B
        ("mistral-7b", 7.24),  # mistralai/Mistral-7B-v0.1: 7.24B
        ("qwen2.5-7b", 7.61),  # Qwen/Qwen2.5-7B: 7.61B
        ("qwen2.5-14b", 14.7),  # Qwen/Qwen2.5-14B: 14.7B
        ("qwen2.5-32b", 32.5),  # Qwen/Qwen2.5-32B: 32.5B
        ("qwen2.5-72b", 72.7),  # Qwen/Qwen2.5-72B: 72.7B
        ("qwen3-8b", 8.2),  # Qwen/Qwen3-8B: 8.2B
        ("qwen3-14b", 14.8),  # Qwen/Qwen3-14B: 14.8B
        ("qwen3-32b", 32.8),  # Qwen/Qwen3-32B: 32.8B
        ("mixtral-8x22b", 141.0),  # mistral.ai, "Cheaper, Better, Faster, Stronger": 141B
        ("dbrx", 132.0),  # databricks/dbrx-base: 132B total
        ("deepseek-v2", 236.0),  # arXiv:2405.04434: 236B total, 21B activated
    ],
)
def test_open_weight_presets_parameter_counts(name: str, billions: float) -> None:
    assert preset(name).params / 1e9 == pytest.approx(billions, rel=0.01)


def test_open_weight_presets_are_found_by_the_names_tables_print() -> None:
    from trainyard.planner.presets import preset_named

    named = {
        "Llama 3.2 1B": "llama3.2-1b",
        "Qwen2.5-72B": "qwen2.5-72b",
        "Qwen 2.5 7B": "qwen2.5-7b",
        "Qwen3-32B": "qwen3-32b",
        "Mixtral 8x22B": "mixtral-8x22b",
        "Mistral 7B": "mistral-7b",
        "DBRX": "dbrx",
        "DeepSeek-V2": "deepseek-v2",
        "Llama 3.1 8B": "llama3-8b",  # Llama 3.x keeps Llama 3's shapes
    }
    for text, name in named.items():
        found = preset_named(text)
        assert found is not None and found.name == name, text


def test_gqa_shrinks_kv_projections() -> None:
    mha, gqa = gpt(), gpt(kv_heads=2)
    # K and V go from h x h to h x (2 heads x 32) each; their biases shrink likewise.
    assert mha.layer_params - gqa.layer_params == 2 * 256 * (256 - 64) + 2 * (256 - 64)


def test_flops_eq3_for_sc21_row() -> None:
    # SC21_T1 GPT-1.7B: B=512, s=2048, l=24, h=2304, V=51200.
    m = preset("sc21-1.7b")
    b, s, n, h, v = 512, 2048, 24, 2304, 51200  # n = layers
    expected = 96 * b * s * n * h * h * (1 + s / (6 * h) + v / (16 * n * h))
    assert m.flops_per_iteration() == pytest.approx(expected)
    # Without recompute the layers take 72 instead of 96; the output layer keeps its 6·B·s·h·V.
    layers96 = 96 * b * s * n * h * h * (1 + s / (6 * h))
    assert m.flops_per_iteration(recompute=False) == pytest.approx(expected - layers96 / 4)
    assert m.flops_per_token() == pytest.approx(expected / (b * s))
    assert expected == pytest.approx(1.5467e16, rel=1e-4)  # by hand: 1.2825e16 x 1.2060
    # 137 TFLOP/s per GPU on 32 GPUs (4.4 PFLOP/s aggregate) is about 3.5 s per iteration.
    assert expected / (137e12 * 32) == pytest.approx(3.53, abs=0.01)


def test_causal_count_halves_the_attention_core_of_full_layers_only() -> None:
    # Megatron-LM's count since 8873b55d6a: the core of SC'21 Eq. 3 (the s/(6h) term) halved.
    m = preset("sc21-1.7b")
    b, s, n, h, v = 512, 2048, 24, 2304, 51200
    causal = 96 * b * s * n * h * h * (1 + s / (12 * h) + v / (16 * n * h))
    assert m.flops_per_iteration(attention="causal") == pytest.approx(causal)
    assert m.flops_per_iteration(attention="causal") < m.flops_per_iteration()
    gemm, core = m.layer_forward_flops(1.0)
    assert m.layer_forward_flops(1.0, attention="causal") == pytest.approx((gemm, core / 2))
    # A sliding-window layer's core is its window, counted whole either way: with one layer
    # in four attending to the whole sequence, only that quarter of the core is halved.
    w = gpt(seq_len=4096, window=128, full_attention_every=4)
    _, whole = w.layer_forward_flops(1.0)
    _, half = w.layer_forward_flops(1.0, attention="causal")
    assert whole - half == pytest.approx(4.0 * w.core_width * 4096 / 4 / 2)
    # "none" leaves the core out: 6 x the matrices' parameters per token, plus the logits.
    assert m.layer_forward_flops(1.0, attention="none") == (gemm, 0.0)
    six_n = 6 * b * s * (n * m.layer_matmul_params + h * m.padded_vocab())
    assert m.flops_per_iteration(recompute=False, attention="none") == pytest.approx(six_n)


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"hidden": 250}, "hidden"),
        ({"kv_heads": 3}, "kv_heads"),
        ({"kv_heads": 16}, "kv_heads"),
        ({"layers": 0}, "layers"),
        ({"seq_len": -1}, "seq_len"),
        ({"vocab": 1.5}, "vocab"),
        ({"global_batch": True}, "global_batch"),
        ({"precision": "fp4"}, "precision"),
        ({"ffn_hidden": -4}, "ffn_hidden"),
        ({"name": ""}, "name"),
        ({"gated_mlp": "yes"}, "gated_mlp"),
    ],
)
def test_bad_model_names_the_field(kw: dict[str, Any], field: str) -> None:
    with pytest.raises(PlannerError) as err:
        gpt(**kw)
    assert err.value.field == field
    assert str(err.value).startswith(field)


def test_preset_lookup_and_suggestion() -> None:
    assert preset("LLAMA2_7B") is PRESETS["llama2-7b"]
    assert preset("sc21-1t").layers == 128
    with pytest.raises(PlannerError) as err:
        preset("llama2-8b")
    assert err.value.field == "model" and "llama2-7b" in str(err.value)


def test_every_preset_family_is_present() -> None:
    gpt3 = [n for n in PRESETS if n.startswith("gpt3-")]
    sc21 = [n for n in PRESETS if n.startswith("sc21-")]
    llama = [n for n in PRESETS if n.startswith("llama")]
    assert (len(gpt3), len(sc21), len(llama)) == (8, 10, 8)


def test_load_model_from_preset_with_overrides(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text("preset: gpt3-125m\nname: mine\nhidden: 1536\nheads: 16\n")
    m = load_model(path)
    assert (m.name, m.hidden, m.heads, m.kv_heads, m.ffn_hidden) == ("mine", 1536, 16, 16, 6144)


def test_load_model_full(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(
        "name: tiny\nlayers: 2\nhidden: 64\nheads: 4\nkv_heads: 2\nseq_len: 32\n"
        "vocab: 100\nglobal_batch: 4\nprecision: fp8\n"
    )
    assert load_model(path) == Model("tiny", 2, 64, 4, 32, 100, 4, kv_heads=2, precision="fp8")


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("name: x\nlayers: 2\n", "hidden"),
        ("preset: gpt3-125m\nhiden: 5\n", "hiden"),
        ("preset: gpt3-125m\nheads: 7\n", "hidden"),
        ("preset: nope\n", "model"),
        ("[1, 2]\n", "model"),
    ],
)
def test_load_model_errors_name_the_field(tmp_path: Path, text: str, field: str) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(text)
    with pytest.raises(PlannerError) as err:
        load_model(path)
    assert err.value.field == field
