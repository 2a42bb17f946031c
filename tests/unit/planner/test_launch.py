"""Launcher settings (trainyard.planner.launch): flags for known layouts, batch arithmetic, NCCL
variables against the time model, printable and JSON forms, bad input."""

from __future__ import annotations

import dataclasses
import json
import shlex
import shutil
import subprocess

import pytest

from trainyard.planner import launch
from trainyard.planner.compute import step_time
from trainyard.planner.errors import PlannerError
from trainyard.planner.hardware import GPU, gpu
from trainyard.planner.launch import NCCL_ALGO_NAMES, LaunchSettings, launch_settings
from trainyard.planner.layout import ParallelLayout
from trainyard.planner.memory import memory_per_gpu
from trainyard.planner.model import Model
from trainyard.planner.presets import preset
from trainyard.planner.search import Plan, search

A100 = gpu("A100")
H100 = gpu("H100")
GPT3 = preset("gpt3-175b")
# gpt3-175b on 1024 A100s: tp 8 inside a node, 16 stages of 2 chunks, dp 8 across nodes.
GPT3_LAYOUT = ParallelLayout(
    tp=8, pp=16, dp=8, zero=1, recompute="selective", sequence_parallel=True, virtual_stages=2
)
TINY = Model("tiny", layers=2, hidden=256, heads=4, seq_len=128, vocab=1000, global_batch=256)
NCCL_ALGOS = {"Ring", "Tree", "CollnetDirect", "CollnetChain", "NVLS", "NVLSTree", "PAT"}
NCCL_FUNCTIONS = {"allreduce", "reducescatter", "allgather"}


def _plan(model: Model, layout: ParallelLayout, g: GPU = A100) -> Plan:
    """A Plan for a fixed layout (independent of the search's ranking)."""
    t = step_time(model, layout, g)
    return Plan(layout, memory_per_gpu(model, layout), t, 0.0, t.tflops_per_gpu, t.mfu)


def _flags(args: tuple[str, ...]) -> dict[str, str]:
    """Megatron arguments as {flag: value}, "" for switches."""
    out: dict[str, str] = {}
    for arg in args:
        if arg.startswith("--"):
            out[arg] = ""
            last = arg
        else:
            out[last] = arg
    return out


def _per_function(value: str) -> dict[str, str]:
    pairs = [part.split(":") for part in value.split(";")]
    return {function: name for function, name in pairs}


@pytest.fixture(scope="module")
def gpt3() -> LaunchSettings:
    return launch_settings(GPT3, _plan(GPT3, GPT3_LAYOUT), A100)


def test_gpt3_megatron_flags(gpt3: LaunchSettings) -> None:
    flags = _flags(gpt3.megatron)
    assert flags["--tensor-model-parallel-size"] == "8"
    assert flags["--pipeline-model-parallel-size"] == "16"
    assert flags["--num-virtual-stages-per-pipeline-rank"] == "2"
    assert flags["--micro-batch-size"] == "1"
    assert flags["--global-batch-size"] == "1536"
    assert flags["--num-layers"] == "96"
    assert flags["--hidden-size"] == "12288"
    assert flags["--num-attention-heads"] == "96"
    assert flags["--ffn-hidden-size"] == "49152"
    assert flags["--seq-length"] == flags["--max-position-embeddings"] == "2048"
    assert flags["--recompute-granularity"] == "selective"
    for switch in ("--sequence-parallel", "--use-distributed-optimizer", "--bf16"):
        assert flags[switch] == ""
    assert "--overlap-grad-reduce" in flags
    for absent in (
        "--group-query-attention",
        "--fp16",
        "--recompute-method",
        "--swiglu",
        "--use-flash-attn",
    ):
        assert absent not in flags


def test_flash_attention_flag_and_env() -> None:
    layout = dataclasses.replace(GPT3_LAYOUT, recompute="none", flash_attention=True)
    settings = launch_settings(GPT3, _plan(GPT3, layout), A100)
    assert _flags(settings.megatron)["--attention-backend"] == "auto"
    assert (
        _flags(launch_settings(GPT3, _plan(GPT3, GPT3_LAYOUT), A100).megatron)[
            "--attention-backend"
        ]
        == "unfused"
    )
    assert settings.env["TRAINYARD_PLAN_FLASH_ATTENTION"] == "1"


