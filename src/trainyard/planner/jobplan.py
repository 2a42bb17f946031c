"""Planning for a job spec that names a model instead of a GPU count.

This module owns the planner's side of the job spec: a job may carry ``model:`` (a preset name,
a YAML file, or a mapping of `Model` fields with an optional ``preset:``) and ``gpu_type:``
instead of, or besides, ``gpus:``. `plan_job_spec` then chooses the GPU count (unless given),
the parallel layout and the launcher settings, and `JobPlan.env` is what the job's processes
receive. The control plane calls it when a job is submitted; `trainyard plan --job FILE` shows
the same result.

Recognised keys (anything else in the spec belongs to the control plane and is ignored here):

* ``model`` (required), ``gpu_type`` (required when ``model`` is given);
* ``gpus``: a fixed count; the planner then only chooses the layout;
* ``planner``: a mapping with ``max_gpus`` (required without ``gpus``); ``tokens``, the
  training goal (without it options are ranked per token: by throughput for ``time``, by
  GPU-hours per token for ``cost``); ``objective`` (``time`` or ``cost``);
  ``price_per_gpu_hour``; ``deadline_hours``; ``nodes_of`` (GPUs per node, default the GPU type's
  NVLink domain: 8, 72 for GB200 NVL72).

Errors are `PlannerError` whose field is the spec path, e.g. ``planner.max_gpus``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from trainyard.planner.errors import PlannerError
from trainyard.planner.hardware import GPU, gpu
from trainyard.planner.launch import LaunchSettings, launch_settings
from trainyard.planner.model import Model
from trainyard.planner.presets import load_model, model_from_mapping, preset
from trainyard.planner.search import Plan, best
from trainyard.planner.sizing import MAX_TOKENS, SizingOption, size_for_tokens

__all__ = ["PLANNER_KEYS", "JobPlan", "model_from_spec", "plan_job_spec"]

PLANNER_KEYS: Final = (
    "max_gpus",
    "tokens",
    "objective",
    "price_per_gpu_hour",
    "deadline_hours",
    "nodes_of",
    "flash_attention",
)


@dataclass(frozen=True)
class JobPlan:
    """The planner's answer for one job: GPU count, layout, launcher settings, alternatives."""

    model: Model
    gpu: GPU
    gpus: int
    plan: Plan
    launch: LaunchSettings
    options: tuple[SizingOption, ...]

    @property
    def env(self) -> dict[str, str]:
        """Environment variables for the job's processes (plan, NCCL settings, GPU count)."""
        return {**self.launch.env, "TRAINYARD_PLAN_GPUS": str(self.gpus)}

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data: the chosen count, layout, predictions, settings, options."""
        lay = self.plan.layout
        return {
            "model": self.model.name,
            "gpu_type": self.gpu.name,
            "gpus": self.gpus,
            "layout": {
                "tp": lay.tp,
                "cp": lay.cp,
                "pp": lay.pp,
                "stage_layers": lay.stage_layers(self.model),
                "dp": lay.dp,
                "micro_batch": lay.micro_batch,
                "virtual_stages": lay.virtual_stages,
                "zero": lay.zero,
                "sharding": lay.sharding,
                "tp_comm_overlap": lay.tp_comm_overlap,
                "recompute": lay.recompute,
                "offload_layers": lay.offload_layers,
                "ep": lay.ep,
                "sequence_parallel": lay.sequence_parallel,
                "flash_attention": lay.flash_attention,
            },
            "memory_gb": self.plan.memory.total,
            "step_time_s": self.plan.time.iteration_s,
            "tokens_per_s": self.plan.tokens_per_s,
            "tflops_per_gpu": self.plan.tflops_per_gpu,
            "mfu": self.plan.mfu,
            "launch": self.launch.to_dict(),
            "env": self.env,
            "options": [
                {"gpus": o.gpus, "hours": o.hours, "gpu_hours": o.gpu_hours, "cost": o.cost}
                for o in self.options
            ],
        }

    def to_json(self) -> str:
        """`to_dict` as indented JSON."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)


