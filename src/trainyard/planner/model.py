"""Decoder-only transformer descriptions: the `Model` record, its parameter and FLOP counts,
named presets, and YAML loading.

This module owns the model arithmetic the rest of the planner builds on. `Model` is frozen and
validated on construction (bad values raise `PlannerError` naming the field); presets are
constants and `preset` returns them unchanged.

Nomenclature: l = layers, h = hidden, a = heads, k = kv_heads, d = h/a (head dim), f = ffn_hidden,
s = seq_len, V = vocab, B = global_batch (sequences).

Parameter count (`Model.params`), summed exactly from the weight shapes:

* embeddings: V·h token table, + s·h if `learned_positions`, + V·h more if not `tied_embeddings`;
* per layer, attention: Q and output projections 2·h², K and V projections 2·h·k·d (GQA/MQA when
  k < a), + biases 2h + 2·k·d when `bias`;
* per layer, MLP: 2·h·f (3·h·f when `gated_mlp`, as in SwiGLU), + biases f + h when `bias`;
* norms: two per layer and one final, each 2h (LayerNorm gain+bias) or h (RMSNorm, `bias=False`).

For the GPT shape (k = a, f = 4h, bias, tied, learned positions) this is
12·l·h² + 13·l·h + (V + s)·h + 2h, i.e. Narayanan et al. SC'21 (arXiv:2104.04473) Eq. 2,
P = 12·l·h²·(1 + 13/(12h) + (V+s)/(12·l·h)), plus the final LayerNorm's 2h.

FLOPs per iteration (`Model.flops_per_iteration`) follow SC'21 Eq. 3:
F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)). Eq. 3 counts four passes (forward, recomputed
forward, backward = 2 forwards); without activation recomputation the factor is 72 instead of 96.
Eq. 3 assumes the GPT shape; for GQA or gated-MLP models it is an approximation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from trainyard import yamlio
from trainyard.planner.errors import PlannerError, unknown_name

__all__ = ["PRESETS", "Model", "Precision", "load_model", "model_from_mapping", "preset"]

Precision = Literal["bf16", "fp16", "fp8"]
_PRECISIONS: tuple[str, ...] = ("bf16", "fp16", "fp8")


@dataclass(frozen=True)
class Model:
    """A decoder-only transformer and its training batch.

    `kv_heads` 0 means "same as heads" (multi-head attention); `ffn_hidden` 0 means 4·hidden.
    Both are resolved in construction, so the stored values are always the real ones.
    """

    name: str
    layers: int
    hidden: int
    heads: int
    seq_len: int
    vocab: int
    global_batch: int
    kv_heads: int = 0
    ffn_hidden: int = 0
    precision: Precision = "bf16"
    gated_mlp: bool = False
    bias: bool = True
    tied_embeddings: bool = True
    learned_positions: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise PlannerError("name", "a model needs a non-empty name")
        ints = ("layers", "hidden", "heads", "seq_len", "vocab", "global_batch")
        for field in (*ints, "kv_heads", "ffn_hidden"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int):
                raise PlannerError(field, f"must be an integer, got {value!r}")
        for field in ints:
            if getattr(self, field) < 1:
                raise PlannerError(field, f"must be >= 1, got {getattr(self, field)}")
        for field in ("kv_heads", "ffn_hidden"):
            if getattr(self, field) < 0:
                raise PlannerError(field, "must be >= 1 (or 0/omitted for the default)")
        if self.kv_heads == 0:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.ffn_hidden == 0:
            object.__setattr__(self, "ffn_hidden", 4 * self.hidden)
        if self.hidden % self.heads:
            raise PlannerError(
                "hidden",
                f"hidden ({self.hidden}) must be divisible by heads ({self.heads}); "
                "pick a hidden size that is a multiple of the head count",
            )
        if self.kv_heads > self.heads or self.heads % self.kv_heads:
            raise PlannerError(
                "kv_heads",
                f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads}); "
                "use a divisor of heads (kv_heads = heads for plain multi-head attention)",
            )
        if self.precision not in _PRECISIONS:
            raise PlannerError(
                "precision", f"must be one of {', '.join(_PRECISIONS)}, got {self.precision!r}"
            )
        for flag in ("gated_mlp", "bias", "tied_embeddings", "learned_positions"):
            if not isinstance(getattr(self, flag), bool):
                raise PlannerError(flag, f"must be true or false, got {getattr(self, flag)!r}")

    @property
    def head_dim(self) -> int:
        """Hidden size per attention head."""
        return self.hidden // self.heads

    @property
    def embedding_params(self) -> int:
        """Token (and learned position) embeddings, plus the output layer if untied."""
        h = self.hidden
        n = self.vocab * h
        if self.learned_positions:
            n += self.seq_len * h
        if not self.tied_embeddings:
            n += self.vocab * h
        return n

    @property
    def layer_params(self) -> int:
        """Parameters of one transformer layer (attention, MLP, two norms)."""
        h, f = self.hidden, self.ffn_hidden
        kv = self.kv_heads * self.head_dim
        attn = 2 * h * h + 2 * h * kv + ((2 * h + 2 * kv) if self.bias else 0)
        mlp = (3 if self.gated_mlp else 2) * h * f + ((f + h) if self.bias else 0)
        return attn + mlp + 2 * self._norm_params

    @property
    def params(self) -> int:
        """Total parameter count (see the module docstring for the formula)."""
        return self.embedding_params + self.layers * self.layer_params + self._norm_params

    @property
    def _norm_params(self) -> int:
        return (2 if self.bias else 1) * self.hidden

    @property
    def tokens_per_iteration(self) -> int:
        """Tokens in one global batch (B·s)."""
        return self.global_batch * self.seq_len

    def flops_per_iteration(self, recompute: bool = True) -> float:
        """Training FLOPs per iteration, SC'21 Eq. 3 (factor 96 with recompute, 72 without)."""
        b, s, n, h, v = self.global_batch, self.seq_len, self.layers, self.hidden, self.vocab
        factor = 96 if recompute else 72
        return float(factor * b * s * n * h * h * (1 + s / (6 * h) + v / (16 * n * h)))

    def flops_per_token(self, recompute: bool = True) -> float:
        """Training FLOPs per token, SC'21 Eq. 3 divided by B·s."""
        return self.flops_per_iteration(recompute) / self.tokens_per_iteration