def test_gpt3_torchrun_nodes_and_env(gpt3: LaunchSettings) -> None:
    assert (gpt3.nodes, gpt3.gpus_per_node) == (128, 8)
    assert gpt3.torchrun == (
        "--nnodes=128",
        "--nproc-per-node=8",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=$MASTER_ADDR:$MASTER_PORT",
    )
    env = gpt3.env
    assert (env["TRAINYARD_PLAN_TP"], env["TRAINYARD_PLAN_PP"], env["TRAINYARD_PLAN_DP"]) == (
        "8",
        "16",
        "8",
    )
    assert env["TRAINYARD_PLAN_MICRO_BATCH"] == "1"
    assert env["TRAINYARD_PLAN_VIRTUAL_STAGES"] == "2"
    assert env["TRAINYARD_PLAN_ZERO"] == "1"
    assert env["TRAINYARD_PLAN_RECOMPUTE"] == "selective"
    assert env["TRAINYARD_PLAN_SEQUENCE_PARALLEL"] == "1"
    assert env["TRAINYARD_PLAN_FLASH_ATTENTION"] == "0"
    assert env["TRAINYARD_PLAN_GLOBAL_BATCH"] == "1536"
    assert json.loads(env["TRAINYARD_PLAN_JSON"]) == dataclasses.asdict(GPT3_LAYOUT)
    assert " " not in env["TRAINYARD_PLAN_JSON"]  # compact
    assert {k: env[k] for k in gpt3.nccl_env} == gpt3.nccl_env
    assert all(isinstance(v, str) for v in env.values())


def test_gpt3_collectives_hand_checked(gpt3: LaunchSettings) -> None:
    tp, dp = gpt3.collectives
    # b·s·h·2 = 1 x 2048 x 12288 x 2 bytes over the 8 GPUs of one node.
    assert tp.nbytes == 50_331_648
    assert (tp.ranks, tp.ranks_per_node, tp.nodes) == (8, 8, 1)
    # 4 per layer and micro-batch, 96/16 layers, 1536/8 micro-batches.
    assert tp.calls_per_iteration == 4 * 6 * 192
    assert tp.nccl_functions == ("reducescatter", "allgather")  # sequence parallel
    # params / (tp·pp) bf16 gradients, one GPU of each node per data-parallel group.
    assert dp.nbytes == int(GPT3.params / 128 * 2)
    assert (dp.ranks, dp.ranks_per_node, dp.nodes, dp.calls_per_iteration) == (8, 1, 8, 1)
    assert dp.nccl_functions == ("reducescatter", "allgather")  # distributed optimizer


def test_collective_times_match_the_time_model(gpt3: LaunchSettings) -> None:
    t = step_time(GPT3, GPT3_LAYOUT, A100)
    tp, dp = gpt3.collectives
    assert tp.iteration_us * 1e-6 == pytest.approx(t.tp_comm_s)
    # the time model reduces the slowest stage's gradients (the last: it holds the output
    # layer); the launcher sizes the message as the average stage's
    assert dp.time_us * 1e-6 == pytest.approx(t.dp_comm_s, rel=0.1)


def test_reasons_mention_the_numbers(gpt3: LaunchSettings) -> None:
    for c in gpt3.collectives:
        assert c.runner_up is not None and c.runner_up_us is not None
        assert c.runner_up_us > c.time_us
        gain = round((c.runner_up_us / c.time_us - 1) * 100)
        assert c.reason.startswith(f"{c.algorithm}/{c.protocol} beats {c.runner_up} by {gain}%")
        assert f"{c.time_us:.0f} vs {c.runner_up_us:.0f} us" in c.reason
        assert c.reason.endswith(("bandwidth-bound", "latency-bound"))
    tp, dp = gpt3.collectives
    assert "50.3 MB over 8 GPUs in one node" in tp.reason
    assert f"{dp.nbytes / 1e9:.3g} GB over 8 nodes x 1 GPU" in dp.reason


