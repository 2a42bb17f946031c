"""Decoder-only transformer descriptions: the `Model` record and its parameter and FLOP counts.

This module owns the model arithmetic the rest of the planner builds on. `Model` is frozen and
validated on construction (bad values raise `PlannerError` naming the field). The named
presets and reading a model from YAML or a mapping are `trainyard.planner.presets`.

Nomenclature: l = layers, h = hidden, a = heads, k = kv_heads, d = h/a (head dim), f = ffn_hidden,
s = seq_len, V = vocab, B = global_batch (sequences).

Parameter count (`Model.params`), summed exactly from the weight shapes:

* embeddings: V·h token table, + s·h if `learned_positions`, + V·h more if not `tied_embeddings`;
* per layer, attention: Q and output projections 2·h·a·d, K and V projections 2·h·k·d (GQA/MQA
  when k < a; d = h/a unless `head_dim` is given, as Qwen3's 128 on hidden 2048 with 32 heads),
  + biases 2h + 2·k·d when `bias`;
* per layer, MLP: 2·h·f (3·h·f for a gated MLP, `mlp` swiglu or geglu), + biases f + h when
  `bias`; a mixture-of-experts layer (`experts` > 0) instead holds `experts` MLPs of hidden
  size f_e (`moe_ffn_hidden`), a router h·E, and a shared MLP of `moe_shared_ffn_hidden` if
  set (Qwen3-MoE, Mixtral: none; DeepSeek: one). Every layer is an MoE layer when `experts`
  is set (`--num-experts` with Megatron's default layer frequency of 1);
* norms: two per layer and one final, each 2h (LayerNorm gain+bias) or h (RMSNorm, `bias=False`).

For the GPT shape (k = a, f = 4h, bias, tied, learned positions) this is
12·l·h² + 13·l·h + (V + s)·h + 2h, i.e. Narayanan et al. SC'21 (arXiv:2104.04473) Eq. 2,
P = 12·l·h²·(1 + 13/(12h) + (V+s)/(12·l·h)), plus the final LayerNorm's 2h.

FLOPs come from the same shapes (`Model.forward_flops_per_token`): a matrix multiply of an
(m x k) by a (k x n) matrix is 2·m·k·n FLOPs, so one token's forward pass through a layer costs
2·(2·h·a·d + 2·h·k·d + (2 or 3)·h·f) in its projections and MLP (an MoE layer: the `moe_topk`
experts a token is routed to, the router and the shared MLP: `Model.mlp_width`), plus 4·s·a·d
in attention (the scores QKᵀ and their product with V over the whole sequence, the causal
mask not subtracted, as SC'21 and Megatron-LM's README tables count them; `attention=
"causal"` counts the lower half, as Megatron-LM's logged TFLOP/s have since 2025, and "none"
leaves the core out, for comparing with such figures), and the output layer 2·h·V' with V'
the vocabulary padded as Megatron pads it (`vocab_multiple`, its
--make-vocab-size-divisible-by, 128 by default, times tp). Backward
costs twice the forward. Recomputation re-runs the forward
of the layers (full) or of the attention core (selective), never the output layer. For the GPT
shape the executed FLOPs with full recomputation are exactly SC'21 Eq. 3,
F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)); without recomputation the layers take 72 instead
of 96 and the output layer keeps its 6·B·s·h·V.

`mlp`: "gelu" (also ReLU-like: "relu", "squared_relu", as Nemotron; two matrices) or a gated
MLP, "swiglu" / "geglu" (three matrices; `gated_mlp` is the same as "swiglu").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from trainyard.planner.errors import PlannerError

__all__ = ["GATED_MLPS", "MLPS", "AttentionCount", "Model", "Precision"]

Precision = Literal["bf16", "fp16", "fp8"]
# How FLOP figures count the attention core: the whole score matrix (SC'21, the planner's
# own), its causal lower half (Megatron-LM's logged TFLOP/s since 2025) or not at all (6N).
AttentionCount = Literal["full", "causal", "none"]
_PRECISIONS: tuple[str, ...] = ("bf16", "fp16", "fp8")
MLPS: tuple[str, ...] = ("gelu", "relu", "squared_relu", "swiglu", "geglu")
GATED_MLPS: tuple[str, ...] = ("swiglu", "geglu")


@dataclass(frozen=True)
class Model:
    """A decoder-only transformer and its training batch.

    `kv_heads` 0 means "same as heads" (multi-head attention); `ffn_hidden` 0 means 4·hidden;
    `mlp` "" means "swiglu" when `gated_mlp` else "gelu"; `head_dim` 0 means hidden/heads.
    A mixture of experts: `experts` routed experts per layer (0: dense), each token sent to
    `moe_topk` of them (0: 2, Megatron's default), each an MLP of `moe_ffn_hidden` (0:
    ffn_hidden), plus an always-used shared MLP of `moe_shared_ffn_hidden` (0: none). The
    defaults are resolved in construction, so the stored values are always the real ones (and
    `gated_mlp` agrees with `mlp`). `vocab_multiple` is what the vocabulary is padded to a
    multiple of (times tp). Sliding-window attention: `window` > 0 keys before each query
    (Megatron's --window-size W,0), in every layer but each `full_attention_every`-th, which
    attends to the whole sequence (--window-attn-skip-freq; 0: no full layer). GPT-OSS
    alternates: window 128, every 2nd layer full. `rope_base` is the rotary embedding's base
    (theta; 0: Megatron's default, 10,000) and `qk_norm` a norm of the queries and keys before
    the attention (Qwen3): neither changes the time or memory model, the launcher passes them
    so that the command trains the named architecture.
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
    mlp: str = ""
    vocab_multiple: int = 128
    head_dim: int = 0
    experts: int = 0
    moe_topk: int = 0
    moe_ffn_hidden: int = 0
    moe_shared_ffn_hidden: int = 0
    window: int = 0
    full_attention_every: int = 0
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    rope_dim: int = 0
    v_head_dim: int = 0
    dense_layers: int = 0
    rope_base: int = 0
    qk_norm: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.rope_base, bool) or not isinstance(self.rope_base, int):
            raise PlannerError("rope_base", f"must be a whole number, got {self.rope_base!r}")
        if self.rope_base < 0 or not isinstance(self.qk_norm, bool):
            raise PlannerError("rope_base", "must be >= 0 (0: 10,000), qk_norm true or false")
        if not isinstance(self.name, str) or not self.name:
            raise PlannerError("name", "a model needs a non-empty name")
        ints = ("layers", "hidden", "heads", "seq_len", "vocab", "global_batch")
        moe = (
            "head_dim",
            "experts",
            "moe_topk",
            "moe_ffn_hidden",
            "moe_shared_ffn_hidden",
            "window",
            "full_attention_every",
        )
        for field in (*ints, "kv_heads", "ffn_hidden", *moe):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int):
                raise PlannerError(field, f"must be an integer, got {value!r}")
        for field in ints:
            if getattr(self, field) < 1:
                raise PlannerError(field, f"must be >= 1, got {getattr(self, field)}")
        if isinstance(self.vocab_multiple, bool) or not isinstance(self.vocab_multiple, int):
            raise PlannerError("vocab_multiple", "must be an integer >= 1")
        if self.vocab_multiple < 1:
            raise PlannerError("vocab_multiple", "must be >= 1 (1: no padding)")
        if not isinstance(self.mlp, str):
            raise PlannerError("mlp", f"must be one of {', '.join(MLPS)}")
        if not isinstance(self.gated_mlp, bool):
            raise PlannerError("gated_mlp", f"must be true or false, got {self.gated_mlp!r}")
        mlp = self.mlp.strip().lower().replace("-", "_") or ("swiglu" if self.gated_mlp else "gelu")
        if mlp not in MLPS:
            raise PlannerError("mlp", f"unknown MLP {self.mlp!r}; use one of {', '.join(MLPS)}")
        object.__setattr__(self, "mlp", mlp)
        object.__setattr__(self, "gated_mlp", mlp in GATED_MLPS)
        for field in ("kv_heads", "ffn_hidden", *moe):
            if getattr(self, field) < 0:
                raise PlannerError(field, "must be >= 1 (or 0/omitted for the default)")
        if self.full_attention_every and not self.window:
            raise PlannerError(
                "full_attention_every", "is for sliding-window attention: set window too"
            )
        self._resolve_moe()
        self._resolve_mla()
        if self.kv_heads == 0:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.ffn_hidden == 0:
            object.__setattr__(self, "ffn_hidden", 4 * self.hidden)
        if self.head_dim == 0 and self.hidden % self.heads:
            raise PlannerError(
                "hidden",
                f"hidden ({self.hidden}) must be divisible by heads ({self.heads}); "
                "pick a hidden size that is a multiple of the head count, or give head_dim",
            )
        if self.head_dim == 0:
            object.__setattr__(self, "head_dim", self.hidden // self.heads)
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

    def _resolve_moe(self) -> None:
        if self.experts == 0:
            for field in ("moe_topk", "moe_ffn_hidden", "moe_shared_ffn_hidden", "dense_layers"):
                if getattr(self, field):
                    raise PlannerError(
                        field, "is for a mixture of experts: set experts too, or drop it"
                    )
            return
        if self.dense_layers >= self.layers:
            raise PlannerError(
                "dense_layers", f"must leave some of the {self.layers} layers to the experts"
            )
        if self.moe_topk == 0:
            object.__setattr__(self, "moe_topk", 2)
        if self.moe_ffn_hidden == 0:
            object.__setattr__(self, "moe_ffn_hidden", self.ffn_hidden or 4 * self.hidden)
        if self.moe_topk > self.experts:
            raise PlannerError(
                "moe_topk",
                f"a token cannot be routed to {self.moe_topk} of {self.experts} experts; "
                "use a top-k of at most experts",
            )

    def _resolve_mla(self) -> None:
        if not self.kv_lora_rank:
            for field in ("q_lora_rank", "rope_dim", "v_head_dim"):
                if getattr(self, field):
                    raise PlannerError(
                        field, "is for multi-head latent attention: set kv_lora_rank too"
                    )
        else:
            if self.rope_dim == 0:
                object.__setattr__(self, "rope_dim", 64)  # Megatron's --qk-pos-emb-head-dim
            if self.v_head_dim == 0:
                object.__setattr__(self, "v_head_dim", self.head_dim)

    @property
    def is_mla(self) -> bool:
        """Whether the attention is multi-head latent attention (DeepSeek-V2/V3)."""
        return self.kv_lora_rank > 0

    @property
    def moe_share(self) -> float:
        """Share of the layers that hold experts (all of an MoE model's but its first
        `dense_layers`; 0 for a dense model)."""
        if not self.is_moe:
            return 0.0
        return (self.layers - self.dense_layers) / self.layers

    @property
    def is_moe(self) -> bool:
        """Whether the layers are mixtures of experts."""
        return self.experts > 0

    @property
    def attention_width(self) -> int:
        """Width of the attention output (the output projection's input): heads x head_dim,
        or heads x v_head_dim under latent attention."""
        return self.heads * (self.v_head_dim if self.is_mla else self.head_dim)

    @property
    def core_width(self) -> float:
        """heads x the mean of the query-key and the value head widths: the attention core
        costs 4 x span x this per token (query-key products over d_qk, the weighted sum over
        d_v; d_qk = head_dim + rope_dim under latent attention)."""
        if not self.is_mla:
            return float(self.heads * self.head_dim)
        return self.heads * (self.head_dim + self.rope_dim + self.v_head_dim) / 2.0

    @property
    def attention_params(self) -> int:
        """Matrix weights of one layer's attention (no biases or norms)."""
        h, a = self.hidden, self.heads
        if not self.is_mla:
            return 2 * h * a * self.head_dim + 2 * h * self.kv_heads * self.head_dim
        qk, ql, kvl = self.head_dim + self.rope_dim, self.q_lora_rank, self.kv_lora_rank
        query = h * ql + ql * a * qk if ql else h * a * qk
        key_value = h * (kvl + self.rope_dim) + kvl * a * (self.head_dim + self.v_head_dim)
        return query + key_value + a * self.v_head_dim * h

    @property
    def mla_up_params(self) -> int:
        """Weights of latent attention's up-projections (the query's from its latent when it
        has one, the keys' and values' from theirs): what Megatron-Core's mla_up_proj
        recompute runs again; 0 without latent attention."""
        if not self.is_mla:
            return 0
        a, ql, kvl = self.heads, self.q_lora_rank, self.kv_lora_rank
        query = ql * a * (self.head_dim + self.rope_dim) if ql else 0
        return query + kvl * a * (self.head_dim + self.v_head_dim)

    @property
    def mlp_width(self) -> float:
        """The MLP hidden size one token goes through: ffn_hidden, or for an MoE layer its
        top-k experts' and the shared MLP's (the mean over the layers when the first
        `dense_layers` are dense)."""
        if not self.is_moe:
            return float(self.ffn_hidden)
        moe = self.moe_topk * self.moe_ffn_hidden + self.moe_shared_ffn_hidden
        return self.moe_share * moe + (1.0 - self.moe_share) * self.ffn_hidden

    @property
    def expert_params(self) -> int:
        """Parameters of one layer's routed experts (0 for a dense model): what expert
        parallelism splits."""
        if not self.is_moe:
            return 0
        per_expert = self.mlp_matrices * self.hidden * self.moe_ffn_hidden
        per_layer = self.experts * (
            per_expert + (self.moe_ffn_hidden + self.hidden if self.bias else 0)
        )
        return round(per_layer * self.moe_share)  # the mean over the layers

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
        h, f, q = self.hidden, self.ffn_hidden, self.attention_width
        kv = self.kv_heads * self.head_dim
        attn = self.attention_params + ((q + h + 2 * kv) if self.bias else 0)
        attn += self.q_lora_rank + self.kv_lora_rank  # latent attention's two norms
        dense = self.mlp_matrices * h * f + ((f + h) if self.bias else 0)
        if self.is_moe:
            shared = self.moe_shared_ffn_hidden
            routed = h * self.experts + self.mlp_matrices * h * shared
            mlp = self.expert_params + round(routed * self.moe_share + dense * (1 - self.moe_share))
        else:
            mlp = dense
        return attn + mlp + 2 * self._norm_params

    @property
    def mlp_matrices(self) -> int:
        """Weight matrices of the MLP: 3 for a gated MLP (SwiGLU, GeGLU), else 2."""
        return 3 if self.gated_mlp else 2

    @property
    def layer_matmul_params(self) -> int:
        """Weights of one layer that take part in one token's matrix multiplies (no biases, no
        norms; of an MoE layer its top-k experts, the router and the shared MLP)."""
        h = self.hidden
        router = h * self.experts * self.moe_share
        return round(self.attention_params + self.mlp_matrices * h * self.mlp_width + router)

    @property
    def op_recomputed_matmul_params(self) -> int:
        """Weights of the matrix multiplies of one layer that torchtitan's per-operator
        selective checkpointing recomputes: every second one in forward order (query, KEY,
        value, OUTPUT PROJECTION, then a gated MLP's gate, UP, down, or a plain MLP's first
        and SECOND)."""
        h = self.hidden
        kv = self.kv_heads * self.head_dim
        return round(h * kv + h * self.attention_width + h * self.mlp_width)

    def padded_vocab(self, tp: int = 1) -> int:
        """The vocabulary padded to a multiple of vocab_multiple·tp (Megatron-LM's
        --make-vocab-size-divisible-by, times the tensor-parallel size)."""
        unit = self.vocab_multiple * max(1, tp)
        return -(-self.vocab // unit) * unit

    def layer_forward_flops(
        self, tokens: float, seq_len: int | None = None, attention: AttentionCount = "full"
    ) -> tuple[float, float]:
        """(matrix-multiply FLOPs, attention-core FLOPs) of one layer's forward pass over
        `tokens` tokens of sequences `seq_len` long (default the model's); with sliding-window
        attention the core is the mean over the layers (`attention_spans`). `attention` says
        how the core is counted: whole ("full", the planner's own count), the lower triangle
        of a full-attention layer's score matrix ("causal", half the square, as Megatron-LM's
        logged TFLOP/s since 8873b55d6a, 2025-03-06; a window counted whole) or not at all
        ("none": the 6N of rates quoted as 6 x parameters x tokens)."""
        span = self.attention_span(seq_len)
        if attention == "causal":
            s = self.seq_len if seq_len is None else seq_len
            span -= self.attention_spans(s)[0] * s / 2
        elif attention == "none":
            span = 0.0
        return 2.0 * self.layer_matmul_params * tokens, 4.0 * span * self.core_width * tokens

    def attention_span(self, seq_len: int | None = None) -> float:
        """Keys a query attends to, the mean over the layers: the sequence, or the window in
        a sliding-window layer (`attention_spans`)."""
        s = self.seq_len if seq_len is None else seq_len
        full, windowed = self.attention_spans(s)
        return full * s + windowed * min(self.window, s)

    def attention_spans(self, seq_len: int | None = None) -> tuple[float, float]:
        """Shares of the layers whose queries attend to the whole sequence and to a sliding
        window (1, 0 without one; a window as long as the sequence counts as full)."""
        s = self.seq_len if seq_len is None else seq_len
        if not self.window or self.window >= s:
            return 1.0, 0.0
        full = self.layers // self.full_attention_every if self.full_attention_every else 0
        return full / self.layers, (self.layers - full) / self.layers

    def forward_flops_per_token(self, tp: int = 1) -> float:
        """Forward FLOPs of one token: every layer, and the output layer over the vocabulary
        padded for `tp` (see the module docstring)."""
        gemm, attn = self.layer_forward_flops(1.0)
        return self.layers * (gemm + attn) + 2.0 * self.hidden * self.padded_vocab(tp)

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

    def flops_per_token(
        self, recompute: bool = True, tp: int = 1, attention: AttentionCount = "full"
    ) -> float:
        """Training FLOPs per token from the real shapes: 3 forward passes (forward, backward =
        2), plus the layers' forward again with full `recompute` (SC'21 Eq. 3 for the GPT shape;
        see the module docstring); `attention` as in `layer_forward_flops`."""
        gemm, attn = self.layer_forward_flops(1.0, attention=attention)
        layers = self.layers * (gemm + attn)
        logits = 2.0 * self.hidden * self.padded_vocab(tp)
        return (4.0 if recompute else 3.0) * layers + 3.0 * logits

    def flops_per_iteration(
        self, recompute: bool = True, tp: int = 1, attention: AttentionCount = "full"
    ) -> float:
        """Training FLOPs per iteration: `flops_per_token` times B·s."""
        return self.flops_per_token(recompute, tp, attention) * self.tokens_per_iteration
