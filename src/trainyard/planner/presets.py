"""Named model presets and reading a `Model` from YAML or a mapping (a job spec's `model:`
section): `PRESETS`, `preset`, `load_model`, `model_from_mapping`.

This module owns which models the planner knows by name and how a model is given as data;
`trainyard.planner.model` owns what a model is and its arithmetic. Each preset cites where its
shape comes from.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from trainyard import yamlio
from trainyard.planner.errors import PlannerError, unknown_name
from trainyard.planner.model import Model
from trainyard.textfile import TextFileError, read_text

__all__ = ["PRESETS", "load_model", "model_from_mapping", "preset", "preset_in", "preset_named"]


def _gpt3(name: str, layers: int, hidden: int, heads: int, batch: int) -> Model:
    return Model(name, layers, hidden, heads, seq_len=2048, vocab=50257, global_batch=batch)


def _sc21(size: str, layers: int, hidden: int, heads: int, batch: int) -> Model:
    return Model(f"sc21-{size}", layers, hidden, heads, 2048, 51200, batch)


def _llama(
    name: str, n: int, h: int, a: int, k: int, f: int, s: int, v: int, b: int, *, tied: bool = False
) -> Model:
    return Model(
        name, n, h, a, s, v, b, kv_heads=k, ffn_hidden=f, mlp="swiglu", bias=False,
        tied_embeddings=tied, learned_positions=False,
    )  # fmt: skip


def _moe(
    name: str,
    shape: tuple[int, ...],
    experts: tuple[int, int, int],
    d: int = 0,
    window: tuple[int, int] = (0, 0),
) -> Model:
    """A Llama-shaped mixture of experts: `shape` as `_llama`'s, `experts` (count, top-k,
    expert hidden size), `d` the head dimension (0: hidden / heads), `window` (sliding window,
    every how many layers one attends fully)."""
    base = _llama(name, *shape)
    count, topk, f_e = experts
    return dataclasses.replace(
        base, experts=count, moe_topk=topk, moe_ffn_hidden=f_e, head_dim=d, window=window[0],
        full_attention_every=window[1],
    )  # fmt: skip


def _shaped(name: str, shape: tuple[int, ...], mlp: str) -> Model:
    """A Llama-shaped model (`_llama`'s shape) with another MLP."""
    return dataclasses.replace(_llama(name, *shape), mlp=mlp)


def _latent(name: str, heads: int, vocab: int, experts: int, dense: int) -> Model:
    """A DeepSeek-V3-shaped model (61 layers of hidden 7168, latent attention with ranks 512 /
    1536, top-8 experts of 2048 and one shared, dense layers of 18432): `heads`, `vocab`,
    `experts` and `dense` first layers its own."""
    shape = (61, 7168, heads, heads, 18432, 4096, vocab, 1024)
    return dataclasses.replace(
        _moe(name, shape, (experts, 8, 2048)), head_dim=128, kv_lora_rank=512,
        q_lora_rank=1536, rope_dim=64, v_head_dim=128, dense_layers=dense,
        moe_shared_ffn_hidden=2048,
    )  # fmt: skip


# GPT-3: Brown et al. 2020 Table 2.1 (batch in tokens / 2048). Two deviations from the table's
# typos: 1.3B uses 16 heads (its 24 x 128 != 2048) and 13B uses hidden 5120 (not 5140).
# SC'21: Narayanan et al. Table 1 (shapes as in ../shared/planner/published_configs.csv SC21_T1).
# Llama 2: Touvron et al. 2023 (4M-token batch); Llama 3: Meta's model cards / config.json.
PRESETS: dict[str, Model] = {
    m.name: m
    for m in (
        _gpt3("gpt3-125m", 12, 768, 12, 256),
        _gpt3("gpt3-350m", 24, 1024, 16, 256),
        _gpt3("gpt3-760m", 24, 1536, 16, 256),
        _gpt3("gpt3-1.3b", 24, 2048, 16, 512),
        _gpt3("gpt3-2.7b", 32, 2560, 32, 512),
        _gpt3("gpt3-6.7b", 32, 4096, 32, 1024),
        _gpt3("gpt3-13b", 40, 5120, 40, 1024),
        _gpt3("gpt3-175b", 96, 12288, 96, 1536),
        _sc21("1.7b", 24, 2304, 24, 512),
        _sc21("3.6b", 30, 3072, 32, 512),
        _sc21("7.5b", 36, 4096, 32, 512),
        _sc21("18.4b", 40, 6144, 48, 1024),
        _sc21("39.1b", 48, 8192, 64, 1536),
        _sc21("76.1b", 60, 10240, 80, 1792),
        _sc21("145.6b", 80, 12288, 96, 2304),
        _sc21("310.1b", 96, 16384, 128, 2160),
        _sc21("529.6b", 105, 20480, 128, 2520),
        _sc21("1008.0b", 128, 25600, 160, 3072),
        _llama("llama2-7b", 32, 4096, 32, 32, 11008, 4096, 32000, 1024),
        _llama("llama2-13b", 40, 5120, 40, 40, 13824, 4096, 32000, 1024),
        _llama("llama2-70b", 80, 8192, 64, 8, 28672, 4096, 32000, 1024),
        _llama("llama3-8b", 32, 4096, 32, 8, 14336, 8192, 128256, 512),
        _llama("llama3-70b", 80, 8192, 64, 8, 28672, 8192, 128256, 512),
        # Llama 3.1 405B: Dubey et al. 2024 (arXiv:2407.21783) Table 3, 16M-token batches.
        _llama("llama3-405b", 126, 16384, 128, 8, 53248, 8192, 128256, 2048),
        # Mixtures of experts (Hugging Face configs; 4M-token batches, as the Llama presets):
        # Mixtral 8x7B (Jiang et al. 2024, arXiv:2401.04088 Table 1), Qwen3-30B-A3B and
        # Qwen3-235B-A22B (Qwen/Qwen3-*/config.json: head_dim 128, every layer MoE), GPT-OSS
        # 120B (openai/gpt-oss-120b/config.json: head_dim 64, sliding window of 128 tokens on
        # every other layer; its attention biases and sinks are left out, < 0.01 % of it).
        _moe("mixtral-8x7b", (32, 4096, 32, 8, 14336, 4096, 32000, 1024), (8, 2, 14336)),
        _moe("qwen3-30b-a3b", (48, 2048, 32, 4, 6144, 4096, 151936, 1024), (128, 8, 768), 128),
        _moe("qwen3-235b-a22b", (94, 4096, 64, 4, 12288, 4096, 151936, 1024), (128, 8, 1536), 128),
        _moe(
            "gpt-oss-120b",
            (36, 2880, 64, 8, 2880, 4096, 201088, 1024),
            (128, 4, 2880),
            64,
            (128, 2),
        ),
        # DeepSeek-V3 (DeepSeek-AI 2024, arXiv:2412.19437 §4.2; deepseek-ai/DeepSeek-V3
        # config.json): latent attention, 3 dense layers, 256 experts of 2048 and one shared,
        # top-8; its multi-token-prediction module is not counted (671B without it).
        _latent("deepseek-v3", 128, 129280, 256, 3),
        # Kimi K2 (moonshotai/Kimi-K2 config.json, model type kimi_k2): DeepSeek-V3's shape with
        # 64 heads, 384 experts, one dense layer and a vocabulary of 163,840.
        _latent("kimi-k2", 64, 163840, 384, 1),
        # Nemotron-4 (Parmar et al. 2024, arXiv:2402.16819 §2; NVIDIA 2024, arXiv:2406.11704
        # §2.1): squared-ReLU MLP of 4h, GQA with 8 groups, RoPE, no biases, untied 256K
        # vocabulary. Grok-1 (xai-org/grok-1 model.py and README): 8 experts of gated GELU,
        # top-2, every layer. MT-NLG (Smith et al. 2022, arXiv:2201.11990 §2.4) and BLOOM
        # (Le Scao et al. 2022, arXiv:2211.05100 Table 3; ALiBi positions, tied embeddings):
        # GPT-shaped.
        _shaped("nemotron4-15b", (32, 6144, 48, 8, 24576, 4096, 256000, 1024), "squared_relu"),
        _shaped("nemotron4-340b", (96, 18432, 96, 8, 73728, 4096, 256000, 1024), "squared_relu"),
        dataclasses.replace(
            _moe("grok-1-314b", (64, 6144, 48, 8, 32768, 8192, 131072, 512), (8, 2, 32768)),
            mlp="geglu",
        ),
        Model("mt-nlg-530b", 105, 20480, 128, 2048, 50257, 1920),
        Model("bloom-176b", 70, 14336, 112, 2048, 250680, 2048, learned_positions=False),
        # Open-weight models as their Hugging Face config.json give them (layers, hidden,
        # heads, kv heads, intermediate size, vocabulary, tied embeddings; 4M-token batches
        # at the context they were pre-trained with, as the Llama presets). Llama 3.2 1B / 3B
        # (meta-llama/Llama-3.2-*): tied embeddings. Mistral 7B v0.1
        # (mistralai/Mistral-7B-v0.1): a sliding window of 4,096 keys in every layer, 8K
        # context. Qwen2.5 (Qwen/Qwen2.5-*: their q/k/v biases, 0.01 % of a model, are left
        # out) and Qwen3's dense models (Qwen/Qwen3-*: head_dim 128). Mixtral 8x22B
        # (mistralai/Mixtral-8x22B-v0.1): 8 experts, top-2. DBRX (databricks/dbrx-base,
        # Databricks 2024): 16 experts of 10,752, top-4, 100,352-token vocabulary.
        _llama("llama3.2-1b", 16, 2048, 32, 8, 8192, 8192, 128256, 512, tied=True),
        _llama("llama3.2-3b", 28, 3072, 24, 8, 8192, 8192, 128256, 512, tied=True),
        dataclasses.replace(
            _llama("mistral-7b", 32, 4096, 32, 8, 14336, 8192, 32000, 512), window=4096
        ),
        _llama("qwen2.5-7b", 28, 3584, 28, 4, 18944, 4096, 152064, 1024),
        _llama("qwen2.5-14b", 48, 5120, 40, 8, 13824, 4096, 152064, 1024),
        _llama("qwen2.5-32b", 64, 5120, 40, 8, 27648, 4096, 152064, 1024),
        _llama("qwen2.5-72b", 80, 8192, 64, 8, 29568, 4096, 152064, 1024),
        dataclasses.replace(
            _llama("qwen3-8b", 36, 4096, 32, 8, 12288, 4096, 151936, 1024), head_dim=128
        ),
        dataclasses.replace(
            _llama("qwen3-14b", 40, 5120, 40, 8, 17408, 4096, 151936, 1024), head_dim=128
        ),
        dataclasses.replace(
            _llama("qwen3-32b", 64, 5120, 64, 8, 25600, 4096, 151936, 1024), head_dim=128
        ),
        # DeepSeek-V2 (DeepSeek-AI 2024, arXiv:2405.04434; deepseek-ai/DeepSeek-V2 config.json):
        # 60 layers of hidden 5120, latent attention (128 heads, ranks 512 / 1536), one dense
        # layer of 12,288, then 160 experts of 1,536, top-6, and two shared (3,072).
        dataclasses.replace(
            _moe("deepseek-v2", (60, 5120, 128, 128, 12288, 4096, 102400, 1024), (160, 6, 1536)),
            head_dim=128,
            kv_lora_rank=512,
            q_lora_rank=1536,
            rope_dim=64,
            v_head_dim=128,
            dense_layers=1,
            moe_shared_ffn_hidden=3072,
        ),
        _moe("mixtral-8x22b", (56, 6144, 48, 8, 16384, 4096, 32000, 1024), (8, 2, 16384)),
        _moe("dbrx", (40, 6144, 48, 8, 10752, 4096, 100352, 1024), (16, 4, 10752)),
    )
}

# Rotary bases and query/key norms (the `rope_theta` and q/k norm of each Hugging Face
# config.json; launcher only, `Model` docstring). Left at the default (10,000): Llama 2,
# Mistral 7B, Nemotron-4, Grok-1, and the YaRN-scaled DeepSeek-V2/V3 and Kimi K2, whose
# scaling the command does not pass. GPT-OSS's base is passed; its YaRN factor, which
# stretches the 4,096-token context it was pre-trained at, is not.
_ROTARY: Final[dict[str, tuple[int, bool]]] = {
    **{name: (500_000, False) for name in ("llama3-8b", "llama3-70b", "llama3-405b",
                                           "llama3.2-1b", "llama3.2-3b", "dbrx")},
    **{name: (1_000_000, False) for name in ("mixtral-8x7b", "mixtral-8x22b", "qwen2.5-7b",
                                             "qwen2.5-14b", "qwen2.5-32b", "qwen2.5-72b")},
    **{name: (1_000_000, True) for name in ("qwen3-8b", "qwen3-14b", "qwen3-32b",
                                            "qwen3-30b-a3b", "qwen3-235b-a22b")},
    "gpt-oss-120b": (150_000, False),
}  # fmt: skip
for _name, (_base, _norm) in _ROTARY.items():
    PRESETS[_name] = dataclasses.replace(PRESETS[_name], rope_base=_base, qk_norm=_norm)

_PRESET_ALIASES = {"gpt3": "gpt3-175b", "sc21-1t": "sc21-1008.0b", "sc21-1008b": "sc21-1008.0b"}


def preset(name: str) -> Model:
    """A preset model by name (case-insensitive; "-" and "_" are interchangeable)."""
    key = name.strip().lower().replace("_", "-")
    key = _PRESET_ALIASES.get(key, key)
    if key in PRESETS:
        return PRESETS[key]
    raise unknown_name("model", "model preset", name, list(PRESETS))


def _folded_name(text: str) -> str:
    """A model name compared as a published table writes it: lower case, only letters, digits
    and decimal points (GPT-3 1.3B is not GPT-3 13B), Llama 3.x as Llama 3 (3.1 and 3.3 keep
    Llama 3's shapes at 8B, 70B and 405B)."""
    text = re.sub(r"llama[\s_-]*3\.\d", "llama3", text.lower())
    text = re.sub(r"[^a-z0-9.]", "", text)
    return re.sub(r"(?<!\d)\.|\.(?!\d)", "", text)


_BY_FOLDED_NAME: Final = {_folded_name(name): model for name, model in PRESETS.items()} | {
    "grok1": PRESETS["grok-1-314b"],
    "megatronturingnlg530b": PRESETS["mt-nlg-530b"],
    "bloom": PRESETS["bloom-176b"],
    "nemotron340b": PRESETS["nemotron4-340b"],  # NeMo's performance tables' name for it
}


# Qualifiers a table adds to a model's name that describe what the preset already is: no
# multi-token-prediction module, and routing without dropped tokens or capped at the balanced
# share (Megatron-Bridge's "DeepSeekV3 (w/o MTP)", "Qwen3_30B_a3B (tokendrop)": its MoE
# benchmarks force-balance the routing, so a capacity factor drops nothing).
_AS_PRESET: Final = re.compile(
    r"\s*\(\s*((w/o|without|no)\s+mtp|dropless|token[- ]?drop(less)?)\s*\)\s*$", re.IGNORECASE
)


def preset_named(text: str) -> Model | None:
    """The preset a published table's model name means ("Llama 3.1 405B", "GPT-3 175B",
    "Mixtral 8x7B", "qwen3-30b-a3b", "DeepSeekV3 (w/o MTP)"), or None when it names none."""
    return _BY_FOLDED_NAME.get(_folded_name(_AS_PRESET.sub("", text)))


def preset_in(text: str) -> str | None:
    """The longest run of words in `text` that names a preset ("Llama 3.1 405B" in a heading
    "Training Llama 3.1 405B on H100 (BF16)"), or None when no run of its words names one."""
    words = text.split()
    for size in range(len(words), 0, -1):
        for start in range(len(words) - size + 1):
            run = " ".join(words[start : start + size])
            if preset_named(run) is not None:
                return run.strip(" ,;:()[]")
    return None


def load_model(path: str | Path) -> Model:
    """Read a `Model` from YAML: its fields, optionally with `preset: NAME` to start from.

    Example: ``{preset: llama2-7b, seq_len: 8192, global_batch: 512}``; or every required field
    (name, layers, hidden, heads, seq_len, vocab, global_batch) for a new model.
    """
    try:
        text = read_text(path)
    except TextFileError as exc:
        raise PlannerError("model", f"{path} {exc}") from None
    try:
        data: Any = yamlio.load_yaml(text)
    except yamlio.YamlError as exc:
        raise PlannerError("model", f"{path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise PlannerError("model", f"{path} must be a mapping of model fields")
    return model_from_mapping(data)


def model_from_mapping(data: Mapping[str, Any]) -> Model:
    """A `Model` from a mapping of its fields, optionally with `preset: NAME` to start from
    (the form `load_model` reads and a job spec's `model:` section carries)."""
    fields = {f.name for f in dataclasses.fields(Model)}
    unknown = sorted(set(map(str, data)) - fields - {"preset"})
    if unknown:
        raise PlannerError(unknown[0], f"unknown model field; known: {', '.join(sorted(fields))}")
    overrides = {k: v for k, v in data.items() if k != "preset"}
    if "preset" in data:
        base = preset(str(data["preset"]))
        if "heads" in overrides and "kv_heads" not in overrides and base.kv_heads == base.heads:
            overrides["kv_heads"] = 0
        derived_dim = base.head_dim * base.heads == base.hidden
        if ("hidden" in overrides or "heads" in overrides) and "head_dim" not in overrides:
            overrides["head_dim"] = 0 if derived_dim else base.head_dim
        if "gated_mlp" in overrides and "mlp" not in overrides:
            overrides["mlp"] = ""
        keep_ffn = "ffn_hidden" in overrides or base.ffn_hidden != 4 * base.hidden
        if "hidden" in overrides and not keep_ffn:
            overrides["ffn_hidden"] = 0
        try:
            return dataclasses.replace(base, **overrides)
        except TypeError as exc:
            raise PlannerError("model", str(exc)) from exc
    required = ("name", "layers", "hidden", "heads", "seq_len", "vocab", "global_batch")
    missing = [r for r in required if r not in data]
    if missing:
        raise PlannerError(missing[0], f"required (or give `preset:`); missing: {missing}")
    try:
        return Model(**overrides)
    except TypeError as exc:
        raise PlannerError("model", str(exc)) from exc
