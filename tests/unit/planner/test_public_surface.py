"""Each planner module written here declares an explicit `__all__` whose names exist."""

from __future__ import annotations

import importlib

import pytest

MODULES = [
    "comm",
    "errors",
    "hardware",
    "launch_nccl",
    "layout",
    "memory",
    "model",
    "offload",
    "rows",
    "search",
]


@pytest.mark.parametrize("name", MODULES)
def test_all_is_explicit_and_resolves(name: str) -> None:
    module = importlib.import_module(f"trainyard.planner.{name}")
    exported = module.__all__
    for symbol in exported:
        assert hasattr(module, symbol), f"{name}.{symbol}"
