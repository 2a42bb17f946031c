"""Resolving a ``model:`` job spec with the planner (`resolve`, `resolve_plan`).

The planner chooses the GPU count (and with it workers and nodes), may predict the training
time, and adds its variables to the job's environment; the result is parsed again, so it obeys
every rule of the format. Kept apart from `spec.py` (the data) and `parse.py` (the rules): it
needs both, and the planner.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from trainyard.fields import MAX_DURATION_S
from trainyard.jobspec.errors import JobSpecError
from trainyard.jobspec.parse import parse_job_spec
from trainyard.jobspec.spec import (
    _MODEL_FIELDS,
    DEFAULT_NODES_OF,
    PLAN_ENV_PREFIX,
    JobSpec,
    Limits,
    _thaw,
)
from trainyard.planner.errors import PlannerError
from trainyard.planner.jobplan import JobPlan, plan_job_spec

__all__ = ["PlanFunction", "resolve", "resolve_plan"]

PlanFunction = Callable[[Mapping[str, Any], Path | None], JobPlan]


def resolve(
    spec: JobSpec,
    *,
    base_dir: Path | None = None,
    limits: Limits | None = None,
    plan: PlanFunction | None = None,
) -> JobSpec:
    """`spec` with the planner's choices applied (`spec` itself when it has no ``model:``).

    See `resolve_plan`, which also returns the planner's answer.
    """
    return resolve_plan(spec, base_dir=base_dir, limits=limits, plan=plan)[0]


def resolve_plan(
    spec: JobSpec,
    *,
    base_dir: Path | None = None,
    limits: Limits | None = None,
    plan: PlanFunction | None = None,
) -> tuple[JobSpec, JobPlan | None]:
    """Run the planner for a ``model:`` spec: returns the resolved spec and the `JobPlan`.

    Without ``gpus:`` the planner chooses the count; the resolved spec then runs one worker
    per GPU, ``planner.nodes_of`` (default 8) per node, and with ``planner.tokens`` an unset
    `expected_duration_s` becomes the predicted training time. Its `env` gains the plan's
    variables (``TRAINYARD_PLAN_*`` always replaced by the new plan; ``NCCL_*`` only where
    the spec does not set them). `base_dir` is where a ``model:`` file is looked up; `plan`
    replaces `plan_job_spec` (tests, caching); `limits` re-checks the result (default: none).
    Errors are `JobSpecError` naming the spec field (``planner.max_gpus``, ``model``...).
    """
    if spec.model is None:
        return spec, None
    request: dict[str, Any] = {
        "model": _thaw(spec.model),
        "gpu_type": spec.gpu_type,
        "planner": _thaw(spec.planner) if spec.planner is not None else {},
    }
    if spec.gpus is not None:
        request["gpus"] = spec.gpus
    try:
        result = (plan or plan_job_spec)(request, base_dir)
    except PlannerError as exc:
        raise _from_planner(exc) from None
    data = spec.to_dict()
    data["gpus"] = result.gpus
    if spec.gpus is None:
        nodes_of = int((spec.planner or {}).get("nodes_of", DEFAULT_NODES_OF))
        per_node = min(result.gpus, nodes_of)
        if result.gpus % per_node:
            raise JobSpecError(
                "gpus",
                f"the planner chose {result.gpus} GPUs, not a multiple of "
                f"planner.nodes_of = {nodes_of}; give gpus: yourself",
            )
        data["workers"], data["nodes"] = per_node, result.gpus // per_node
    tokens_given = spec.planner is not None and "tokens" in spec.planner
    if spec.expected_duration_s is None and tokens_given and result.options:
        hours = result.options[0].hours  # the chosen option: the time to train `tokens`
        if math.isfinite(hours) and hours > 0:  # a plan of over ten years: the longest estimate
            data["expected_duration_s"] = min(hours * 3600.0, MAX_DURATION_S)
    env = {k: v for k, v in spec.env.items() if not k.startswith(PLAN_ENV_PREFIX)}
    for key, value in result.env.items():
        if key.startswith(PLAN_ENV_PREFIX) or key not in env:
            env[key] = value
    data["env"] = env
    resolved = parse_job_spec(data, source="resolved spec", limits=limits or Limits.none())
    return resolved, result


def _from_planner(exc: PlannerError) -> JobSpecError:
    """A planner error as a `JobSpecError` naming the job spec field."""
    name, message = exc.field, exc.message
    if name == "gpu":
        name = "gpu_type"
    elif name == "num_gpus":
        name = "gpus"
    elif name in ("model", "gpu_type", "gpus", "planner") or name.startswith(
        ("model.", "planner.")
    ):
        pass
    elif name in _MODEL_FIELDS or name == "preset":
        name = f"model.{name}"
    else:
        name, message = "model", f"{name}: {message}"
    return JobSpecError(name, message)
