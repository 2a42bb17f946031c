"""Launcher settings for a plan: the torchrun command, Megatron-LM flags, a DeepSpeed config, the
NCCL algorithm and protocol, and the environment a job's processes receive.

Every configuration emitted is one its target runs; a target that cannot run the plan gets
none, and a note says what to run instead:

* Megatron-LM (argument names as of NVIDIA/Megatron-LM d98e8a64dd, checked by the tests):
  ZeRO-1 is its distributed optimizer (--use-distributed-optimizer); ZeRO-2 and ZeRO-3 are
  Megatron-FSDP (--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads /
  optim_grads_params, checkpoints in fsdp_dtensor format), emitted for plans without pipeline
  parallelism only; hybrid sharding (HSDP) gets no Megatron command: run it with PyTorch FSDP2
  (`fully_shard` on a 2-D device mesh, replicate x shard). The command is complete: model
  shape, layout, precision, a tokenizer, data, optimizer and checkpoint arguments, with
  placeholders the shell refuses to run without ($DATA_PATH, $TOKENIZER_MODEL,
  $CHECKPOINT_DIR, $TRAIN_ITERS; see `PLACEHOLDERS`).
  fp8 runs with the recipe of the published runs the time model is checked against
  (`fp8_recipe`: MXFP8 on Blackwell, per-tensor current scaling elsewhere). Gradients are
  kept as planned: --accumulate-allreduce-grads-in-fp32 for a plan of fp32 gradients,
  --grad-reduce-in-bf16 for a bf16 plan of 2-byte ones (Megatron would otherwise keep a
  bf16 run's gradients in fp32, 2 bytes a parameter more than the plan's memory counted);
  the DeepSpeed config says the same in `data_types.grad_accum_dtype`.
  Activation offloading is --cpu-offloading-num-layers (Megatron-Core with Transformer
  Engine; the search plans it only without pipeline stages and recompute, as Megatron-Core
  requires).
* DeepSpeed: a ZeRO config only for plans DeepSpeed's engine runs by itself: no tensor or
  context parallelism, no pipeline parallelism with ZeRO-2/3 (its pipeline engine supports
  ZeRO stages 0 and 1 only), and no activation offloading without recompute (DeepSpeed
  offloads only the checkpoints of its activation checkpointing, `cpu_checkpointing`).

This module owns the translation of a `search.Plan` into what starts the job (`launch_settings`,
`LaunchSettings`): the torchrun arguments, the Megatron-LM command, the DeepSpeed config and the
job environment. The per-collective algorithm choice behind its NCCL variables
(`CollectiveChoice`, NCCL_ALGO / NCCL_PROTO) is `trainyard.planner.launch_nccl`. It is pure: it
builds strings and dicts and starts nothing.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shlex
from dataclasses import dataclass
from typing import Any, Final

from trainyard.planner import collectives as coll
from trainyard.planner.errors import PlannerError
from trainyard.planner.hardware import GPU
from trainyard.planner.launch_env import device_connections, domain_note, host_size, plan_env
from trainyard.planner.launch_nccl import (
    NCCL_ALGO_NAMES,
    NCCL_PROTO_NAMES,
    CollectiveChoice,
    nccl_variables,
    plan_collectives,
)
from trainyard.planner.layout import ParallelLayout
from trainyard.planner.model import Model
from trainyard.planner.search import Plan

# NCCL_ALGO_NAMES, NCCL_PROTO_NAMES and CollectiveChoice live in `launch_nccl`; re-exported here.
__all__ = [
    "NCCL_ALGO_NAMES",
    "NCCL_PROTO_NAMES",
    "PLACEHOLDERS",
    "CollectiveChoice",
    "LaunchSettings",
    "fp8_recipe",
    "launch_settings",
]

TRAINING_SCRIPT: Final = "pretrain_gpt.py"  # Megatron-LM's GPT entry point
# The values a user must supply, each with what it is (the shell refuses to start without them).
PLACEHOLDERS: Final = {
    "DATA_PATH": "prefix of the tokenized training data (the Megatron .bin and .idx files)",
    "TOKENIZER_MODEL": "Hugging Face tokenizer name or directory matching the data",
    "CHECKPOINT_DIR": "directory for checkpoints (saved and resumed from)",
    "TRAIN_ITERS": "number of training iterations",
}
# What a plan of several hosts needs besides (the same on every host, but NODE_RANK).
RENDEZVOUS: Final = {
    "MASTER_ADDR": "address of the first host, reachable from every host",
    "MASTER_PORT": "a free TCP port on the first host",
    "NODE_RANK": "this host's index, 0 on the first host",
}
_SAFE: Final = re.compile(r"[\w@%+=:,./$-]+")


@dataclass(frozen=True)
class LaunchSettings:
    """How to start a plan: nodes, torchrun and Megatron-LM arguments (empty when Megatron-LM
    cannot run the plan), a DeepSpeed config (None when DeepSpeed cannot), NCCL variables, the
    processes' environment (TRAINYARD_PLAN_* plus NCCL) and the collective choices behind them.
    `notes` explain choices a reader should know about, and what to run instead of a target
    that cannot run the plan."""

    nodes: int
    gpus_per_node: int
    torchrun: tuple[str, ...]
    megatron: tuple[str, ...]
    deepspeed: dict[str, Any] | None
    nccl_env: dict[str, str]
    env: dict[str, str]
    collectives: tuple[CollectiveChoice, ...]
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form: every field, collectives as dicts, top-level tuples as lists."""
        data = dataclasses.asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}

    def shell(self) -> str:
        """Printable text: notes and reasons as comments, export lines, the torchrun command
        with the Megatron flags, and the DeepSpeed JSON."""
        lines = [f"# {self.nodes} node(s) x {self.gpus_per_node} GPUs"]
        lines += [f"# {c.name}: {c.reason}" for c in self.collectives]
        lines += [f"# note: {n}" for n in self.notes]
        lines += [f"export {k}={_quote(v)}" for k, v in self.env.items()]
        if self.megatron:
            lines.append("# Megatron-LM: set these first (placeholders, the shell stops if unset)")
            needed = dict(PLACEHOLDERS)
            if self.nodes > 1:  # torchrun's rendezvous on every host
                needed |= {
                    k: v for k, v in RENDEZVOUS.items() if f"${k}" in " ".join(self.torchrun)
                }
            lines += [f': "${{{k}:?{v}}}"' for k, v in needed.items()]
            command = ["torchrun", *map(_quote, self.torchrun), TRAINING_SCRIPT]
            lines.append(" ".join(command) + " \\")
            flags = _pairs(self.megatron)
            tails = [" \\"] * (len(flags) - 1) + [""]
            lines += [f"    {flag}{tail}" for flag, tail in zip(flags, tails, strict=True)]
        else:
            lines.append("# Megatron-LM: no command for this plan (see the notes)")
        if self.deepspeed is not None:
            lines.append("# DeepSpeed config (ds_config.json):")
            lines.append(json.dumps(self.deepspeed, indent=2))
        else:
            lines.append("# DeepSpeed: no config for this plan (see the notes)")
        return "\n".join(lines) + "\n"


