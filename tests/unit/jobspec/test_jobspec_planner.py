"""Job specs with `model:` (trainyard.jobspec + trainyard.planner.jobplan): the planner chooses
the GPU count, the resolved spec runs one worker per GPU and carries the plan's environment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trainyard.jobspec import (
    JobSpecError,
    Limits,
    parse_job_spec,
    resolve,
    resolve_plan,
    spec_from_dict,
    spec_from_json,
)
from trainyard.planner.errors import PlannerError
from trainyard.planner.jobplan import JobPlan, plan_job_spec

PLANNED = """\
name: pretrain-125m
command: [python, pretrain.py]
model: gpt3-125m
gpu_type: H100
planner: {max_gpus: 8}
env: {NCCL_DEBUG: INFO, NCCL_PROTO: Simple}
"""


def test_the_planner_form_parses_unresolved() -> None:
    spec = parse_job_spec(PLANNED)
    assert spec.needs_planner and spec.gpus is None
    assert spec.model == "gpt3-125m" and dict(spec.planner or {}) == {"max_gpus": 8}
    with pytest.raises(JobSpecError) as exc:
        spec.to_core_job("j", 0.0)
    assert exc.value.field == "gpus" and "resolve(spec)" in exc.value.message


def test_resolve_chooses_gpus_workers_and_environment() -> None:
    spec = parse_job_spec(PLANNED)
    resolved, plan = resolve_plan(spec)
    expected = plan_job_spec({"model": "gpt3-125m", "gpu_type": "H100", "planner": {"max_gpus": 8}})
    assert plan is not None and plan.gpus == expected.gpus == resolved.gpus
    assert resolved.gpus is not None and 1 <= resolved.gpus <= 8
    assert resolved.workers * resolved.nodes == resolved.gpus and resolved.gpus_per_worker == 1
    assert not resolved.needs_planner
    env = dict(resolved.env)
    assert env["TRAINYARD_PLAN_GPUS"] == str(resolved.gpus)
    assert {k: v for k, v in env.items() if k.startswith("TRAINYARD_PLAN_")} == {
        k: v for k, v in expected.env.items() if k.startswith("TRAINYARD_PLAN_")
    }
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_PROTO"] == "Simple"  # the user's win
    assert "NCCL_ALGO" in env  # the plan's NCCL settings fill the rest
    job = resolved.to_core_job("j1", 5.0)
    assert (job.gpus, job.gpu_types) == (resolved.gpus, ("H100",))
    assert resolve(resolved) == resolved  # resolving again changes nothing


def test_a_resolved_spec_round_trips_through_json() -> None:
    resolved = resolve(parse_job_spec(PLANNED))
    assert spec_from_json(resolved.to_json()) == resolved
    assert spec_from_dict(resolved.to_dict()) == resolved


def test_resolve_across_nodes() -> None:
    spec = parse_job_spec(
        "name: big\ncommand: x\nmodel: gpt3-1.3b\ngpu_type: H100\n"
        "planner: {max_gpus: 64, tokens: 2e10, nodes_of: 8}\n"
    )
    resolved = resolve(spec)
    assert resolved.gpus is not None and resolved.gpus <= 64
    assert resolved.workers == min(resolved.gpus, 8)
    assert resolved.workers * resolved.nodes == resolved.gpus


def test_flash_attention_off_reaches_the_job_environment() -> None:
    spec = parse_job_spec(
        "name: a\ncommand: x\nmodel: gpt3-125m\ngpu_type: A100\ngpus: 4\n"
        "planner: {flash_attention: false}\n"
    )
    assert resolve(spec).env["TRAINYARD_PLAN_FLASH_ATTENTION"] == "0"
    default = parse_job_spec("name: a\ncommand: x\nmodel: gpt3-125m\ngpu_type: A100\ngpus: 4\n")
    assert resolve(default).env["TRAINYARD_PLAN_FLASH_ATTENTION"] == "1"


def test_model_and_gpus_only_choose_the_layout() -> None:
    spec = parse_job_spec(
        "name: a\ncommand: x\nmodel: gpt3-125m\ngpu_type: A100\ngpus: 4\nworkers: 4\n"
    )
    assert not spec.needs_planner
    resolved = resolve(spec)
    assert (resolved.gpus, resolved.workers, resolved.nodes) == (4, 4, 1)
    assert resolved.env["TRAINYARD_PLAN_GPUS"] == "4"


def test_a_model_mapping_and_a_model_file(tmp_path: Path) -> None:
    spec = parse_job_spec(
        "name: a\ncommand: x\nmodel: {preset: gpt3-125m, global_batch: 64}\n"
        "gpu_type: H100\ngpus: 2\nworkers: 2\n"
    )
    assert spec.model == {"preset": "gpt3-125m", "global_batch": 64}
    assert resolve(spec).env["TRAINYARD_PLAN_GLOBAL_BATCH"] == "64"
    (tmp_path / "m.yaml").write_text("{preset: gpt3-125m, global_batch: 32}\n")
    from_file = parse_job_spec("name: a\ncommand: x\nmodel: m.yaml\ngpu_type: H100\ngpus: 1\n")
    assert resolve(from_file, base_dir=tmp_path).env["TRAINYARD_PLAN_GLOBAL_BATCH"] == "32"
    with pytest.raises(JobSpecError) as exc:
        resolve(from_file, base_dir=tmp_path / "elsewhere")
    assert exc.value.field == "model" and "not found" in exc.value.message


def test_no_model_resolves_to_itself() -> None:
    spec = parse_job_spec("name: a\ncommand: x\ngpus: 2\n")
    assert resolve(spec) is spec
    assert resolve_plan(spec) == (spec, None)


def test_a_custom_plan_function_and_its_errors() -> None:
    seen: list[dict[str, Any]] = []

    def fake(request: Any, base_dir: Path | None) -> JobPlan:
        seen.append(dict(request))
        raise PlannerError("planner.tokens", "too many tokens for the deadline")

    with pytest.raises(JobSpecError) as exc:
        resolve(parse_job_spec(PLANNED), plan=fake)
    assert exc.value.field == "planner.tokens"
    assert seen == [{"model": "gpt3-125m", "gpu_type": "H100", "planner": {"max_gpus": 8}}]


def test_the_resolved_spec_is_checked_against_limits() -> None:
    with pytest.raises(JobSpecError) as exc:
        resolve(parse_job_spec(PLANNED), limits=Limits(max_workers=1))
    assert exc.value.field == "workers"


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        ("model: gpt3-125m\nplanner: {max_gpus: 8}", "gpu_type", "required with model"),
        ("model: gpt3-125m\nresources: {gpu_type: H10}\nplanner: {max_gpus: 8}",
         "resources.gpu_type", "Did you mean 'H100'"),
        ("model: gpt3-125\ngpu_type: H100\nplanner: {max_gpus: 8}", "model",
         "Did you mean 'gpt3-125m'"),
        ("model: {preset: gpt3-125m, hiden: 3}\ngpu_type: H100\ngpus: 1", "model.hiden",
         "unknown model field"),
        ("model: {preset: gpt3-125m, layers: [1]}\ngpu_type: H100\ngpus: 1", "model.layers",
         "single value"),
        ("model: gpt3-125m\ngpu_type: H100", "planner.max_gpus", "required"),
        ("model: gpt3-125m\ngpu_type: H100\nplanner: {}", "planner.max_gpus", "required"),
        ("model: gpt3-125m\ngpu_type: H100\nplanner: {max_gpus: 0}", "planner.max_gpus", ">= 1"),
        ("model: gpt3-125m\ngpu_type: H100\nplanner: {max_gpus: 8, objective: speed}",
         "planner.objective", "time or cost"),
        ("model: gpt3-125m\ngpu_type: H100\nplanner: {max_gpus: 8, tokens: -1}",
         "planner.tokens", "greater than 0"),
        ("model: gpt3-125m\ngpu_type: H100\nplanner: {max_gpus: 8, flash_attention: 2}",
         "planner.flash_attention", "true or false"),
        ("model: gpt3-125m\ngpu_type: H100\nplanner: {max_gpus: 8}\nworkers: 2", "workers",
         "chosen by the planner"),
        ("model: gpt3-125m\ngpu_type: H100\nplanner: {max_gpus: 8}\nnodes: 2", "nodes",
         "chosen by the planner"),
        ("model: gpt3-125m\ngpu_type: H100\ngpus: 0", "gpus", ">= 1"),
        ("planner: {max_gpus: 8}", "planner", "only used with model"),
        ("model: ''\ngpu_type: H100\ngpus: 1", "model", "must not be empty"),
    ],
)  # fmt: skip
def test_planner_form_errors(text: str, field: str, words: str) -> None:
    with pytest.raises(JobSpecError) as exc:
        parse_job_spec("name: a\ncommand: x\n" + text + "\n")
    assert exc.value.field == field
    assert words in exc.value.message


def test_plan_environment_is_allowed_only_with_model() -> None:
    text = "name: a\ncommand: x\ngpus: 1\nenv: {TRAINYARD_PLAN_TP: '2'}\n"
    with pytest.raises(JobSpecError) as exc:
        parse_job_spec(text)
    assert exc.value.field == "env.TRAINYARD_PLAN_TP"
    spec = parse_job_spec(text + "model: gpt3-125m\ngpu_type: H100\n")
    resolved = resolve(spec)
    planned = plan_job_spec({"model": "gpt3-125m", "gpu_type": "H100", "gpus": 1})
    assert resolved.env["TRAINYARD_PLAN_TP"] == planned.env["TRAINYARD_PLAN_TP"] == "1"
    assert "TRAINYARD_PLAN_JSON" in resolved.env  # the hand-written values were replaced


def test_a_gpu_count_the_model_cannot_use_names_gpus() -> None:
    # 11 divides neither the 12 layers, nor 12 + 2 (lighter first/last stages), nor the batch
    spec = parse_job_spec("name: a\ncommand: x\nmodel: gpt3-125m\ngpu_type: H100\ngpus: 11\n")
    with pytest.raises(JobSpecError) as exc:
        resolve(spec)
    assert exc.value.field == "gpus"


def test_a_deadline_no_option_meets_names_the_planner_field() -> None:
    spec = parse_job_spec(PLANNED.replace("{max_gpus: 8}", "{max_gpus: 8, deadline_hours: 1e-9}"))
    with pytest.raises(JobSpecError) as exc:
        resolve(spec)
    assert exc.value.field == "planner.deadline_hours"


def test_tokens_give_the_expected_duration() -> None:
    text = PLANNED.replace("{max_gpus: 8}", "{max_gpus: 8, tokens: 1.0e+9}")
    resolved, plan = resolve_plan(parse_job_spec(text))
    assert plan is not None and resolved.expected_duration_s is not None
    assert resolved.expected_duration_s == pytest.approx(plan.options[0].hours * 3600)
    given = resolve(parse_job_spec(text + "expected_duration_s: 60\n"))
    assert given.expected_duration_s == 60.0
    assert resolve(parse_job_spec(PLANNED)).expected_duration_s is None


def test_a_derived_token_count_too_large_names_the_fields_written() -> None:
    """Outside review 7: a huge batch and sequence with no `planner.tokens` was told about
    `planner.tokens`, which the user never wrote (it defaults to one iteration's tokens)."""
    spec = parse_job_spec(
        "name: a\ncommand: x\n"
        "model: {preset: gpt3-125m, global_batch: 1000000000, seq_len: 1000000000}\n"
        "gpu_type: H100\nplanner: {max_gpus: 4}\n"
    )
    with pytest.raises(JobSpecError) as exc:
        resolve(spec)
    assert exc.value.field == "model.global_batch"
    assert "global_batch x seq_len" in exc.value.message and "planner.tokens" not in str(exc.value)
