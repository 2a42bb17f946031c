"""The ``elastic:`` section of a job spec: the size range a job may run at, and its batch.

This module owns `ElasticSpec` (data), `parse_elastic` (the section's own rules) and
`check_elastic` (the rules that involve the rest of the spec). The format, in the
`trainyard.jobspec` package docstring::

    gpus: 2                     # the size it asks for (default: min_gpus)
    elastic:
      min_gpus: 1               # default: the GPUs of one rank
      max_gpus: 8               # required
      batch_size: 256           # the global batch (optional)
      max_batch_size: 2048      # the batch may adapt up to this (absent: fixed global batch)
      max_local_batch_size: 64  # the most samples one GPU can hold (optional)

An elastic job keeps the GPUs of each rank (``gpus / (workers x nodes)``) at every size, so
``min_gpus`` and ``max_gpus`` are multiples of them; at k GPUs it runs k / (GPUs per rank)
ranks. A rigid job (no ``elastic:``) never changes size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from trainyard.core.types import Elastic
from trainyard.jobspec.errors import JobSpecError, unknown_field
from trainyard.jobspec.fields import integer, mapping

__all__ = ["ELASTIC_KEYS", "ElasticSpec", "check_elastic", "parse_elastic"]

ELASTIC_KEYS: Final = (
    "min_gpus",
    "max_gpus",
    "batch_size",
    "max_batch_size",
    "max_local_batch_size",
)


@dataclass(frozen=True, slots=True)
class ElasticSpec:
    """A checked ``elastic:`` section (see the module docstring); None: not given."""

    min_gpus: int | None
    max_gpus: int
    batch_size: int | None = None
    max_batch_size: int | None = None
    max_local_batch_size: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ELASTIC_KEYS}

    def core_elastic(self) -> Elastic:
        """What the goodput model starts from before the job reports a step: its batch range
        (a fixed global batch unless `max_batch_size` is given)."""
        batch = self.batch_size or 0
        return Elastic(
            batch=batch,
            max_batch=max(batch, self.max_batch_size or batch),
            max_local_batch=self.max_local_batch_size or 0,
        )


def parse_elastic(raw: object, where: str = "elastic") -> ElasticSpec:
    """The section's own rules: known keys, whole numbers >= 1, ``max_gpus`` required,
    min <= max, and a batch range that is a range."""
    section = mapping(raw, where, f"a mapping of {', '.join(ELASTIC_KEYS)}")
    values: dict[str, int] = {}
    for key, value in section.items():
        if key not in ELASTIC_KEYS:
            raise unknown_field(key, where, ELASTIC_KEYS)
        if value is not None:
            values[key] = integer(value, f"{where}.{key}", low=1)
    if "max_gpus" not in values:
        raise JobSpecError(
            f"{where}.max_gpus",
            "is required in elastic: (the most GPUs the job may grow to), e.g. max_gpus: 8",
        )
    low, high = values.get("min_gpus"), values["max_gpus"]
    if low is not None and low > high:
        raise JobSpecError(
            f"{where}.min_gpus",
            f"is {low}, above max_gpus ({high}): give min_gpus <= max_gpus",
        )
    batch, top = values.get("batch_size"), values.get("max_batch_size")
    if top is not None and batch is None:
        raise JobSpecError(
            f"{where}.batch_size",
            "is required with max_batch_size (the global batch the job starts from)",
        )
    if top is not None and batch is not None and top < batch:
        raise JobSpecError(
            f"{where}.max_batch_size",
            f"is {top}, below batch_size ({batch}): give max_batch_size >= batch_size, or "
            "leave it out for a fixed global batch",
        )
    return ElasticSpec(
        min_gpus=low,
        max_gpus=high,
        batch_size=batch,
        max_batch_size=top,
        max_local_batch_size=values.get("max_local_batch_size"),
    )


def check_elastic(
    elastic: ElasticSpec,
    *,
    gpus: int | None,
    gpus_given: bool,
    ranks: int,
    planner_form: bool,
    max_gpus_per_job: int | None,
) -> tuple[ElasticSpec, int]:
    """The rules that involve the rest of the spec; returns the section with `min_gpus` filled
    in and the job's asked size (``gpus``, default `min_gpus`). `ranks` is workers x nodes."""
    if planner_form:
        raise JobSpecError(
            "elastic",
            "cannot be combined with model: yet (the planner plans one size); give gpus: and "
            "workers: instead of model:, or remove elastic:",
        )
    if gpus_given and not gpus:
        raise JobSpecError(
            "elastic", "is for GPU jobs, but gpus is 0: give gpus: or remove elastic:"
        )
    per_rank = gpus // ranks if gpus_given and gpus else 1
    low = elastic.min_gpus if elastic.min_gpus is not None else per_rank
    asked = gpus if gpus_given and gpus is not None else max(low, ranks)
    if max(low, asked) > elastic.max_gpus and not gpus_given:
        raise JobSpecError(
            "elastic.max_gpus",
            f"is {elastic.max_gpus}, below the job's smallest size ({max(low, asked)}, one GPU "
            "per rank at the least): raise it",
        )
    if asked > elastic.max_gpus or asked < low:
        bound = (
            ("above elastic.max_gpus", elastic.max_gpus)
            if asked > elastic.max_gpus
            else ("below elastic.min_gpus", low)
        )
        raise JobSpecError(
            "gpus",
            f"is {asked}, {bound[0]} ({bound[1]}): give a size in the range (the size the job "
            "asks for first), or widen the range",
        )
    for key, value in (("min_gpus", low), ("max_gpus", elastic.max_gpus)):
        if value % per_rank:
            raise JobSpecError(
                f"elastic.{key}",
                f"is {value}, not a multiple of the {per_rank} GPUs each rank has "
                "(gpus / (workers x nodes)): every rank keeps its GPUs at every size",
            )
    if max_gpus_per_job is not None and elastic.max_gpus > max_gpus_per_job:
        raise JobSpecError(
            "elastic.max_gpus",
            f"asks for {elastic.max_gpus} GPUs; at most {max_gpus_per_job} allowed here "
            "(limit max_gpus_per_job): ask for less, or ask an administrator to raise the limit",
        )
    filled = ElasticSpec(
        low,
        elastic.max_gpus,
        elastic.batch_size,
        elastic.max_batch_size,
        elastic.max_local_batch_size,
    )
    return filled, asked