def _quote(arg: str) -> str:
    """Leave plain arguments (and $VARIABLES, to expand) alone; quote the rest."""
    return arg if _SAFE.fullmatch(arg) else shlex.quote(arg)


def _pairs(args: tuple[str, ...]) -> list[str]:
    """Megatron arguments one flag (with its value, if any) per line."""
    out: list[str] = []
    for arg in args:
        if out and not arg.startswith("--"):
            out[-1] += f" {_quote(arg)}"
        else:
            out.append(arg)
    return out


def _torchrun(nodes: int, per_node: int, ordered: bool = False) -> tuple[str, ...]:
    """torchrun's arguments; `ordered`: hosts must take their ranks in a given order (a
    static rendezvous, each host started with its own $NODE_RANK)."""
    if nodes == 1:
        return ("--standalone", "--nnodes=1", f"--nproc-per-node={per_node}")
    if ordered:
        return (
            f"--nnodes={nodes}", f"--nproc-per-node={per_node}", "--rdzv-backend=static",
            "--node-rank=$NODE_RANK", "--master-addr=$MASTER_ADDR", "--master-port=$MASTER_PORT",
        )  # fmt: skip
    return (
        f"--nnodes={nodes}", f"--nproc-per-node={per_node}",
        "--rdzv-backend=c10d", "--rdzv-endpoint=$MASTER_ADDR:$MASTER_PORT",
    )  # fmt: skip


