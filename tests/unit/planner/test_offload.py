"""Activation offloading to host memory (Megatron-Core --cpu-offloading-num-layers): the layout's
rules, the memory it frees, the copies' exposed time, the search's choice of a layer count, the
launcher's flag and the published rows that use it (trainyard.planner.offload and its callers)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from trainyard.planner.compute import step_time
from trainyard.planner.errors import PlannerError
from trainyard.planner.evaluate import package_csv_path, read_as, row_inputs
from trainyard.planner.hardware import gpu, load_catalogue
from trainyard.planner.launch import launch_settings
from trainyard.planner.layout import ParallelLayout
from trainyard.planner.memory import GB, layer_activation_bytes, memory_per_gpu
from trainyard.planner.offload import exposed_s, resident_layers
from trainyard.planner.presets import preset
from trainyard.planner.search import (
    HEADROOM,
    OFFLOAD_MIN_GAIN,
    Plan,
    fewest_offload_layers,
    search,
)

KNOWN = json.loads((Path(__file__).parent / "data" / "megatron_arguments.json").read_text())[
    "arguments"
]
# Megatron-Bridge's DGX-GB200 Llama 3 70B run: Megatron-FSDP over 64 GPUs, micro-batch 2.
FSDP = ParallelLayout(dp=64, micro_batch=2, zero=3, flash_attention=True)


def test_offloading_runs_without_pipeline_or_recompute_and_below_the_layer_count() -> None:
    for bad in ({"pp": 2, "dp": 32}, {"recompute": "full"}, {"recompute": "selective"}):
        with pytest.raises(PlannerError) as caught:
            dataclasses.replace(FSDP, offload_layers=4, **bad)
        assert caught.value.field == "offload_layers" and "pipeline" in caught.value.message
    with pytest.raises(PlannerError) as caught:
        ParallelLayout(offload_layers=-1)
    assert caught.value.field == "offload_layers"
    model = preset("llama3-70b")
    with pytest.raises(PlannerError) as caught:
        dataclasses.replace(FSDP, offload_layers=model.layers).check(model)
    assert caught.value.field == "offload_layers" and "79" in caught.value.message
    dataclasses.replace(FSDP, offload_layers=model.layers - 1).check(model)


def test_offloaded_layers_leave_the_gpu_but_the_one_in_flight() -> None:
    assert [resident_layers(80, k) for k in (0, 1, 40, 79)] == [80, 80, 41, 2]
    model = preset("llama3-70b")
    per_layer = layer_activation_bytes(model, FSDP) / GB
    kept = memory_per_gpu(model, FSDP)
    offloaded = memory_per_gpu(model, dataclasses.replace(FSDP, offload_layers=40))
    assert kept.offloaded == 0.0
    assert offloaded.activations == pytest.approx(kept.activations - 39 * per_layer)
    assert offloaded.offloaded == pytest.approx(40 * per_layer)
    assert offloaded.weights == kept.weights and offloaded.optimizer == kept.optimizer
    assert offloaded.total < kept.total  # host memory is not GPU memory


def test_the_copies_hide_behind_compute_on_nvlink_c2c_and_not_on_pcie() -> None:
    model = preset("llama3-70b")
    layout = dataclasses.replace(FSDP, offload_layers=40)
    grace = gpu("GB200")  # NVLink-C2C to its Grace CPU
    pcie = dataclasses.replace(grace, host_link_gb_s=32.0)
    plain = step_time(model, FSDP, grace, grace.gpus_per_node)
    on_c2c = step_time(model, layout, grace, grace.gpus_per_node)
    on_pcie = step_time(model, layout, pcie, grace.gpus_per_node)
    assert plain.offload_s == 0.0
    assert on_c2c.offload_s < 0.01 * on_c2c.iteration_s  # bf16 layers outlast the copies
    assert on_pcie.offload_s > 0.3 * on_pcie.iteration_s
    assert on_pcie.iteration_s == pytest.approx(plain.iteration_s + on_pcie.offload_s)
    # the rule: a copy of c seconds behind a forward of f and a backward of 2f, per layer
    assert exposed_s(3e9, 0.01, 5, dataclasses.replace(grace, host_link_gb_s=100.0)) == (
        pytest.approx(5 * ((0.03 - 0.01) + (0.03 - 0.02)))
    )
    assert exposed_s(1e9, 0.05, 5, grace) == 0.0  # hidden
    with pytest.raises(PlannerError) as caught:
        exposed_s(1e9, 0.01, 1, dataclasses.replace(grace, host_link_gb_s=0.0))
    assert caught.value.field == "offload_layers" and "host_link_gb_s" in caught.value.message


def test_the_fewest_layers_that_fit_are_offloaded() -> None:
    model, device = preset("llama3-70b"), gpu("GB200")
    budget, host = HEADROOM * device.memory_gb, HEADROOM * device.host_memory_gb
    layout = dataclasses.replace(FSDP, micro_batch=1)
    assert memory_per_gpu(model, layout).total > budget
    found = fewest_offload_layers(model, layout, budget, host)
    assert found is not None
    offloaded, mem = found
    k = offloaded.offload_layers
    assert mem.total <= budget and mem.offloaded <= host
    assert memory_per_gpu(model, dataclasses.replace(layout, offload_layers=k - 1)).total > budget
    assert fewest_offload_layers(model, layout, budget, 0.0) is None  # host memory unknown
    assert fewest_offload_layers(model, layout, budget, 1.0) is None  # does not fit the host
    piped = ParallelLayout(pp=2, dp=32, zero=1, flash_attention=True)
    assert fewest_offload_layers(model, piped, budget, host) is None


def test_the_search_offloads_on_grace_blackwell_only_where_the_host_is_known() -> None:
    model, device = preset("llama3-70b"), gpu("GB200")
    plans = search(model, 64, device, device.gpus_per_node, top=20)
    offloading = [p for p in plans if p.layout.offload_layers]
    assert offloading, [p.layout for p in plans]
    for plan in offloading:
        lay = plan.layout
        assert lay.pp == 1 and lay.recompute == "none"
        assert plan.memory.total <= HEADROOM * device.memory_gb
        assert 0 < plan.memory.offloaded <= HEADROOM * device.host_memory_gb
        assert plan.time.offload_s < 0.05 * plan.time.iteration_s
    # beside a plan that shards further instead, offloading is kept only when 2 % faster
    every = search(model, 64, device, device.gpus_per_node, top=10_000)
    for plan in (p for p in every if p.layout.offload_layers):
        base = dataclasses.replace(plan.layout, offload_layers=0, zero=0)
        for other in every:
            if dataclasses.replace(other.layout, zero=0) == base:
                assert plan.time.iteration_s <= (1 - OFFLOAD_MIN_GAIN) * other.time.iteration_s
    unknown = dataclasses.replace(device, host_memory_gb=0.0)
    plans = search(model, 64, unknown, device.gpus_per_node, top=20)
    assert not any(p.layout.offload_layers for p in plans)


def test_a_model_too_big_says_whether_offloading_was_tried() -> None:
    model = preset("gpt3-175b")
    with pytest.raises(PlannerError) as caught:
        search(model, 1, gpu("GB200"))
    assert "or offloading activations to the host" in caught.value.message
    assert "smallest GPU count that fits is" in caught.value.message
    with pytest.raises(PlannerError) as caught:
        search(model, 1, gpu("L40S"))  # host memory unknown: no offloading
    assert "offloading" not in caught.value.message


def test_a_catalogue_entry_may_state_its_host(tmp_path: Path) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text("L40S: {host_memory_gb: 96}\n")
    assert load_catalogue(path)["L40S"].host_memory_gb == 96
    assert gpu("L40S").host_memory_gb == 0.0 and gpu("H100").host_link_gb_s == 32.0
    path.write_text("L40S: {host_link_gb_s: -1}\n")
    with pytest.raises(PlannerError) as caught:
        load_catalogue(path)
    assert caught.value.field == "L40S.host_link_gb_s"


def test_megatron_gets_the_flag_and_deepspeed_no_config() -> None:
    model, device = preset("llama3-70b"), gpu("GB200")
    layout = dataclasses.replace(FSDP, offload_layers=40)
    t = step_time(model, layout, device, device.gpus_per_node)
    plan = Plan(layout, memory_per_gpu(model, layout), t, 1.0, 1.0, 0.5)
    settings = launch_settings(model, plan, device)
    argv = settings.megatron
    at = argv.index("--cpu-offloading-num-layers")
    assert argv[at + 1] == "40" and KNOWN["--cpu-offloading-num-layers"]["value"] == "one"
    assert "--recompute-granularity" not in argv  # Megatron-Core refuses both together
    assert settings.deepspeed is None
    assert any("DeepSpeed: no config" in note and "offload" in note for note in settings.notes)
    assert settings.env["TRAINYARD_PLAN_OFFLOAD_LAYERS"] == "40"


def test_a_job_spec_planned_onto_grace_blackwell_carries_its_offloading() -> None:
    from trainyard.planner.jobplan import plan_job_spec

    result = plan_job_spec({"model": "llama3-70b", "gpu_type": "GB200", "gpus": 64})
    k = result.plan.layout.offload_layers
    assert k > 0  # the fastest plan offloads (see the search test)
    assert json.loads(result.to_json())["layout"]["offload_layers"] == k
    assert result.env["TRAINYARD_PLAN_OFFLOAD_LAYERS"] == str(k)
    assert json.loads(result.env["TRAINYARD_PLAN_JSON"])["offload_layers"] == k


def test_the_published_offloading_runs_are_read_with_their_layer_count() -> None:
    import csv

    with package_csv_path().open() as f:
        rows = [r for r in csv.DictReader(f) if r["cpu_offload_layers"]]
    assert {(r["table_id"], r["cpu_offload_layers"]) for r in rows} == {
        ("BRIDGE_GB200", "40"), ("BRIDGE_GB300", "20"),
    }  # fmt: skip
    for row in rows:
        inputs = row_inputs(row)
        assert not isinstance(inputs, str)
        model, layout, _device = inputs
        assert layout.recompute == "none"  # not inferred: offloading rules recompute out
        assert f"off{row['cpu_offload_layers']}" in read_as(model, layout)
    with pytest.raises(PlannerError) as caught:
        row_inputs({**rows[0], "pipeline_parallel": "2", "data_parallel": "32"})
    assert caught.value.field == "offload_layers"
    for bad in ("-4", "2.5"):
        with pytest.raises(PlannerError) as caught:
            row_inputs({**rows[0], "cpu_offload_layers": bad})
        assert caught.value.field == "cpu_offload_layers"
