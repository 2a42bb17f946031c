"""A training job's parallel layout (`ParallelLayout`) and its validity against a `Model`.

This module owns what a layout is and which layouts are legal for a model; the memory and time
models take a `ParallelLayout` that `ParallelLayout.check(model)` has accepted. It is frozen.
(Not the core's `topology.Layout`, the static index of a cluster: hence the longer name.)

Nomenclature: tp = tensor-parallel size, cp = context-parallel size (each sequence split over
cp GPUs, attention exchanging key/value blocks around a ring, as Megatron-Core's
--context-parallel-size), pp = pipeline stages, dp = data-parallel size, micro_batch =
sequences per micro-batch, virtual_stages = model chunks per GPU (interleaved 1F1B, Narayanan
et al. SC'21 §2.2.2), zero = ZeRO stage over the dp·cp ranks that hold the same weights
(Rajbhandari et al. 2020): 1 shards the optimizer (Megatron's distributed optimizer), 2 also
the gradients, 3 also the weights, gathered layer by layer for every micro-batch (DeepSpeed
ZeRO-3, PyTorch FSDP, Megatron-FSDP). `shard_group` > 0 shards over groups of that many ranks
and replicates across groups (hybrid sharding, PyTorch's HSDP).

Expert parallelism (`ep`, Megatron-Core's --expert-model-parallel-size) splits the routed
experts of a mixture-of-experts model over ep GPUs, carved out of the tp·cp·dp ranks of a
pipeline stage (the expert layers run without tensor parallelism, expert-tensor-parallel size
1, as Megatron-Bridge's Qwen3 and DeepSeek recipes do): each GPU holds experts/ep experts of
every layer, tokens travel to their experts and back by all-to-all, and the experts' weights
are replicated over the tp·cp·dp/ep ranks of the expert-data-parallel group. Megatron-Core
requires sequence parallelism for MoE layers under tensor parallelism.

Pipeline stages split the layers evenly unless `first_stage_layers` / `last_stage_layers` are
set (Megatron-Core's --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers):
then the first and/or last stage hold that many layers, usually fewer because they also hold
the embedding and the output layer with the loss, and the other stages split the rest evenly.
With interleaving (`virtual_stages` v) each stage's layers split into v chunks, or, where
the end stages' counts do not, every chunk holds the middle stages' c layers but the model's
first and last chunk, which take what their stage holds beyond (v - 1) x c (`end_chunks`;
Megatron-Core's --pipeline-model-parallel-layout).

Activation recompute (`recompute`): "none"; "norms", Megatron-Core's output-discarding
checkpoints of the layer norms, of a mixture of experts' activation function and of latent
attention's up-projections (`--recompute-modules layernorm moe_act mla_up_proj`, each where
the model has it: the norms' outputs, the QKV projection's and the MLP's inputs, the experts'
activation products and the up-projected Q, K and V are dropped after use and recomputed in
the backward pass; of the GEMMs only the up-projections run again); "selective", Megatron's
(the attention core is recomputed in the backward pass, Korthikanti et al. arXiv:2205.05198
§5); "full" (each layer
keeps only its input and runs its forward again); "op", torchtitan's per-operator selective
checkpointing (`--activation_checkpoint.mode selective`, `selective_ac_option = "op"`): every
layer keeps the outputs of its matrix multiplies and of the fused attention, except every
second matrix multiply in forward order, which is recomputed with all the element-wise
operators. The search chooses among the first four (the launchers it emits are Megatron-LM's
and DeepSpeed's); "op" describes runs made with torchtitan, for `--evaluate`.

Activation offloading (`offload_layers`, Megatron-Core's --cpu-offloading-num-layers through
Transformer Engine's CPU offload): the activations of that many transformer layers are copied
to host memory in the forward pass and back for the backward (`trainyard.planner.offload`).
Megatron-Core (d98e8a64dd, `TransformerConfig.__post_init__`) refuses it with pipeline
parallelism and with activation recompute, and needs it below the layer count; so does
`check`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from trainyard.planner.errors import PlannerError
from trainyard.planner.model import Model

__all__ = ["ATTENTION_KERNELS", "RECOMPUTE_MODES", "SHARDINGS", "AttentionKernel", "ParallelLayout",
           "Recompute"]  # fmt: skip

Recompute = Literal["none", "norms", "selective", "full", "op"]
RECOMPUTE_MODES: tuple[str, ...] = ("none", "norms", "selective", "full", "op")
# The fused attention kernel's generation (`attention.kernel_speed`): cuDNN's fused attention,
# FlashAttention-3 and Transformer Engine's ("cudnn"), or FlashAttention-2 and the kernels of
# its generation (PyTorch SDPA's flash backend, xFormers: "fa2").
AttentionKernel = Literal["cudnn", "fa2"]
ATTENTION_KERNELS: tuple[str, ...] = ("cudnn", "fa2")
# Names of the sharding choices (`ParallelLayout.sharding`).
SHARDINGS: tuple[str, ...] = ("none", "zero1", "zero2", "zero3", "hsdp")


@dataclass(frozen=True)
class ParallelLayout:
    """How a job is split over GPUs and which memory-saving options it uses.

    `fp32_grads` keeps fp32 gradient buffers (Megatron's default "main grads"; with ZeRO 0 this
    gives its 18 bytes/param); otherwise gradients take 2 bytes per parameter.
    `flash_attention` runs the attention core as one fused kernel (FlashAttention, Dao et al.
    arXiv:2205.14135, or cuDNN's fused attention) that never stores the s x s score matrix;
    without it the scores, softmax and dropout go through memory (Megatron before 2022);
    `attention_kernel` says which generation of fused kernel (`ATTENTION_KERNELS`).
    `tp_comm_overlap` overlaps the tensor-parallel communication with the layer's GEMMs
    (Megatron-Core --tp-comm-overlap; it needs sequence parallelism). `p2p_split`: each
    tensor-parallel rank sends its 1/tp of the activations between pipeline stages and the
    next stage all-gathers them (SC'21 §4.1's scatter/gather, in Megatron-LM since
    27fc468964, 2021-01-20, on by default since 72e4230bb5); False: every rank sends the whole
    tensor, as Megatron-LM did before. `cp`,
    `first_stage_layers`, `last_stage_layers`, `shard_group` and `offload_layers`: see the
    module docstring.
    """

    tp: int = 1
    pp: int = 1
    dp: int = 1
    micro_batch: int = 1
    zero: int = 0
    recompute: Recompute = "none"
    sequence_parallel: bool = False
    virtual_stages: int = 1
    fp32_grads: bool = False
    flash_attention: bool = False
    cp: int = 1
    first_stage_layers: int = 0
    last_stage_layers: int = 0
    shard_group: int = 0
    tp_comm_overlap: bool = False
    ep: int = 1
    offload_layers: int = 0
    p2p_split: bool = True
    attention_kernel: AttentionKernel = "cudnn"

    def __post_init__(self) -> None:
        for field in ("tp", "pp", "dp", "micro_batch", "virtual_stages", "cp", "ep"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise PlannerError(field, f"must be an integer >= 1, got {value!r}")
        if self.zero not in (0, 1, 2, 3) or isinstance(self.zero, bool):
            raise PlannerError("zero", f"ZeRO stage must be 0, 1, 2 or 3, got {self.zero!r}")
        if self.recompute not in RECOMPUTE_MODES:
            raise PlannerError(
                "recompute", f"must be one of {', '.join(RECOMPUTE_MODES)}, got {self.recompute!r}"
            )
        if self.attention_kernel not in ATTENTION_KERNELS:
            raise PlannerError(
                "attention_kernel",
                f"must be one of {', '.join(ATTENTION_KERNELS)}, got {self.attention_kernel!r}",
            )
        for flag in (
            "sequence_parallel", "fp32_grads", "flash_attention", "tp_comm_overlap", "p2p_split"
        ):  # fmt: skip
            if not isinstance(getattr(self, flag), bool):
                raise PlannerError(flag, "must be true or false")
        for field in ("first_stage_layers", "last_stage_layers", "shard_group", "offload_layers"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise PlannerError(field, f"must be an integer >= 0 (0: not set), got {value!r}")
        if (self.first_stage_layers or self.last_stage_layers) and self.pp == 1:
            raise PlannerError(
                "first_stage_layers",
                "first/last stage layer counts need pipeline parallelism: set pp > 1 or drop them",
            )
        if self.tp_comm_overlap and not (self.tp > 1 and self.sequence_parallel):
            raise PlannerError(
                "tp_comm_overlap",
                "overlapping tensor-parallel communication needs tp > 1 and sequence parallelism",
            )
        if self.shard_group:
            if self.zero != 3:
                raise PlannerError(
                    "shard_group", "hybrid sharding (a shard group) needs zero = 3 (FSDP)"
                )
            if (self.dp * self.cp) % self.shard_group:
                raise PlannerError(
                    "shard_group",
                    f"the shard group ({self.shard_group}) must divide dp x cp "
                    f"({self.dp} x {self.cp}); pick a divisor",
                )
        if self.virtual_stages > 1 and self.pp == 1:
            raise PlannerError(
                "virtual_stages", "interleaving needs pipeline parallelism: set pp > 1 or v = 1"
            )
        if self.offload_layers and (self.pp > 1 or self.recompute != "none"):
            raise PlannerError(
                "offload_layers",
                "activation offloading runs without pipeline parallelism and without recompute "
                "(Megatron-Core refuses both with it): set pp 1 and recompute none, or 0 layers",
            )

    @property
    def gpus(self) -> int:
        """GPUs the layout occupies (tp·cp·pp·dp)."""
        return self.tp * self.cp * self.pp * self.dp

    @property
    def sharding(self) -> str:
        """ "none", "zero1", "zero2", "zero3" (fully sharded: ZeRO-3 / FSDP) or "hsdp"."""
        if self.zero == 3 and self.shard_group and self.shard_group < self.dp * self.cp:
            return "hsdp"
        return SHARDINGS[self.zero]

    @property
    def expert_data_parallel(self) -> int:
        """Ranks that hold the same experts: tp·cp·dp / ep."""
        return self.tp * self.cp * self.dp // self.ep

    @property
    def shard_size(self) -> int:
        """Ranks over which sharded states are split: the shard group, else dp·cp."""
        return self.shard_group or self.dp * self.cp

    @property
    def uneven(self) -> bool:
        """Whether the first or last stage layer count is set."""
        return bool(self.first_stage_layers or self.last_stage_layers)

    def stage_layers(self, model: Model) -> list[int]:
        """Layers on each pipeline stage, first to last (call `check` first)."""
        p, total = self.pp, model.layers
        if p == 1:
            return [total]
        if not self.uneven:
            return [total // p] * p
        first, last = self.first_stage_layers, self.last_stage_layers
        if p == 2:
            first = first or total - last
            last = last or total - first
            return [first, last]
        inner = p - (1 if first else 0) - (1 if last else 0)
        rest = total - first - last
        mid = rest // inner
        return [first or mid] + [mid] * (p - 2) + [last or mid]

    def microbatches(self, model: Model) -> int:
        """Micro-batches per pipeline per iteration: global_batch / (dp·micro_batch)."""
        return model.global_batch // (self.dp * self.micro_batch)

    def check(self, model: Model) -> None:
        """Raise `PlannerError` naming the field if this layout cannot run `model`."""
        t = self.tp
        for name, size in (
            ("heads", model.heads),
            ("kv_heads", model.kv_heads),
            ("hidden", model.hidden),
            ("ffn_hidden", model.ffn_hidden),
        ):
            if size % t:
                raise PlannerError(
                    "tp", f"tp ({t}) must divide the model's {name} ({size}); pick a divisor"
                )
        if self.cp > 1 and model.seq_len % (2 * self.cp):
            raise PlannerError(
                "cp",
                f"seq_len ({model.seq_len}) must be a multiple of 2 x cp ({2 * self.cp}): each "
                "context-parallel rank takes two balanced chunks of every sequence",
            )
        self._check_experts(model)
        if self.offload_layers >= model.layers:
            raise PlannerError(
                "offload_layers",
                f"must be below the model's {model.layers} layers (Megatron-Core offloads at "
                f"most {model.layers - 1}), got {self.offload_layers}",
            )
        if self.uneven:
            self._check_uneven(model)
        else:
            chunks = self.pp * self.virtual_stages
            if model.layers % chunks:
                raise PlannerError(
                    "pp",
                    f"layers ({model.layers}) must split evenly into pp x virtual_stages "
                    f"({self.pp} x {self.virtual_stages}) chunks; pick a divisor of the layer "
                    "count, or set first_stage_layers / last_stage_layers for uneven stages",
                )
        if self.shard_group and self.zero != 3:
            raise PlannerError("shard_group", "hybrid sharding needs zero = 3")
        per_step = self.dp * self.micro_batch
        if model.global_batch % per_step:
            raise PlannerError(
                "micro_batch",
                f"global_batch ({model.global_batch}) must be a multiple of dp x micro_batch "
                f"({self.dp} x {self.micro_batch}); change micro_batch or dp",
            )

    def _check_experts(self, model: Model) -> None:
        if self.ep > 1 and not model.is_moe:
            raise PlannerError(
                "ep", "expert parallelism needs a mixture-of-experts model (experts > 0); set ep 1"
            )
        if not model.is_moe:
            return
        if model.experts % self.ep:
            raise PlannerError(
                "ep", f"ep ({self.ep}) must divide the {model.experts} experts; pick a divisor"
            )
        if (self.tp * self.cp * self.dp) % self.ep:
            raise PlannerError(
                "ep",
                f"ep ({self.ep}) must divide tp x cp x dp ({self.tp} x {self.cp} x {self.dp}), "
                "the ranks of a pipeline stage it is carved from; pick a divisor",
            )
        if self.tp > 1 and not self.sequence_parallel:
            raise PlannerError(
                "sequence_parallel",
                "MoE layers under tensor parallelism need sequence parallelism (Megatron-Core "
                "requires it); turn it on",
            )

    def _check_uneven(self, model: Model) -> None:
        p, total = self.pp, model.layers
        first, last = self.first_stage_layers, self.last_stage_layers
        if first + last > total or (p == 2 and first and last and first + last != total):
            raise PlannerError(
                "first_stage_layers",
                f"first ({first}) and last ({last}) stage layers must leave the other stages "
                f"the rest of the {total} layers",
            )
        inner = p - (1 if first else 0) - (1 if last else 0)
        rest = total - first - last
        if inner and (rest % inner or rest // inner < 1):
            raise PlannerError(
                "first_stage_layers",
                f"the {rest} layers between the first and last stage must split evenly over the "
                f"other {inner} stages; change first_stage_layers / last_stage_layers",
            )
        v = self.virtual_stages
        counts = self.stage_layers(model)
        if v > 1 and any(n % v for n in counts) and self.end_chunks(model) is None:
            raise PlannerError(
                "virtual_stages",
                f"every stage's layer count {counts} must split into {v} virtual stages, or "
                "the middle stages' count split into v chunks of c layers with the first and "
                "last stage holding (v - 1) x c or more (their outer chunk, the model's first "
                "or last, takes the rest); change virtual_stages or the first/last stage layers",
            )

    def end_chunks(self, model: Model) -> tuple[int, int] | None:
        """(first, last) chunk layers of an interleaved layout whose stages do not all split
        into `virtual_stages` chunks: every chunk holds c layers but the model's first (on the
        first stage) and last (on the last stage), which hold the rest of their stage,
        possibly none (Megatron-Core's --pipeline-model-parallel-layout as Megatron-Bridge
        writes DeepSeek-V3's 61 layers on 4 x 4 chunks, "Et*4|(t*4|)*14tmL"). c is the middle
        stages' layers over v, or with two stages the layers over the chunks, rounded up; an
        end chunk of no layers holds only the embedding or the loss. None without
        interleaving, with even stages or when no such c fits."""
        v, p = self.virtual_stages, self.pp
        if v == 1 or p == 1 or not self.uneven:
            return None
        counts = self.stage_layers(model)
        if p > 2 and counts[1] % v:
            return None
        c = counts[1] // v if p > 2 else -(-model.layers // (p * v))
        first, last = counts[0] - (v - 1) * c, counts[-1] - (v - 1) * c
        return (first, last) if min(first, last) >= 0 else None

    def embedding_and_loss_as_layers(self, model: Model) -> bool:
        """Whether the stages split the layers plus the embedding and the loss as if they were
        two more layers (Megatron's --account-for-embedding-in-pipeline-split and
        --account-for-loss-in-pipeline-split): first and last stage one layer lighter than the
        others."""
        if self.pp < 3 or not (self.first_stage_layers and self.last_stage_layers):
            return False
        counts = self.stage_layers(model)
        mid = counts[1]
        return counts[0] + 1 == mid and counts[-1] + 1 == mid and mid % self.virtual_stages == 0