# GPUs with Blackwell tensor cores (the catalogue's names), where Megatron-LM runs MXFP8.
_BLACKWELL: Final = ("B200", "GB200", "B300", "GB300")


def fp8_recipe(gpu: GPU) -> tuple[str, str]:
    """(--fp8-format, --fp8-recipe) for `gpu`: MXFP8 (block scaling, e4m3) on Blackwell, per-
    tensor current scaling ("tensorwise", hybrid e4m3/e5m2) elsewhere, the recipes of
    Megatron-Bridge's published fp8 runs that the time model is checked against (FP8-CS on
    H100, MXFP8 on Blackwell; Megatron-LM's MoE guide gives MXFP8 for Blackwell too)."""
    if gpu.name in _BLACKWELL:
        return "e4m3", "mxfp8"
    return "hybrid", "tensorwise"


def _megatron(model: Model, plan: Plan, gpu: GPU) -> tuple[tuple[str, ...], list[str]]:
    """Megatron-LM's arguments for the plan (empty when it cannot run it) and notes."""
    lay = plan.layout
    notes: list[str] = []
    if lay.sharding == "hsdp":
        return (), [
            "Megatron-LM: no command; hybrid sharding (HSDP) runs with PyTorch FSDP2: "
            f"fully_shard over a 2-D DeviceMesh of {lay.dp * lay.cp // lay.shard_size} "
            f"replicas x {lay.shard_size} shards"
        ]
    if lay.zero >= 2 and lay.pp > 1:
        return (), [
            f"Megatron-LM: no command; ZeRO-{lay.zero} with pipeline parallelism is not a "
            "configuration it runs (Megatron-FSDP is emitted for pp = 1 only)"
        ]
    args = [
        "--tensor-model-parallel-size", str(lay.tp),
        "--pipeline-model-parallel-size", str(lay.pp),
        "--micro-batch-size", str(lay.micro_batch),
        "--global-batch-size", str(model.global_batch),
        "--num-layers", str(model.layers),
        "--hidden-size", str(model.hidden),
        "--num-attention-heads", str(model.heads),
        "--ffn-hidden-size", str(model.ffn_hidden),
        "--seq-length", str(model.seq_len),
        "--max-position-embeddings", str(model.seq_len),
        "--make-vocab-size-divisible-by", str(model.vocab_multiple),
        "--transformer-impl", "transformer_engine",
        "--attention-backend", _attention_backend(lay),
    ]  # fmt: skip
    if lay.cp > 1:
        args += ["--context-parallel-size", str(lay.cp), "--cp-comm-type", "p2p"]
    layout = _chunk_layout(model, lay)
    if layout:  # it sets the interleaving factor too (Megatron-LM allows only one of them)
        args += ["--pipeline-model-parallel-layout", layout]
    elif lay.embedding_and_loss_as_layers(model):
        args += [
            "--account-for-embedding-in-pipeline-split",
            "--account-for-loss-in-pipeline-split",
        ]
    elif lay.uneven:
        counts = lay.stage_layers(model)
        if lay.first_stage_layers:
            args += ["--decoder-first-pipeline-num-layers", str(counts[0])]
        if lay.last_stage_layers:
            args += ["--decoder-last-pipeline-num-layers", str(counts[-1])]
    if lay.virtual_stages > 1 and not layout:
        args += ["--num-virtual-stages-per-pipeline-rank", str(lay.virtual_stages)]
    if lay.sequence_parallel:
        args.append("--sequence-parallel")
    if lay.tp_comm_overlap:
        args.append("--tp-comm-overlap")
    if model.kv_heads < model.heads:
        args += ["--group-query-attention", "--num-query-groups", str(model.kv_heads)]
    if model.is_mla:
        args += ["--multi-latent-attention", "--kv-lora-rank", str(model.kv_lora_rank)]
        if model.q_lora_rank:
            args += ["--q-lora-rank", str(model.q_lora_rank)]
        args += ["--qk-head-dim", str(model.head_dim), "--qk-pos-emb-head-dim"]
        args += [str(model.rope_dim), "--v-head-dim", str(model.v_head_dim)]
    elif model.head_dim * model.heads != model.hidden:
        args += ["--kv-channels", str(model.head_dim)]
    if model.is_moe:
        args += _moe_args(model, plan)
    if model.window:
        args += ["--window-size", f"{model.window},0"]  # (left, right): causal
        if model.full_attention_every:
            args += ["--window-attn-skip-freq", str(model.full_attention_every)]
    if model.mlp == "swiglu":
        args.append("--swiglu")
    elif model.mlp == "squared_relu":
        args.append("--squared-relu")
    elif model.mlp in ("geglu", "relu"):
        notes.append(f"Megatron-LM has no flag for a {model.mlp} MLP: set it in the model spec")
    if not model.bias:
        args += ["--disable-bias-linear", "--normalization", "RMSNorm"]
    if not model.tied_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    if not model.learned_positions:
        args += ["--position-embedding-type", "rope"]
        if model.rope_base:
            args += ["--rotary-base", str(model.rope_base)]
    if model.qk_norm:
        args.append("--qk-layernorm")
    if lay.recompute == "norms":
        modules = ["layernorm", *(["moe_act"] if model.is_moe else []),
                   *(["mla_up_proj"] if model.is_mla else [])]  # fmt: skip
        args += ["--recompute-granularity", "selective", "--recompute-modules", *modules]
    elif lay.recompute in ("selective", "op"):
        args += ["--recompute-granularity", "selective"]
        if lay.recompute == "op":
            notes.append(
                "torchtitan's per-operator checkpointing has no Megatron-LM flag: Megatron's "
                "selective recompute (the attention core) is emitted instead"
            )
    elif lay.recompute == "full":
        args += ["--recompute-granularity", "full", "--recompute-method", "uniform"]
        args += ["--recompute-num-layers", "1"]
    if lay.offload_layers:
        args += ["--cpu-offloading-num-layers", str(lay.offload_layers)]
    if lay.zero == 1:
        args.append("--use-distributed-optimizer")
    elif lay.zero >= 2:
        strategy = "optim_grads" if lay.zero == 2 else "optim_grads_params"
        args += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", strategy]
        notes.append(
            f"ZeRO-{lay.zero} runs as Megatron-FSDP ({strategy}); or with PyTorch FSDP2 "
            "(fully_shard per layer) outside Megatron-LM"
        )
    if lay.fp32_grads:
        args.append("--accumulate-allreduce-grads-in-fp32")
    elif model.precision != "fp16":
        # Megatron accumulates and reduces bf16 runs' gradients in fp32 unless told: the plan
        # counted 2-byte gradients (memory and the reduction's bytes), so the run must keep
        # them so (found by an outside review: layouts that fit as planned did not as launched)
        args.append("--grad-reduce-in-bf16")
    args.append("--fp16" if model.precision == "fp16" else "--bf16")
    if model.precision == "fp8":
        fmt, recipe = fp8_recipe(gpu)
        args += ["--fp8-format", fmt, "--fp8-recipe", recipe]
    if lay.dp * lay.cp > 1:
        args.append("--overlap-grad-reduce")
        if lay.zero >= 1:
            args.append("--overlap-param-gather")
    args += [
        "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", "$TOKENIZER_MODEL",
        "--data-path", "$DATA_PATH", "--split", "99,1,0",
        "--train-iters", "$TRAIN_ITERS",
        "--lr", "3.0e-4", "--min-lr", "3.0e-5", "--lr-decay-style", "cosine",
        "--lr-warmup-iters", "2000", "--weight-decay", "0.1", "--clip-grad", "1.0",
        "--adam-beta1", "0.9", "--adam-beta2", "0.95", "--init-method-std", "0.02",
        "--save", "$CHECKPOINT_DIR", "--load", "$CHECKPOINT_DIR",
        "--ckpt-format", "fsdp_dtensor" if lay.zero >= 2 else "torch_dist",
        "--save-interval", "1000", "--eval-interval", "1000", "--eval-iters", "10",
        "--log-interval", "10",
    ]  # fmt: skip
    notes.append(
        "Megatron-LM optimizer values (lr 3e-4 cosine, warm-up 2000, weight decay 0.1) are "
        "common defaults, not planned: tune them"
    )
    return tuple(args), notes