def test_gpt3_nccl_env_is_per_function_and_valid(gpt3: LaunchSettings) -> None:
    algo = _per_function(gpt3.nccl_env["NCCL_ALGO"])
    proto = _per_function(gpt3.nccl_env["NCCL_PROTO"])
    # Both collectives run as reduce-scatter + all-gather; ring is all the model offers there.
    assert algo == {"reducescatter": "Ring", "allgather": "Ring"}
    assert set(proto) == set(algo)
    assert set(proto.values()) <= {"Simple", "LL"}


def test_search_plan_fills_its_nodes_and_has_valid_nccl() -> None:
    plan = search(GPT3, 1024, A100)[0]
    s = launch_settings(GPT3, plan, A100)
    lay = plan.layout
    assert lay.tp * lay.pp * lay.dp == s.nodes * s.gpus_per_node == 1024
    assert f"--nnodes={s.nodes}" in s.torchrun
    assert f"--nproc-per-node={s.gpus_per_node}" in s.torchrun
    assert s.nccl_env, "a 1024-GPU plan has collectives"
    for value in (s.nccl_env["NCCL_ALGO"], s.nccl_env["NCCL_PROTO"]):
        assert set(_per_function(value)) <= NCCL_FUNCTIONS
    assert set(_per_function(s.nccl_env["NCCL_ALGO"]).values()) <= NCCL_ALGOS
    if s.deepspeed is None:  # tensor/context parallelism: Megatron-LM runs it, not DeepSpeed
        assert lay.tp > 1 or lay.cp > 1
        return
    assert s.deepspeed["train_batch_size"] == (
        s.deepspeed["train_micro_batch_size_per_gpu"]
        * s.deepspeed["gradient_accumulation_steps"]
        * lay.dp
    )


def test_single_gpu_model_has_no_collectives() -> None:
    model = preset("gpt3-125m")
    s = launch_settings(model, _plan(model, ParallelLayout()), A100)
    assert (s.nodes, s.gpus_per_node) == (1, 1)
    assert s.torchrun == ("--standalone", "--nnodes=1", "--nproc-per-node=1")
    assert s.collectives == () and s.nccl_env == {}
    assert all("NCCL" not in note for note in s.notes)
    assert not any(k.startswith("NCCL_") for k in s.env)
    flags = _flags(s.megatron)
    assert flags["--tensor-model-parallel-size"] == flags["--pipeline-model-parallel-size"] == "1"
    for absent in (
        "--sequence-parallel",
        "--use-distributed-optimizer",
        "--overlap-grad-reduce",
        "--recompute-granularity",
        "--num-virtual-stages-per-pipeline-rank",
    ):
        assert absent not in flags
    assert s.deepspeed is not None
    assert s.deepspeed["gradient_accumulation_steps"] == 256
    assert s.deepspeed["zero_optimization"]["stage"] == 0
    assert s.deepspeed["zero_optimization"]["overlap_comm"] is False


@pytest.mark.parametrize(
    ("layout", "accumulation"),
    [
        (ParallelLayout(), 256),
        (ParallelLayout(dp=8, micro_batch=2), 16),  # 256 / (8 x 2)
        (ParallelLayout(pp=2, dp=4, micro_batch=4, zero=1), 16),  # 256 / (4 x 4)
        (ParallelLayout(dp=64, micro_batch=4, zero=3), 1),
    ],
)
def test_deepspeed_batch_arithmetic(layout: ParallelLayout, accumulation: int) -> None:
    model = preset("gpt3-1.3b")
    model = dataclasses.replace(model, global_batch=256)
    ds = launch_settings(model, _plan(model, layout), A100).deepspeed
    assert ds is not None
    assert ds["train_batch_size"] == 256
    assert ds["train_micro_batch_size_per_gpu"] == layout.micro_batch
    assert ds["gradient_accumulation_steps"] == accumulation
    assert ds["train_batch_size"] == layout.micro_batch * accumulation * layout.dp
    assert ds["zero_optimization"] == {
        "stage": layout.zero,
        "overlap_comm": layout.dp > 1,
        "contiguous_gradients": True,
    }
    assert ("pipeline" in ds) == (layout.pp > 1)
    assert ds["bf16"] == {"enabled": True} and ds["fp16"] == {"enabled": False}
    assert ds["gradient_clipping"] == 1.0


