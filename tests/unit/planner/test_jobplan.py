"""Job specs that carry `model:` (trainyard.planner.jobplan): the planner picks GPUs and layout
and the job's environment receives the plan."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from trainyard.planner.errors import PlannerError
from trainyard.planner.hardware import gpu
from trainyard.planner.jobplan import model_from_spec, plan_job_spec
from trainyard.planner.presets import preset
from trainyard.planner.search import best
from trainyard.planner.sizing import size_for_tokens


def test_fixed_gpus_only_choose_the_layout() -> None:
    result = plan_job_spec({"model": "gpt3-1.3b", "gpu_type": "A100", "gpus": 16})
    assert result.gpus == 16 and result.options == ()
    assert result.plan == best(preset("gpt3-1.3b"), 16, gpu("A100"))
    env = result.env
    lay = result.plan.layout
    assert env["TRAINYARD_PLAN_GPUS"] == "16"
    assert (env["TRAINYARD_PLAN_TP"], env["TRAINYARD_PLAN_PP"]) == (str(lay.tp), str(lay.pp))
    assert json.loads(env["TRAINYARD_PLAN_JSON"])["dp"] == lay.dp


def test_flash_attention_option_reaches_the_plan() -> None:
    spec = {"model": "gpt3-1.3b", "gpu_type": "A100", "gpus": 16}
    assert plan_job_spec(spec).plan.layout.flash_attention
    stored = plan_job_spec({**spec, "planner": {"flash_attention": False}})
    assert stored.plan == best(preset("gpt3-1.3b"), 16, gpu("A100"), flash_attention=False)
    assert stored.env["TRAINYARD_PLAN_FLASH_ATTENTION"] == "0"
    assert json.loads(stored.to_json())["layout"]["flash_attention"] is False


def test_without_gpus_the_planner_sizes_for_the_goal() -> None:
    spec = {
        "model": {"preset": "gpt3-1.3b", "global_batch": 256},
        "gpu_type": "H100",
        "planner": {"max_gpus": 64, "tokens": "2e10", "objective": "cost"},
    }
    result = plan_job_spec(spec)
    model = preset("gpt3-1.3b")
    expected = size_for_tokens(
        dataclasses.replace(model, global_batch=256), gpu("H100"), 2e10, objective="cost",
        max_gpus=64,
    )[0]  # fmt: skip
    assert (result.gpus, result.plan) == (expected.gpus, expected.plan)
    assert result.options[0].gpus == result.gpus
    data = json.loads(result.to_json())
    assert data["gpus"] == result.gpus and data["env"]["TRAINYARD_PLAN_GPUS"] == str(result.gpus)


def test_model_from_a_file_relative_to_the_spec(tmp_path: Path) -> None:
    (tmp_path / "model.yaml").write_text("{preset: gpt3-125m, global_batch: 64}\n")
    model = model_from_spec("model.yaml", tmp_path)
    assert model.global_batch == 64 and model.hidden == preset("gpt3-125m").hidden
    with pytest.raises(PlannerError) as exc:
        model_from_spec("other.yaml", tmp_path)
    assert exc.value.field == "model"


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"gpu_type": "H100", "gpus": 8}, "model"),
        ({"model": "gpt3-1.3b", "gpus": 8}, "gpu_type"),
        ({"model": "gpt3-13", "gpu_type": "H100", "gpus": 8}, "model"),
        ({"model": 7, "gpu_type": "H100", "gpus": 8}, "model"),
        ({"model": {"preset": "gpt3-1.3b", "heads": 7}, "gpu_type": "H100", "gpus": 8}, "hidden"),
        ({"model": {"preset": "gpt3-1.3b", "colour": 1}, "gpu_type": "H100", "gpus": 8}, "colour"),
        ({"model": "gpt3-1.3b", "gpu_type": "TPU", "gpus": 8}, "gpu"),
        ({"model": "gpt3-1.3b", "gpu_type": "H100", "gpus": 0}, "gpus"),
        ({"model": "gpt3-1.3b", "gpu_type": "H100"}, "planner.max_gpus"),
        ({"model": "gpt3-1.3b", "gpu_type": "H100", "planner": [1]}, "planner"),
        ({"model": "gpt3-1.3b", "gpu_type": "H100", "planner": {"max_gpus": "x"}},
         "planner.max_gpus"),
        ({"model": "gpt3-1.3b", "gpu_type": "H100", "planner": {"max_gpus": 8.5}},
         "planner.max_gpus"),
        ({"model": "gpt3-1.3b", "gpu_type": "H100", "planner": {"max_gpus": 8, "tokens": -1}},
         "planner.tokens"),
        ({"model": "gpt3-175b", "gpu_type": "H100", "planner": {"max_gpus": 8}},
         "planner.max_gpus"),
        ({"model": "gpt3-1.3b", "gpu_type": "H100", "gpus": 8,
          "planner": {"flash_attention": "yes"}}, "planner.flash_attention"),
    ],
)  # fmt: skip
def test_bad_specs_name_the_field(spec: dict[str, object], field: str) -> None:
    with pytest.raises(PlannerError) as exc:
        plan_job_spec(spec)
    assert exc.value.field == field, exc.value


def test_gb200_job_is_planned_on_its_rack_and_started_on_hosts() -> None:
    result = plan_job_spec({"model": "llama3-70b", "gpu_type": "GB200", "gpus": 128})
    assert (result.launch.nodes, result.launch.gpus_per_node) == (32, 4)
    # timed on domains of 8 as asked, still started on the hosts of 4 a GB200 tray holds
    eight = plan_job_spec(
        {"model": "llama3-70b", "gpu_type": "GB200", "gpus": 128, "planner": {"nodes_of": 8}}
    )
    assert (eight.launch.nodes, eight.launch.gpus_per_node) == (32, 4)
    assert eight.plan.time.iteration_s > result.plan.time.iteration_s