def _attention_backend(lay: ParallelLayout) -> str:
    """Megatron-LM's --attention-backend: its choice among the fused kernels (cuDNN's first,
    through Transformer Engine), FlashAttention for a plan of that generation's kernel, or the
    unfused attention."""
    if not lay.flash_attention:
        return "unfused"
    return "flash" if lay.attention_kernel == "fa2" else "auto"


def _chunk_layout(model: Model, lay: ParallelLayout) -> str:
    """Megatron-Core's --pipeline-model-parallel-layout for an interleaved layout whose end
    stages do not split into its chunks (`ParallelLayout.end_chunks`), e.g. "Et*4|(t*4|)*14tL"
    (E the embedding, t a layer, L the loss, '|' between chunks in model order); "" for
    a layout the stage-count flags state."""
    ends = lay.end_chunks(model)
    counts = lay.stage_layers(model)
    if ends is None or not any(n % lay.virtual_stages for n in counts):
        return ""
    if lay.embedding_and_loss_as_layers(model):
        return ""
    first, last = ends
    c = (counts[0] - first) // (lay.virtual_stages - 1)

    def layers(n: int) -> str:
        return f"t*{n}" if n > 1 else "t" * n

    middle = lay.pp * lay.virtual_stages - 2
    return f"E{layers(first)}|({layers(c)}|)*{middle}{layers(last)}L"