def test_llama3_70b_gqa_and_llama_shape_flags() -> None:
    model = preset("llama3-70b")
    layout = ParallelLayout(tp=8, pp=4, dp=2, recompute="full", sequence_parallel=True)
    flags = _flags(launch_settings(model, _plan(model, layout, H100), H100).megatron)
    assert flags["--group-query-attention"] == ""
    assert flags["--num-query-groups"] == "8"
    assert flags["--num-attention-heads"] == "64"
    assert flags["--ffn-hidden-size"] == "28672"
    assert flags["--seq-length"] == "8192"
    assert flags["--swiglu"] == flags["--disable-bias-linear"] == ""
    assert flags["--normalization"] == "RMSNorm"
    assert flags["--position-embedding-type"] == "rope"
    assert "--untie-embeddings-and-output-weights" in flags
    assert flags["--recompute-granularity"] == "full"
    assert flags["--recompute-method"] == "uniform"
    assert flags["--recompute-num-layers"] == "1"
    assert "--use-distributed-optimizer" not in flags  # ZeRO 0


def test_fp16_model_and_fp32_grads() -> None:
    model = dataclasses.replace(preset("gpt3-1.3b"), precision="fp16")
    layout = ParallelLayout(dp=8, fp32_grads=True)
    s = launch_settings(model, _plan(model, layout), A100)
    flags = _flags(s.megatron)
    assert "--fp16" in flags and "--bf16" not in flags
    assert "--accumulate-allreduce-grads-in-fp32" in flags
    assert s.deepspeed["fp16"] == {"enabled": True} and s.deepspeed["bf16"] == {"enabled": False}
    (dp,) = s.collectives
    assert dp.nbytes == model.params * 4  # fp32 gradients, tp = pp = 1
    assert dp.nccl_functions == ("allreduce",)
    assert _per_function(s.nccl_env["NCCL_ALGO"]) == {"allreduce": NCCL_ALGO_NAMES[dp.algorithm]}


def test_a_bf16_plan_of_two_byte_gradients_launches_them_so() -> None:
    """Found by an outside review: Megatron-LM accumulates and reduces a bf16 run's
    gradients in fp32 unless `--grad-reduce-in-bf16` is given, so a layout planned with
    2-byte gradients (`fp32_grads` off) could fit as planned and not as launched. The flag
    is emitted then, and only then; the reduction's bytes stay the plan's."""
    model = preset("gpt3-1.3b")
    assert model.precision == "bf16"
    s = launch_settings(model, _plan(model, ParallelLayout(dp=8)), A100)
    flags = _flags(s.megatron)
    assert "--grad-reduce-in-bf16" in flags and "--bf16" in flags
    assert "--accumulate-allreduce-grads-in-fp32" not in flags
    (dp,) = s.collectives
    assert dp.nbytes == model.params * 2
    assert s.deepspeed is not None and s.deepspeed["data_types"] == {"grad_accum_dtype": "bf16"}
    kept = launch_settings(model, _plan(model, ParallelLayout(dp=8, fp32_grads=True)), A100)
    assert "--grad-reduce-in-bf16" not in _flags(kept.megatron)
    assert "--accumulate-allreduce-grads-in-fp32" in _flags(kept.megatron)
    assert kept.deepspeed is not None
    assert kept.deepspeed["data_types"] == {"grad_accum_dtype": "fp32"}


