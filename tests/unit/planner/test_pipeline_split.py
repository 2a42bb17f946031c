"""Layers that do not divide into pipeline chunks (trainyard.planner.pipeline_split, layout,
rows, search, launch): Megatron-Bridge's DeepSeek-V3 layouts of 61 layers read, searched and
launched as Megatron-Core's --pipeline-model-parallel-layout."""

from __future__ import annotations

import re

import pytest
from test_launch_megatron_args import parse

from trainyard.planner.compute import step_time
from trainyard.planner.errors import PlannerError
from trainyard.planner.evaluate import row_inputs
from trainyard.planner.hardware import gpu
from trainyard.planner.launch import launch_settings
from trainyard.planner.layout import ParallelLayout
from trainyard.planner.memory import memory_per_gpu
from trainyard.planner.pipeline_split import end_chunk_stages, pipeline_options, stage_ends
from trainyard.planner.presets import preset
from trainyard.planner.search import Plan, search

# Megatron-Bridge's DeepSeek-V3 layouts (recipes/deepseek, `_get_deepseek_v3_pipeline_layout`
# and the performance recipes' layout strings at 067f987), as first / last stage layers:
# (pp, v) -> the model's first chunk, the others' c, its last chunk.
BRIDGE_DEEPSEEK_V3 = {
    (16, 1): (4, 4, 1),
    (8, 1): (8, 8, 5),
    (4, 2): (8, 8, 5),
    (8, 2): (4, 4, 1),
    (4, 4): (4, 4, 1),
    (2, 8): (4, 4, 1),
    (8, 4): (1, 2, 0),
}


@pytest.mark.parametrize(("pp", "v"), sorted(BRIDGE_DEEPSEEK_V3))
def test_the_chunk_rule_gives_megatron_bridges_deepseek_v3_layouts(pp: int, v: int) -> None:
    first, c, last = BRIDGE_DEEPSEEK_V3[pp, v]
    ends = end_chunk_stages(61, pp, v)
    assert ends == (first + (v - 1) * c, last + (v - 1) * c)
    model = preset("deepseek-v3")
    lay = ParallelLayout(pp=pp, virtual_stages=v, first_stage_layers=ends[0],
                         last_stage_layers=ends[1])  # fmt: skip
    lay.check(model)
    counts = lay.stage_layers(model)
    assert sum(counts) == 61 and all(n == v * c for n in counts[1:-1])
    assert lay.end_chunks(model) == ((first, last) if v > 1 else None)


def test_the_chunk_rule_leaves_alone_what_it_cannot_state() -> None:
    assert end_chunk_stages(64, 8, 2) is None  # even
    assert end_chunk_stages(61, 1, 1) is None
    assert end_chunk_stages(61, 8, 3) is None  # 22 full chunks of 3 exceed 61
    assert end_chunk_stages(61, 32, 1) is None  # a last stage of no layer
    model = preset("deepseek-v3")
    with pytest.raises(PlannerError) as err:  # the ends' chunks would hold fewer than none
        ParallelLayout(pp=4, virtual_stages=4, first_stage_layers=10, last_stage_layers=19).check(
            model
        )
    assert err.value.field in ("first_stage_layers", "virtual_stages")


def test_a_row_that_states_no_split_is_read_with_the_chunk_rule() -> None:
    row = {"model": "DeepSeekV3", "num_gpus": "256", "gpu_type": "GB200",
           "precision": "fp8", "global_batch_size": "4096", "micro_batch_size": "1",
           "seq_len": "4096", "tensor_parallel": "1", "pipeline_parallel": "4",
           "virtual_pipeline": "4", "expert_parallel": "64",
           "tokens_per_sec_per_gpu": "4969"}  # fmt: skip
    inputs = row_inputs(row)
    assert not isinstance(inputs, str)
    _model, lay, _gpu = inputs
    assert (lay.pp, lay.virtual_stages, lay.first_stage_layers, lay.last_stage_layers) == (
        4, 4, 16, 13,
    )  # fmt: skip


def test_the_search_tries_powers_of_two_stages_the_layer_count_does_not_divide() -> None:
    options = dict(pipeline_options(61))
    assert {1, 61} <= set(options) and {2, 4, 8, 16} <= set(options)  # 64 > 61 / 2
    assert 32 not in options and options[3] == 20  # 63 = 3 x 21: the lighter ends
    assert stage_ends(61, 16, 1, options[16]) == (4, 1)
    assert stage_ends(61, 4, 4, options[4]) == (16, 13)
    assert stage_ends(126, 16, 8, 7) == (7, 7) and stage_ends(126, 16, 3, 7) is None
    assert stage_ends(64, 8, 2, 0) == (0, 0) and stage_ends(64, 8, 16, 0) is None
    plans = search(preset("deepseek-v3"), 2048, gpu("H800"), top=5000)
    pipelined = {(p.layout.pp, p.layout.first_stage_layers, p.layout.last_stage_layers)
                 for p in plans}  # fmt: skip
    assert (16, 4, 1) in pipelined and (8, 8, 5) in pipelined


def _stage_counts(layout: str, pp: int) -> list[int]:
    """Decoder layers per pipeline rank of a --pipeline-model-parallel-layout string, read as
    Megatron-LM's help text describes it: x*n and (...)*n repeat, '|' ends a chunk, chunk k
    runs on rank k mod pp, commas are cosmetic."""
    text = layout.replace(",", "")
    text = re.sub(r"\(([^)]+)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    text = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    counts = [0] * pp
    for k, chunk in enumerate(text.split("|")):
        counts[k % pp] += chunk.count("t")
    return counts


@pytest.mark.parametrize(("pp", "v"), [(4, 4), (2, 8), (8, 4), (8, 2)])
def test_an_interleaved_chunk_layout_launches_as_its_layout_string(pp: int, v: int) -> None:
    model, device = preset("deepseek-v3"), gpu("H100")
    ends = end_chunk_stages(61, pp, v)
    assert ends is not None
    lay = ParallelLayout(pp=pp, dp=512 // pp, ep=64, virtual_stages=v, zero=1,
                         first_stage_layers=ends[0], last_stage_layers=ends[1],
                         flash_attention=True)  # fmt: skip
    plan = Plan(lay, memory_per_gpu(model, lay), step_time(model, lay, device), 1.0, 1.0, 0.5)
    flags = parse(launch_settings(model, plan, device).megatron)
    (layout,) = flags["--pipeline-model-parallel-layout"]
    assert len(layout.replace("(", "").split("|")) > 1 and layout.endswith("L")
    assert _stage_counts(layout, pp) == lay.stage_layers(model)
    assert "--num-virtual-stages-per-pipeline-rank" not in flags
    assert "--decoder-first-pipeline-num-layers" not in flags
    if (pp, v) == (4, 4):
        assert layout == "Et*4|(t*4|)*14tL"  # Megatron-Bridge's, without the MTP layer
