"""GPU count for a training goal: how many GPUs to ask for to train a model on a number of tokens,
fastest or cheapest (`size_for_tokens`, `SizingOption`).

This module owns the choice of GPU count; for each count the layout is `search`'s best (same
enumeration, memory filter, time model and ranking). Pure and deterministic.

Candidate counts. A count n has a valid layout only when n = tp·pp·dp with tp one of `search`'s
tensor-parallel sizes, pp a divisor of the layer count and dp a divisor of global_batch, so only
those products are tried instead of every n up to max_gpus. Above one node only whole nodes
(multiples of `nodes_of`) are considered: the scheduler places multi-node jobs on whole nodes and
`search` times a data-parallel group as if nodes were full. Counts below the smallest that fits
at all (leanest layout: ZeRO-3, full recompute) are skipped without a search.

Ranking. hours = tokens / tokens_per_s / 3600 and gpu_hours = gpus·hours; cost = gpu_hours·price
when a price is given. "time" ranks by hours ascending (ties: fewer GPUs); "cost" by cost, or by
gpu_hours without a price (ties: fewer hours, then fewer GPUs). With `deadline_hours` only options
that finish in time are kept, for either objective.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final, Literal

from trainyard.planner.collectives import LinkSet
from trainyard.planner.errors import PlannerError
from trainyard.planner.hardware import GPU
from trainyard.planner.model import Model
from trainyard.planner.search import (
    HEADROOM,
    Plan,
    _check_inputs,
    _divisors,
    _rank,
    _shapes,
    _smallest_fitting_count,
    _tp_options,
    _uniform_plans,
)

__all__ = ["OBJECTIVES", "Objective", "SizingOption", "candidate_counts", "size_for_tokens"]

Objective = Literal["time", "cost"]
OBJECTIVES: tuple[str, ...] = ("time", "cost")


@dataclass(frozen=True)
class SizingOption:
    """One GPU count with its best plan and what training `tokens` tokens on it takes.

    `hours` = tokens / plan.tokens_per_s / 3600; `gpu_hours` = gpus·hours; `cost` =
    gpu_hours·price_per_gpu_hour, or None without a price.
    """

    gpus: int
    plan: Plan
    hours: float
    gpu_hours: float
    cost: float | None


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlannerError(name, f"must be a positive integer, got {value!r}")
    return value


def _real(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


# Bounds that keep every figure printable: a thousand times the largest training runs
# published (tens of trillions of tokens), a million per GPU-hour, a century.
MAX_TOKENS: Final = 1e17
MAX_PRICE: Final = 1e6
MAX_HOURS: Final = 876_600.0


def _check(
    tokens: object,
    objective: object,
    max_gpus: object,
    price: object,
    nodes_of: object,
    deadline: object,
) -> None:
    t = _real(tokens)
    if t is None or not math.isfinite(t) or t <= 0 or t > MAX_TOKENS:
        raise PlannerError(
            "tokens", f"must be a number of tokens > 0 and <= {MAX_TOKENS:.0e}, got {tokens!r}"
        )
    if objective not in OBJECTIVES:
        raise PlannerError(
            "objective", f"must be one of {', '.join(OBJECTIVES)}, got {objective!r}"
        )
    _positive_int("max_gpus", max_gpus)
    _positive_int("nodes_of", nodes_of)
    if price is not None:
        p = _real(price)
        if p is None or not math.isfinite(p) or p < 0 or p > MAX_PRICE:
            raise PlannerError(
                "price_per_gpu_hour",
                f"must be a price >= 0 and <= {MAX_PRICE:,.0f} per GPU-hour, got {price!r}",
            )
    if deadline is not None:
        d = _real(deadline)
        if d is None or not math.isfinite(d) or d <= 0 or d > MAX_HOURS:
            raise PlannerError(
                "deadline_hours",
                f"must be a number of hours > 0 and <= {MAX_HOURS:,.0f}, got {deadline!r}",
            )


def candidate_counts(model: Model, max_gpus: int, nodes_of: int = 8) -> list[int]:
    """GPU counts up to `max_gpus` that split as tp·pp·dp (see the module docstring), ascending:
    every such count up to one node, whole nodes above it."""
    _positive_int("max_gpus", max_gpus)
    _positive_int("nodes_of", nodes_of)
    pps = _divisors(model.layers)
    dps = _divisors(model.global_batch)
    counts = set()
    for tp in _tp_options(model, nodes_of):
        for pp in pps:
            if tp * pp > max_gpus:
                break
            for dp in dps:
                n = tp * pp * dp
                if n > max_gpus:
                    break
                if n <= nodes_of or n % nodes_of == 0:
                    counts.add(n)
    return sorted(counts)


def _best_at(
    model: Model, gpu: GPU, n: int, nodes_of: int, flash: bool, links: LinkSet | None = None
) -> Plan | None:
    """`search(model, n, gpu, nodes_of, top=1)[0]`, or None where search finds nothing."""
    plans = _uniform_plans(model, gpu, _shapes(model, n, nodes_of), nodes_of, flash, links)
    return min(plans, key=_rank) if plans else None


def size_for_tokens(
    model: Model,
    gpu: GPU,
    tokens: float,
    *,
    objective: Objective = "time",
    max_gpus: int,
    price_per_gpu_hour: float | None = None,
    nodes_of: int = 8,
    deadline_hours: float | None = None,
    flash_attention: bool = True,
    links: LinkSet | None = None,
) -> list[SizingOption]:
    """Every GPU count up to `max_gpus` with a fitting layout, best first for `objective`.

    Each option carries `search`'s best plan at that count and the hours, GPU-hours and cost
    (with `price_per_gpu_hour`) of training `tokens` tokens; `flash_attention` and `links`
    (measured links) are `search`'s.
    Raises `PlannerError` naming the
    field for bad input, when nothing fits within `max_gpus` (saying the smallest count that
    would), or when no option meets `deadline_hours` (saying the fastest one).
    """
    _check(tokens, objective, max_gpus, price_per_gpu_hour, nodes_of, deadline_hours)
    _check_inputs(model, max_gpus, gpu, nodes_of, 1)
    lowest = _smallest_fitting_count(model, 0, gpu, nodes_of)
    if lowest is None:
        raise PlannerError(
            "max_gpus",
            f"no GPU count fits {model.name!r} on {gpu.name}: use a GPU with more memory or a "
            "smaller model/batch",
        )
    options = []
    for n in candidate_counts(model, max_gpus, nodes_of):
        if n < lowest:
            continue
        plan = _best_at(model, gpu, n, nodes_of, flash_attention, links)
        if plan is None:
            continue
        hours = tokens / plan.tokens_per_s / 3600
        gpu_hours = n * hours
        cost = None if price_per_gpu_hour is None else gpu_hours * price_per_gpu_hour
        options.append(SizingOption(n, plan, hours, gpu_hours, cost))
    if not options:
        smallest = _smallest_whole_count(model, max_gpus, gpu, nodes_of)
        hint = (
            f"the smallest count that fits is {smallest}; raise max_gpus to at least that"
            if smallest is not None
            else "no count fits: use a GPU with more memory or a smaller model/batch"
        )
        raise PlannerError(
            "max_gpus",
            f"no layout of {model.name!r} fits on up to {max_gpus} x {gpu.name} "
            f"({HEADROOM:.0%} of {gpu.memory_gb:g} GB per GPU); {hint}",
        )
    if deadline_hours is not None:
        in_time = [o for o in options if o.hours <= deadline_hours]
        if not in_time:
            fastest = min(options, key=lambda o: (o.hours, o.gpus))
            raise PlannerError(
                "deadline_hours",
                f"no option within max_gpus ({max_gpus}) finishes in {deadline_hours:g} h; the "
                f"fastest takes {fastest.hours:.4g} h on {fastest.gpus} GPUs: raise max_gpus or "
                "the deadline",
            )
        options = in_time
    if objective == "time":
        options.sort(key=lambda o: (o.hours, o.gpus))
    else:
        options.sort(key=lambda o: (o.cost if o.cost is not None else o.gpu_hours, o.hours, o.gpus))
    return options


def _smallest_whole_count(model: Model, max_gpus: int, gpu: GPU, nodes_of: int) -> int | None:
    """The smallest count above max_gpus that fits and is a whole number of nodes (or fits in
    one node), as `size_for_tokens` would consider it."""
    n = _smallest_fitting_count(model, max_gpus, gpu, nodes_of)
    while n is not None and n > nodes_of and n % nodes_of:
        n = _smallest_fitting_count(model, n, gpu, nodes_of)
    return n