def test_tree_choice_sets_tree_for_allreduce_only() -> None:
    # 1.9 MB over 32 nodes x 4 GPUs: tree with LL wins in the model.
    s = launch_settings(TINY, _plan(TINY, ParallelLayout(pp=2, dp=128), H100), H100)
    (dp,) = s.collectives
    assert (dp.algorithm, dp.protocol) == ("tree", "ll")
    assert s.nccl_env == {"NCCL_ALGO": "allreduce:Tree", "NCCL_PROTO": "allreduce:LL"}
    assert "32 nodes x 4 GPUs" in dp.reason


def test_hierarchical_maps_to_nccl_tree() -> None:
    s = launch_settings(TINY, _plan(TINY, ParallelLayout(pp=2, dp=32), H100), H100)
    (dp,) = s.collectives
    assert dp.algorithm == "hierarchical"
    assert s.nccl_env["NCCL_ALGO"] == "allreduce:Tree"


def test_differing_algorithms_follow_the_dominant_collective_and_say_so() -> None:
    s = launch_settings(TINY, _plan(TINY, ParallelLayout(tp=2, dp=128), H100), H100)
    tp, dp = s.collectives
    assert tp.nccl_functions == dp.nccl_functions == ("allreduce",)
    assert tp.algorithm != dp.algorithm
    top, other = (tp, dp) if tp.iteration_us >= dp.iteration_us else (dp, tp)
    assert s.nccl_env["NCCL_ALGO"] == f"allreduce:{NCCL_ALGO_NAMES[top.algorithm]}"
    assert any(other.name in n and "prefers" in n for n in s.notes)


def test_to_dict_is_json_and_shell_is_printable(gpt3: LaunchSettings) -> None:
    data = json.loads(json.dumps(gpt3.to_dict()))
    assert data["nodes"] == 128 and data["torchrun"] == list(gpt3.torchrun)
    assert data["collectives"][0]["name"] == "tensor-parallel all-reduce"
    assert data["deepspeed"] == gpt3.deepspeed
    text = gpt3.shell()
    assert f"export NCCL_ALGO={shlex.quote(gpt3.nccl_env['NCCL_ALGO'])}\n" in text
    assert "export TRAINYARD_PLAN_JSON='{" in text
    assert "torchrun --nnodes=128 --nproc-per-node=8" in text
    assert "$MASTER_ADDR:$MASTER_PORT pretrain_gpt.py \\\n" in text
    assert "    --tensor-model-parallel-size 8 \\\n" in text
    assert gpt3.deepspeed is None  # tp 8 x pp 16: DeepSpeed alone cannot run it
    assert "# DeepSpeed: no config for this plan (see the notes)" in text
    assert ': "${DATA_PATH:?' in text and "--data-path $DATA_PATH" in text
    for c in gpt3.collectives:
        assert c.reason in text


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_shell_text_parses_as_bash(gpt3: LaunchSettings) -> None:
    script = gpt3.shell().split("# DeepSpeed config", 1)[0]
    subprocess.run(["bash", "-n", "-c", script], check=True)


@pytest.mark.parametrize("nodes_of", [0, -1, True, 2.0])
def test_bad_nodes_of_names_the_field(gpt3: LaunchSettings, nodes_of: object) -> None:
    with pytest.raises(PlannerError) as err:
        launch_settings(GPT3, _plan(GPT3, GPT3_LAYOUT), A100, nodes_of=nodes_of)  # type: ignore[arg-type]
    assert err.value.field == "nodes_of"


def test_bad_inputs_name_the_field() -> None:
    plan = _plan(TINY, ParallelLayout(dp=2), H100)
    with pytest.raises(PlannerError) as err:
        launch_settings("tiny", plan, H100)  # type: ignore[arg-type]
    assert err.value.field == "model"
    with pytest.raises(PlannerError) as err:
        launch_settings(TINY, plan.layout, H100)  # type: ignore[arg-type]
    assert err.value.field == "plan"
    with pytest.raises(PlannerError) as err:
        launch_settings(TINY, plan, "H100")  # type: ignore[arg-type]
    assert err.value.field == "gpu"


