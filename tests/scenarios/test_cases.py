"""Every case in cases/*.yaml: run it, check the invariants and its expectations."""

from __future__ import annotations

import pytest

from .harness import Case, load_cases, run_case

CASES = load_cases()


def test_cases_are_unique_and_explained() -> None:
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))
    assert all(c.rule for c in CASES), "every case says which rule it checks"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(case: Case) -> None:
    run_case(case)
