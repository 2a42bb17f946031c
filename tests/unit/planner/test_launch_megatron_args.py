"""Issue 18, acceptance 3: every Megatron-LM command the launcher emits parses against the
argument names of the public Megatron-LM source (data/megatron_arguments.json: names, whether
each takes a value and its allowed values, as of the commit it names), and every emitted
configuration is one its target runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from trainyard.planner.hardware import gpu
from trainyard.planner.launch import PLACEHOLDERS, LaunchSettings, launch_settings
from trainyard.planner.layout import ParallelLayout
from trainyard.planner.memory import memory_per_gpu
from trainyard.planner.presets import preset
from trainyard.planner.search import Plan, search

ARGS: dict[str, Any] = json.loads(
    (Path(__file__).parent / "data" / "megatron_arguments.json").read_text()
)
KNOWN: dict[str, dict[str, Any]] = ARGS["arguments"]


def parse(argv: tuple[str, ...]) -> dict[str, list[str]]:
    """argv as Megatron's parser reads it: every flag known, values where it takes them, none
    where it does not, and within its choices."""
    out: dict[str, list[str]] = {}
    i = 0
    while i < len(argv):
        flag = argv[i]
        assert flag in KNOWN, f"{flag} is not a Megatron-LM argument at {ARGS['commit'][:10]}"
        assert flag not in out, f"{flag} given twice"
        i += 1
        values: list[str] = []
        while i < len(argv) and not argv[i].startswith("--"):
            values.append(argv[i])
            i += 1
        kind = KNOWN[flag]["value"]
        if kind == "none":
            assert not values, f"{flag} takes no value, got {values}"
        elif kind == "one":
            assert len(values) == 1, f"{flag} takes one value, got {values}"
        else:
            assert values, f"{flag} takes values"
        choices = KNOWN[flag].get("choices")
        if choices:
            assert all(v in choices for v in values), f"{flag} {values} not in {choices}"
        out[flag] = values
    return out


def _plan(model_name: str, layout: ParallelLayout) -> tuple[Any, Plan]:
    from trainyard.planner.compute import step_time

    model = preset(model_name)
    t = step_time(model, layout, gpu("H100"))
    return model, Plan(layout, memory_per_gpu(model, layout), t, 1.0, 1.0, 0.5)


def _runnable(settings: LaunchSettings) -> None:
    if settings.megatron:
        flags = parse(settings.megatron)
        for name in PLACEHOLDERS:
            assert f"${name}" in " ".join(settings.megatron), name
        assert "--tokenizer-model" in flags and "--data-path" in flags
        assert not ("--use-distributed-optimizer" in flags and "--use-megatron-fsdp" in flags)
    ds = settings.deepspeed
    if ds is not None and "pipeline" in ds:
        assert ds["zero_optimization"]["stage"] <= 1


def test_the_argument_list_names_its_source() -> None:
    assert len(ARGS["commit"]) == 40 and "arguments.py" in ARGS["source"]
    assert len(KNOWN) >= 60


def test_gpt3_175b_on_128_h100_emits_only_runnable_configs() -> None:
    model, device = preset("gpt3-175b"), gpu("H100")
    for plan in search(model, 128, device, top=5):
        lay = plan.layout
        assert not (lay.pp > 1 and lay.zero >= 2), lay  # nothing runs that
        settings = launch_settings(model, plan, device)
        _runnable(settings)
        flags = parse(settings.megatron)
        if lay.zero == 1:
            assert "--use-distributed-optimizer" in flags


@pytest.mark.parametrize(
    ("model_name", "layout", "expect"),
    [
        ("llama3-405b", ParallelLayout(tp=8, pp=16, dp=2, cp=2, first_stage_layers=7,
                                       last_stage_layers=7, virtual_stages=8, zero=1,
                                       sequence_parallel=True, tp_comm_overlap=True,
                                       flash_attention=True),
         {"--account-for-embedding-in-pipeline-split": [], "--context-parallel-size": ["2"],
          "--num-virtual-stages-per-pipeline-rank": ["8"], "--tp-comm-overlap": [],
          "--group-query-attention": [], "--swiglu": [], "--cp-comm-type": ["p2p"]}),
        ("gpt3-13b", ParallelLayout(tp=2, pp=4, dp=2, first_stage_layers=8, last_stage_layers=8,
                                    sequence_parallel=True),
         {"--decoder-first-pipeline-num-layers": ["8"],
          "--decoder-last-pipeline-num-layers": ["8"]}),
        ("llama2-7b", ParallelLayout(dp=16, zero=3, flash_attention=True),
         {"--use-megatron-fsdp": [], "--data-parallel-sharding-strategy": ["optim_grads_params"],
          "--ckpt-format": ["fsdp_dtensor"]}),
        ("llama2-7b", ParallelLayout(dp=16, zero=2, flash_attention=True),
         {"--data-parallel-sharding-strategy": ["optim_grads"]}),
        ("qwen3-235b-a22b", ParallelLayout(tp=2, pp=8, dp=16, ep=32, first_stage_layers=11,
                                           last_stage_layers=11, virtual_stages=4, zero=1,
                                           sequence_parallel=True, flash_attention=True),
         {"--num-experts": ["128"], "--moe-router-topk": ["8"], "--moe-ffn-hidden-size": ["1536"],
          "--expert-model-parallel-size": ["32"], "--expert-tensor-parallel-size": ["1"],
          "--kv-channels": ["128"], "--moe-grouped-gemm": [],
          "--moe-token-dispatcher-type": ["alltoall"],
          "--account-for-embedding-in-pipeline-split": []}),
        ("deepseek-v3", ParallelLayout(pp=61, dp=32, ep=32, zero=1, flash_attention=True),
         {"--multi-latent-attention": [], "--kv-lora-rank": ["512"], "--q-lora-rank": ["1536"],
          "--qk-head-dim": ["128"], "--qk-pos-emb-head-dim": ["64"], "--v-head-dim": ["128"],
          "--moe-layer-freq": ["[0]*3+[1]*58"], "--num-experts": ["256"],
          "--moe-shared-expert-intermediate-size": ["2048"]}),
        ("gpt-oss-120b", ParallelLayout(pp=4, dp=16, ep=8, zero=1, flash_attention=True),
         {"--window-size": ["128,0"], "--window-attn-skip-freq": ["2"], "--kv-channels": ["64"],
          "--num-experts": ["128"], "--moe-router-topk": ["4"]}),
    ],
)  # fmt: skip
def test_layouts_map_to_megatron_flags(
    model_name: str, layout: ParallelLayout, expect: dict[str, list[str]]
) -> None:
    model, plan = _plan(model_name, layout)
    settings = launch_settings(model, plan, gpu("H100"))
    _runnable(settings)
    flags = parse(settings.megatron)
    for flag, values in expect.items():
        assert flags.get(flag) == values, (flag, flags.get(flag))


def test_moe_search_emits_only_runnable_configs() -> None:
    model, device = preset("mixtral-8x7b"), gpu("H100")
    plans = search(model, 64, device, top=5)
    assert any(p.layout.ep > 1 for p in plans)
    for plan in plans:
        settings = launch_settings(model, plan, device)
        _runnable(settings)
        assert settings.deepspeed is None  # DeepSpeed's engine is not given the MoE plan
        flags = parse(settings.megatron)
        assert flags["--expert-model-parallel-size"] == [str(plan.layout.ep)]
        assert "--kv-channels" not in flags  # Mixtral's heads span the hidden size


def test_a_mixture_of_experts_reduces_its_experts_over_their_own_group() -> None:
    # outside review 13, F12: the NCCL choice counted every parameter's gradient over dp
    model, plan = _plan("qwen3-30b-a3b", ParallelLayout(dp=16, ep=8, zero=1, flash_attention=True))
    dense, experts = launch_settings(model, plan, gpu("H100")).collectives
    routed = model.layers * model.expert_params
    assert dense.nbytes == int((model.params - routed) * 2) and dense.ranks == 16
    assert experts.nbytes == int(routed / 8 * 2) and experts.ranks == 2
    assert "expert-data-parallel group of 2" in experts.name


def test_unrunnable_targets_get_no_config_and_a_note() -> None:
    model, plan = _plan("llama2-7b", ParallelLayout(dp=16, zero=3, shard_group=8))
    settings = launch_settings(model, plan, gpu("H100"))
    assert settings.megatron == () and settings.deepspeed is None
    assert any("FSDP2" in note for note in settings.notes)
    model, plan = _plan("gpt3-13b", ParallelLayout(tp=2, pp=2, dp=4, zero=1))
    settings = launch_settings(model, plan, gpu("H100"))
    assert settings.deepspeed is None and any("DeepSpeed: no config" in n for n in settings.notes)
    model, plan = _plan("gpt3-1.3b", ParallelLayout(pp=2, dp=4, zero=1))
    assert launch_settings(model, plan, gpu("H100")).deepspeed["pipeline"]["stages"] == 2


@pytest.mark.parametrize(
    ("gpu_name", "expect"),
    [("H100", ["hybrid", "tensorwise"]), ("B200", ["e4m3", "mxfp8"]),
     ("GB300", ["e4m3", "mxfp8"]), ("L40S", ["hybrid", "tensorwise"])],
)  # fmt: skip
def test_fp8_plans_get_the_recipe_of_their_gpu(gpu_name: str, expect: list[str]) -> None:
    import dataclasses

    from trainyard.planner.compute import step_time

    model = dataclasses.replace(preset("llama3-8b"), precision="fp8")
    device = gpu(gpu_name)
    layout = ParallelLayout(dp=8, zero=1, flash_attention=True)
    t = step_time(model, layout, device)
    plan = Plan(layout, memory_per_gpu(model, layout), t, 1.0, 1.0, 0.5)
    flags = parse(launch_settings(model, plan, device).megatron)
    assert [flags["--fp8-format"][0], flags["--fp8-recipe"][0]] == expect
    bf16 = preset("llama3-8b")
    plan16 = Plan(layout, memory_per_gpu(bf16, layout), step_time(bf16, layout, device), 1, 1, 0)
    assert "--fp8-recipe" not in parse(launch_settings(bf16, plan16, device).megatron)


def _megatron_validates_connections(
    settings: LaunchSettings, lay: ParallelLayout, cc: float
) -> None:
    """Megatron-LM's `validate_args` (d98e8a64dd, arguments.py): tensor or context parallelism
    before Blackwell needs CUDA_DEVICE_MAX_CONNECTIONS=1, Megatron-FSDP needs it not 1."""
    value = settings.env.get("CUDA_DEVICE_MAX_CONNECTIONS")
    if "--use-megatron-fsdp" in settings.megatron:
        assert value != "1"
    elif (lay.tp > 1 or lay.cp > 1) and cc < 10:
        assert value == "1", lay


@pytest.mark.parametrize(
    ("model_name", "gpus", "gpu_name"),
    [("gpt3-175b", 128, "H100"), ("llama2-13b", 8, "A100-80GB"), ("llama3-405b", 2048, "H100"),
     ("mixtral-8x7b", 64, "H100"), ("gpt3-175b", 128, "B200"), ("llama3-8b", 16, "A100-40GB")],
)  # fmt: skip
def test_megatron_commands_start_with_the_device_connections_they_need(
    model_name: str, gpus: int, gpu_name: str
) -> None:
    # outside review 13, F1: every TP/CP command failed Megatron's own argument check
    model, device = preset(model_name), gpu(gpu_name)
    for plan in search(model, gpus, device, top=4):
        settings = launch_settings(model, plan, device)
        _megatron_validates_connections(settings, plan.layout, device.compute_capability)
        text = settings.shell()
        if settings.nodes > 1 and settings.megatron:  # the rendezvous is a placeholder too
            assert ': "${MASTER_ADDR:?' in text and ': "${MASTER_PORT:?' in text
        elif settings.megatron:
            assert "MASTER_ADDR" not in text
    tp_plan = _plan("gpt3-13b", ParallelLayout(tp=2, dp=4, sequence_parallel=True))[1]
    assert (
        launch_settings(preset("gpt3-13b"), tp_plan, gpu("H100")).env["CUDA_DEVICE_MAX_CONNECTIONS"]
        == "1"
    )
    assert (
        "CUDA_DEVICE_MAX_CONNECTIONS"
        not in launch_settings(preset("gpt3-13b"), tp_plan, gpu("B200")).env
    )  # no longer required from Blackwell on


@pytest.mark.parametrize(
    ("model_name", "base", "norm"),
    [("llama3-8b", "500000", False), ("qwen3-30b-a3b", "1000000", True),
     ("llama2-7b", None, False), ("gpt3-13b", None, False)],
)  # fmt: skip
def test_the_command_trains_the_named_architecture(
    model_name: str, base: str | None, norm: bool
) -> None:
    # outside review 13, F12: no --rotary-base (Llama 3's is 500,000) nor --qk-layernorm
    model = preset(model_name)
    plan = search(model, 8, gpu("H100"), top=1)[0]
    flags = parse(launch_settings(model, plan, gpu("H100")).megatron)
    assert flags.get("--rotary-base") == ([base] if base else None)
    assert ("--qk-layernorm" in flags) is norm