def model_from_spec(value: object, base_dir: Path | None = None) -> Model:
    """The `Model` a spec's ``model:`` value names: preset, YAML file (relative to
    `base_dir`), or a mapping of fields."""
    if isinstance(value, Mapping):
        return model_from_mapping(value)
    if not isinstance(value, str) or not value.strip():
        raise PlannerError("model", "must be a preset name, a YAML file or a mapping of fields")
    if value.lower().endswith((".yaml", ".yml")):
        path = Path(value)
        if base_dir is not None and not path.is_absolute():
            path = base_dir / path
        if not path.is_file():
            raise PlannerError("model", f"file {path} not found")
        return load_model(path)
    return preset(value)


def _number(section: Mapping[str, Any], key: str, *, integer: bool = False) -> float | None:
    value = section.get(key)
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = float(value)  # YAML reads 3e11 as a string
        except ValueError:
            raise PlannerError(f"planner.{key}", f"must be a number, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PlannerError(f"planner.{key}", f"must be a number, got {value!r}")
    if integer and value != int(value):
        raise PlannerError(f"planner.{key}", f"must be a whole number, got {value!r}")
    return float(value)


def _prefixed(exc: PlannerError, prefix: str, keys: tuple[str, ...]) -> PlannerError:
    field = exc.field if exc.field not in keys else f"{prefix}.{exc.field}"
    return PlannerError(field, exc.message)


def plan_job_spec(spec: Mapping[str, Any], base_dir: Path | None = None) -> JobPlan:
    """Choose GPUs (unless the spec fixes ``gpus``), layout and launcher settings for a job
    spec carrying ``model:``. Raises `PlannerError` naming the spec field."""
    if "model" not in spec:
        raise PlannerError("model", "the job spec has no model: nothing to plan")
    gpu_type = spec.get("gpu_type")
    if not isinstance(gpu_type, str) or not gpu_type:
        raise PlannerError("gpu_type", "required with model: (e.g. gpu_type: H100)")
    model = model_from_spec(spec["model"], base_dir)
    device = gpu(gpu_type)
    section = spec.get("planner") or {}
    if not isinstance(section, Mapping):
        raise PlannerError("planner", f"must be a mapping of {', '.join(PLANNER_KEYS)}")
    unknown = sorted(set(map(str, section)) - set(PLANNER_KEYS))
    if unknown:
        raise PlannerError(
            f"planner.{unknown[0]}", f"unknown planner option; known: {', '.join(PLANNER_KEYS)}"
        )
    nodes_of = int(_number(section, "nodes_of", integer=True) or device.gpus_per_node)
    flash = section.get("flash_attention", True)
    if not isinstance(flash, bool):
        raise PlannerError("planner.flash_attention", f"must be true or false, got {flash!r}")
    fixed = spec.get("gpus")
    options: tuple[SizingOption, ...] = ()
    if fixed is not None:
        if isinstance(fixed, bool) or not isinstance(fixed, int) or fixed < 1:
            raise PlannerError("gpus", f"must be a positive integer, got {fixed!r}")
        chosen = best(model, fixed, device, nodes_of, flash_attention=flash)
        count = fixed
    else:
        max_gpus = _number(section, "max_gpus", integer=True)
        if max_gpus is None:
            raise PlannerError(
                "planner.max_gpus",
                "required when the job gives model: without gpus: (the most GPUs it may use)",
            )
        tokens = _number(section, "tokens")
        objective = section.get("objective", "time")
        if tokens is None and not model.tokens_per_iteration <= MAX_TOKENS:
            raise PlannerError(  # (the default below: one iteration's tokens)
                "model.global_batch",
                f"global_batch x seq_len gives {model.tokens_per_iteration:.3g} tokens an "
                f"iteration, more than {MAX_TOKENS:.0e}; give smaller ones",
            )
        try:
            found = size_for_tokens(
                model,
                device,
                tokens if tokens is not None else float(model.tokens_per_iteration),
                objective=objective,
                max_gpus=int(max_gpus),
                price_per_gpu_hour=_number(section, "price_per_gpu_hour"),
                nodes_of=nodes_of,
                deadline_hours=_number(section, "deadline_hours"),
                flash_attention=flash,
            )
        except PlannerError as exc:
            raise _prefixed(exc, "planner", PLANNER_KEYS) from None
        options = tuple(found)
        chosen, count = found[0].plan, found[0].gpus
    return JobPlan(
        model, device, count, chosen, launch_settings(model, chosen, device, nodes_of), options
    )