def _gpt3(name: str, layers: int, hidden: int, heads: int, batch: int) -> Model:
    return Model(name, layers, hidden, heads, seq_len=2048, vocab=50257, global_batch=batch)


def _sc21(size: str, layers: int, hidden: int, heads: int, batch: int) -> Model:
    return Model(f"sc21-{size}", layers, hidden, heads, 2048, 51200, batch)


def _llama(name: str, n: int, h: int, a: int, k: int, f: int, s: int, v: int, b: int) -> Model:
    return Model(
        name, n, h, a, s, v, b, kv_heads=k, ffn_hidden=f, gated_mlp=True, bias=False,
        tied_embeddings=False, learned_positions=False,
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
    )
}

_PRESET_ALIASES = {"gpt3": "gpt3-175b", "sc21-1t": "sc21-1008.0b", "sc21-1008b": "sc21-1008.0b"}


def preset(name: str) -> Model:
    """A preset model by name (case-insensitive; "-" and "_" are interchangeable)."""
    key = name.strip().lower().replace("_", "-")
    key = _PRESET_ALIASES.get(key, key)
    if key in PRESETS:
        return PRESETS[key]
    raise unknown_name("model", "model preset", name, list(PRESETS))


def load_model(path: str | Path) -> Model:
    """Read a `Model` from YAML: its fields, optionally with `preset: NAME` to start from.

    Example: ``{preset: llama2-7b, seq_len: 8192, global_batch: 512}``; or every required field
    (name, layers, hidden, heads, seq_len, vocab, global_batch) for a new model.
    """
    try:
        data: Any = yamlio.load_yaml(Path(path).read_text())
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
