"""GPU count for a training goal (trainyard.planner.sizing): candidate counts, agreement with
`search`, hand-checked hours, the time/cost orderings, deadlines, bad input and speed."""

from __future__ import annotations

import math

import pytest

from trainyard.planner.errors import PlannerError
from trainyard.planner.hardware import gpu
from trainyard.planner.model import Model
from trainyard.planner.presets import preset
from trainyard.planner.search import search
from trainyard.planner.sizing import SizingOption, candidate_counts, size_for_tokens

A100 = gpu("A100-80GB")
SMALL = Model("small", layers=8, hidden=1024, heads=16, seq_len=1024, vocab=32000, global_batch=64)
GPT13 = preset("gpt3-1.3b")
TOKENS = 20e9


def test_candidate_counts_are_splittable_and_whole_nodes() -> None:
    # tp in 1, 2, 4, 8; pp | 8; dp | 64: every power of two; above 8 GPUs only multiples of 8.
    assert candidate_counts(SMALL, 100) == [1, 2, 4, 8, 16, 32, 64]
    counts = candidate_counts(GPT13, 1000, nodes_of=4)
    assert all(n <= 4 or n % 4 == 0 for n in counts)
    assert 3 in counts and 24 in counts and max(counts) <= 1000


def test_each_option_is_searchs_best_plan() -> None:
    options = size_for_tokens(GPT13, A100, TOKENS, max_gpus=64)
    assert {o.gpus for o in options} == set(candidate_counts(GPT13, 64))
    for option in options:
        assert option.plan == search(GPT13, option.gpus, A100, nodes_of=8, top=1)[0]


def test_hours_by_hand() -> None:
    # 1000 iterations' worth of tokens takes 1000 x the iteration time.
    tokens = 1000 * GPT13.tokens_per_iteration
    for option in size_for_tokens(GPT13, A100, tokens, max_gpus=32, price_per_gpu_hour=2.5):
        assert option.hours == pytest.approx(1000 * option.plan.time.iteration_s / 3600)
        assert option.gpu_hours == pytest.approx(option.gpus * option.hours)
        assert option.cost == pytest.approx(2.5 * option.gpu_hours)


def test_hours_of_one_hand_made_plan() -> None:
    option = size_for_tokens(GPT13, A100, 3.6e9, max_gpus=8)[0]
    # hours = tokens / (tokens/s) / 3600, with tokens/s = batch x seq / iteration.
    per_s = 512 * 2048 / option.plan.time.iteration_s
    assert option.plan.tokens_per_s == pytest.approx(per_s)
    assert option.hours == pytest.approx(3.6e9 / per_s / 3600)
    assert option.cost is None


def test_time_objective_is_fastest_first() -> None:
    options = size_for_tokens(GPT13, A100, TOKENS, max_gpus=256)
    hours = [o.hours for o in options]
    assert hours == sorted(hours)


@pytest.mark.parametrize("price", [None, 3.0])
def test_time_and_cost_optima(price: float | None) -> None:
    fast = size_for_tokens(GPT13, A100, TOKENS, max_gpus=256, price_per_gpu_hour=price)
    cheap = size_for_tokens(
        GPT13, A100, TOKENS, objective="cost", max_gpus=256, price_per_gpu_hour=price
    )
    assert {o.gpus for o in fast} == {o.gpus for o in cheap}
    assert fast[0].hours <= cheap[0].hours
    assert all(cheap[0].gpu_hours <= o.gpu_hours for o in cheap)
    if price is not None:
        assert all(o.cost is not None for o in cheap)
        costs = [o.cost for o in cheap]
        assert costs == sorted(costs)  # type: ignore[type-var]


def test_deadline_keeps_only_options_in_time() -> None:
    every = size_for_tokens(GPT13, A100, TOKENS, objective="cost", max_gpus=256)
    deadline = sorted(o.hours for o in every)[len(every) // 2]
    kept = size_for_tokens(
        GPT13, A100, TOKENS, objective="cost", max_gpus=256, deadline_hours=deadline
    )
    assert kept and all(o.hours <= deadline for o in kept)
    assert {o.gpus for o in kept} == {o.gpus for o in every if o.hours <= deadline}
    assert all(kept[0].gpu_hours <= o.gpu_hours for o in kept)
    fastest = min(o.hours for o in every)
    with pytest.raises(PlannerError, match="fastest") as err:
        size_for_tokens(GPT13, A100, TOKENS, max_gpus=256, deadline_hours=fastest / 2)
    assert err.value.field == "deadline_hours"


def test_nothing_fits_says_the_smallest_count() -> None:
    big = preset("gpt3-175b")
    with pytest.raises(PlannerError, match="smallest count that fits is") as err:
        size_for_tokens(big, A100, TOKENS, max_gpus=4)
    assert err.value.field == "max_gpus"
    smallest = int(err.value.message.split("fits is ")[1].split(";")[0])
    options = size_for_tokens(big, A100, TOKENS, max_gpus=smallest)
    assert min(o.gpus for o in options) == smallest


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("tokens", {"tokens": 0}),
        ("tokens", {"tokens": -1.0}),
        ("tokens", {"tokens": math.nan}),
        ("tokens", {"tokens": math.inf}),
        ("tokens", {"tokens": "many"}),
        ("max_gpus", {"max_gpus": 0}),
        ("max_gpus", {"max_gpus": 2.5}),
        ("max_gpus", {"max_gpus": True}),
        ("price_per_gpu_hour", {"price_per_gpu_hour": -1.0}),
        ("price_per_gpu_hour", {"price_per_gpu_hour": math.nan}),
        ("objective", {"objective": "speed"}),
        ("nodes_of", {"nodes_of": 0}),
        ("deadline_hours", {"deadline_hours": 0}),
        # absurd but finite: refused, not printed as 100-digit hours
        ("tokens", {"tokens": 1e308}),
        ("price_per_gpu_hour", {"price_per_gpu_hour": 1e300}),
        ("deadline_hours", {"deadline_hours": 1e12}),
    ],
)
def test_bad_input_names_the_field(field: str, kwargs: dict[str, object]) -> None:
    args: dict[str, object] = {"tokens": TOKENS, "max_gpus": 16, **kwargs}
    tokens = args.pop("tokens")
    with pytest.raises(PlannerError) as err:
        size_for_tokens(SMALL, A100, tokens, **args)  # type: ignore[arg-type]
    assert err.value.field == field


def test_option_is_frozen() -> None:
    option = size_for_tokens(SMALL, A100, 1e9, max_gpus=8)[0]
    assert isinstance(option, SizingOption)
    with pytest.raises(AttributeError):
        option.gpus = 1  # type: ignore[misc]


def test_trillion_parameter_model_sizes_within_the_bound() -> None:
    # Speed is measured by bench/planner.py, not asserted here.
    model = preset("sc21-1008.0b")
    options = size_for_tokens(model, A100, 450e9, objective="cost", max_gpus=3072)
    assert options and max(o.gpus for o in options) <= 3072
    assert all(o.gpus % 8 == 0 for o in options)