def _moe_args(model: Model, plan: Plan) -> list[str]:
    """Megatron-LM's mixture-of-experts arguments: the experts, their parallelism (expert
    tensor parallelism 1, as the planner prices it) and the all-to-all dispatcher it prices."""
    args = [
        "--num-experts", str(model.experts),
        "--moe-router-topk", str(model.moe_topk),
        "--moe-ffn-hidden-size", str(model.moe_ffn_hidden),
        "--expert-model-parallel-size", str(plan.layout.ep),
        "--expert-tensor-parallel-size", "1",
        "--moe-grouped-gemm",
        "--moe-token-dispatcher-type", "alltoall",
    ]  # fmt: skip
    if model.moe_shared_ffn_hidden:
        args += ["--moe-shared-expert-intermediate-size", str(model.moe_shared_ffn_hidden)]
    if model.dense_layers:  # the first layers dense: a per-layer pattern, 0 dense, 1 experts
        k = model.dense_layers
        args += ["--moe-layer-freq", f"[0]*{k}+[1]*{model.layers - k}"]
    return args


def _deepspeed(model: Model, plan: Plan) -> tuple[dict[str, Any] | None, list[str]]:
    """A DeepSpeed config when DeepSpeed's engine runs the plan by itself, else None and why."""
    lay = plan.layout
    if lay.tp > 1 or lay.cp > 1:
        return None, [
            "DeepSpeed: no config; tensor or context parallelism needs Megatron-LM (above)"
        ]
    if model.is_moe:
        return None, [
            "DeepSpeed: no config; the mixture of experts is planned with Megatron-LM's expert "
            "parallelism (above)"
        ]
    if lay.pp > 1 and lay.zero >= 2:
        return None, [
            f"DeepSpeed: no config; its pipeline engine supports ZeRO stages 0-1, not {lay.zero}"
        ]
    if lay.sharding == "hsdp":
        return None, ["DeepSpeed: no config for hybrid sharding (use PyTorch FSDP2)"]
    if lay.offload_layers:
        return None, [
            "DeepSpeed: no config; it offloads activations only as the checkpoints of its "
            "activation checkpointing, and this plan offloads without recompute (Megatron-LM, "
            "above)"
        ]
    config: dict[str, Any] = {
        "train_batch_size": model.global_batch,
        "train_micro_batch_size_per_gpu": lay.micro_batch,
        "gradient_accumulation_steps": lay.microbatches(model),
        "zero_optimization": {
            "stage": lay.zero,
            "overlap_comm": lay.dp > 1,
            "contiguous_gradients": True,
        },
        "bf16": {"enabled": model.precision != "fp16"},
        "fp16": {"enabled": model.precision == "fp16"},
        "gradient_clipping": 1.0,
    }
    if model.precision != "fp16":  # DeepSpeed accumulates bf16 gradients in fp32 unless told
        config["data_types"] = {"grad_accum_dtype": "fp32" if lay.fp32_grads else "bf16"}
    if lay.pp > 1:
        config["pipeline"] = {"stages": lay.pp, "partition": "parameters"}
    return config, []