def test_partial_nodes_and_invalid_layouts_are_rejected() -> None:
    plan = _plan(TINY, ParallelLayout(dp=4), H100)
    with pytest.raises(PlannerError) as err:
        launch_settings(TINY, plan, H100, nodes_of=3)  # 4 GPUs do not fill nodes of 3
    assert err.value.field == "nodes_of"
    bad = dataclasses.replace(plan, layout=ParallelLayout(tp=3))
    with pytest.raises(PlannerError) as err:
        launch_settings(TINY, bad, H100)
    assert err.value.field == "tp"


def test_multi_node_needs_a_network() -> None:
    no_net = dataclasses.replace(H100, network_gb_s=0.0)
    plan = _plan(TINY, ParallelLayout(dp=16), H100)
    with pytest.raises(PlannerError) as err:
        launch_settings(TINY, plan, no_net)
    assert err.value.field == "network_gb_s"


def test_all_is_explicit_and_resolves() -> None:
    for name in launch.__all__:
        assert hasattr(launch, name)


GB200 = gpu("GB200")
LLAMA70 = preset("llama3-70b")


def _torchrun_args(settings: LaunchSettings) -> object:
    """The torchrun arguments as torch's own launcher parses them once the shell has expanded
    the variables (a flag it does not know, or a value of the wrong kind, fails here)."""
    from torch.distributed.run import get_args_parser

    shell = {"$NODE_RANK": "3", "$MASTER_ADDR": "10.0.0.1", "$MASTER_PORT": "29500"}
    args = list(settings.torchrun)
    for var, value in shell.items():
        args = [a.replace(var, value) for a in args]
    return get_args_parser().parse_args([*args, "pretrain_gpt.py"])


def test_gb200_starts_hosts_of_four_in_rack_order() -> None:
    """A GB200 NVL72 plan is timed on its NVLink domain of 72 but torchrun runs on hosts of
    4: 128 GPUs are 32 hosts, numbered rack by rack (a static rendezvous), and said so."""
    layout = ParallelLayout(tp=2, dp=64, zero=2)
    s = launch_settings(LLAMA70, _plan(LLAMA70, layout, GB200), GB200, nodes_of=72)
    assert (s.nodes, s.gpus_per_node) == (32, 4)
    args = _torchrun_args(s)
    assert (args.nnodes, args.nproc_per_node) == ("32", "4")  # type: ignore[attr-defined]
    assert args.rdzv_backend == "static" and args.node_rank == 3  # type: ignore[attr-defined]
    assert "--node-rank=$NODE_RANK" in s.torchrun
    assert any("18 hosts a rack" in n and "NODE_RANK" in n for n in s.notes)
    assert s.shell().startswith("# 32 node(s) x 4 GPUs")


def test_gb200_within_one_rack_needs_no_host_order() -> None:
    layout = ParallelLayout(tp=4, dp=2, zero=1)
    s = launch_settings(LLAMA70, _plan(LLAMA70, layout, GB200), GB200, nodes_of=72)
    assert (s.nodes, s.gpus_per_node) == (2, 4)
    assert _torchrun_args(s).rdzv_backend == "c10d"  # type: ignore[attr-defined]
    assert any("one NVLink domain spans 18 hosts of 4 GPUs" in n for n in s.notes)
    assert not any("NODE_RANK" in n for n in s.notes)


def test_gb200_partial_host_is_rejected_and_eight_gpu_boards_are_unchanged() -> None:
    six = dataclasses.replace(TINY, global_batch=192)
    plan = _plan(six, ParallelLayout(dp=6), GB200)
    with pytest.raises(PlannerError) as err:
        launch_settings(six, plan, GB200, nodes_of=72)
    assert err.value.field == "nodes_of" and "hosts of 4" in err.value.message
    h100 = launch_settings(TINY, _plan(TINY, ParallelLayout(dp=16), H100), H100)
    assert (h100.nodes, h100.gpus_per_node) == (2, 8)
    assert _torchrun_args(h100).rdzv_backend == "c10d"  # type: ignore[attr-defined]
    assert not any("NVLink domain" in n for n in h100.notes)
