"""`bench/pollux_held.py` (issue 13's diagnostic of idle GPUs beside held elastic jobs): its
rules are the ones the resize action's notes name, so a reworded note cannot fall into
"other" unnoticed."""

from __future__ import annotations

from bench_scripts import load
from scenarios.harness import load_cases, run_case


def test_each_note_of_the_elastic_cases_maps_to_its_rule() -> None:
    held = load("pollux_held")
    expected = {
        "elastic::no-move-that-a-restart-would-not-repay": {"e": "restart"},
        "elastic::no-resize-below-the-gain-threshold": {"e": "no_gain"},
        "elastic::a-job-not-grown-is-told-why": {"young": "hold"},
    }
    seen = {}
    for case in load_cases():
        if case.name in expected:
            decision = run_case(case)[-1]
            seen[case.name] = {j: held.rule_of(n.reason) for j, n in decision.not_grown.items()}
    assert seen == expected
    assert held.rule_of("+4% goodput at 8 GPUs is below the 10% a resize must bring") == (
        "min_gain"
    )