def launch_settings(
    model: Model, plan: Plan, gpu: GPU, nodes_of: int = 8, links: coll.LinkSet | None = None
) -> LaunchSettings:
    """Launcher settings for `plan` (from `search`) of `model` on `gpu`s, `nodes_of` GPUs a node
    (the NVLink domain the plan was timed on).

    The plan's GPUs fill ceil(gpus / h) hosts of min(h, gpus) GPUs each, h = `host_size` (the
    node, or the GPU's smaller host inside it: 4 for a GB200 NVL72 domain of 72); they must
    fill whole hosts (torchrun starts as many processes on every host). Raises `PlannerError`
    naming the field for bad input.
    """
    if isinstance(nodes_of, bool) or not isinstance(nodes_of, int) or nodes_of < 1:
        raise PlannerError("nodes_of", f"must be an integer >= 1, got {nodes_of!r}")
    for field, value, kind in (("model", model, Model), ("plan", plan, Plan), ("gpu", gpu, GPU)):
        if not isinstance(value, kind):
            raise PlannerError(field, f"must be a {kind.__name__}, got {type(value).__name__}")
    plan.layout.check(model)
    gpus = plan.layout.gpus
    host = host_size(gpu, nodes_of)
    nodes, per_node = math.ceil(gpus / host), min(host, gpus)
    if nodes * per_node != gpus:
        raise PlannerError(
            "nodes_of",
            f"the plan's {gpus} GPUs do not fill whole hosts of {host}; torchrun starts the "
            "same number of processes on every host: use a GPU count that is a multiple of it",
        )
    choices = plan_collectives(model, plan, gpu, nodes_of, links)
    nccl_env, notes = nccl_variables(choices)
    if host < nodes_of and gpus > host:
        notes.append(domain_note(gpu, host, nodes_of, gpus))
    megatron, megatron_notes = _megatron(model, plan, gpu)
    deepspeed, deepspeed_notes = _deepspeed(model, plan)
    notes += megatron_notes + deepspeed_notes
    if links is not None and links.source:
        measured = [n for n, v in (("intra-node", links.intra), ("network", links.inter)) if v]
        notes.append(
            f"collectives timed on measured links ({', '.join(measured)}) from {links.source}"
        )
    layout_json = json.dumps(dataclasses.asdict(plan.layout), separators=(",", ":"))
    env = {**plan_env(model, plan), **nccl_env, "TRAINYARD_PLAN_JSON": layout_json}
    env |= device_connections(plan, gpu, megatron)
    return LaunchSettings(
        nodes=nodes,
        gpus_per_node=per_node,
        torchrun=_torchrun(nodes, per_node, ordered=host < nodes_of and gpus > nodes_of),
        megatron=megatron,
        deepspeed=deepspeed,
        nccl_env=nccl_env,
        env=env,
        collectives=tuple(choices),
        notes=tuple(notes),
    )
