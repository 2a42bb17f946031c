"""The environment and host layout of a launched plan: what `trainyard.planner.launch` adds to
the command besides Megatron's flags and DeepSpeed's config.

This module owns `plan_env` (the TRAINYARD_PLAN_* variables a job's processes read),
`device_connections` (CUDA_DEVICE_MAX_CONNECTIONS where Megatron-LM requires it),
`host_size` (the GPUs a host starts processes on) and `domain_note` (how to start a plan
whose NVLink domain spans hosts). Pure: strings and dicts.
"""

from __future__ import annotations

from trainyard.planner.hardware import GPU
from trainyard.planner.model import Model
from trainyard.planner.search import Plan

__all__ = ["device_connections", "domain_note", "host_size", "plan_env"]


def plan_env(model: Model, plan: Plan) -> dict[str, str]:
    """TRAINYARD_PLAN_{TP,CP,PP,DP,MICRO_BATCH,VIRTUAL_STAGES,ZERO,SHARDING,RECOMPUTE,
    SEQUENCE_PARALLEL (0/1), TP_COMM_OVERLAP (0/1), FLASH_ATTENTION (0/1), GLOBAL_BATCH,
    STAGE_LAYERS (layers per pipeline stage, comma-separated), EP (expert parallel size),
    OFFLOAD_LAYERS (layers whose activations go to host memory)}."""
    lay = plan.layout
    values = {
        "TP": lay.tp, "CP": lay.cp, "PP": lay.pp, "DP": lay.dp, "MICRO_BATCH": lay.micro_batch,
        "VIRTUAL_STAGES": lay.virtual_stages, "ZERO": lay.zero, "SHARDING": lay.sharding,
        "RECOMPUTE": lay.recompute, "SEQUENCE_PARALLEL": int(lay.sequence_parallel),
        "TP_COMM_OVERLAP": int(lay.tp_comm_overlap),
        "FLASH_ATTENTION": int(lay.flash_attention), "GLOBAL_BATCH": model.global_batch,
        "STAGE_LAYERS": ",".join(str(n) for n in lay.stage_layers(model)),
        "EP": lay.ep, "OFFLOAD_LAYERS": lay.offload_layers,
    }  # fmt: skip
    return {f"TRAINYARD_PLAN_{key}": str(value) for key, value in values.items()}


def device_connections(plan: Plan, gpu: GPU, megatron: tuple[str, ...]) -> dict[str, str]:
    """CUDA_DEVICE_MAX_CONNECTIONS=1 where Megatron-LM requires it: tensor or context
    parallelism on a GPU before Blackwell, without Megatron-FSDP (which requires it unset).
    One hardware queue keeps each layer's communication kernels ordered before the compute
    that waits for them; `validate_args` refuses to start without it (megatron/training/
    arguments.py at d98e8a64dd; outside review 13)."""
    lay = plan.layout
    fsdp = "--use-megatron-fsdp" in megatron
    needed = (lay.tp > 1 or lay.cp > 1) and gpu.compute_capability < 10.0 and not fsdp
    return {"CUDA_DEVICE_MAX_CONNECTIONS": "1"} if megatron and needed else {}


def host_size(gpu: GPU, nodes_of: int) -> int:
    """GPUs per host that torchrun starts processes on: `nodes_of` (the node the plan was timed
    on), or the GPU's host when one holds fewer than that NVLink domain and divides it
    (GB200 NVL72: hosts of 4 in a domain of 72)."""
    host = gpu.host_gpus
    return host if host < nodes_of and nodes_of % host == 0 else nodes_of


def domain_note(gpu: GPU, host: int, domain: int, gpus: int) -> str:
    """How to start a plan whose NVLink domain spans several hosts."""
    hosts = domain // host
    text = (
        f"{gpu.name}: one NVLink domain spans {hosts} hosts of {host} GPUs ({domain} GPUs); "
        "the plan was timed with consecutive ranks filling a domain before the next"
    )
    if gpus > domain:
        text += (
            f": give each host its NODE_RANK (0..{gpus // host - 1}) rack by rack, {hosts} "
            "hosts a rack (a static rendezvous: c10d would number the hosts in the order they "
            "join)"
        )
    return text
