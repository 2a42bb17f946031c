"""Shared test settings: bounded hypothesis profiles (pick one with HYPOTHESIS_PROFILE), and
`audited_cycles`, which checks every decision a shell makes against the booking contract."""

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from trainyard.core.audit import booking_conflicts

settings.register_profile(
    "default",
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("thorough", parent=settings.get_profile("default"), max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture
def audited_cycles(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Any], None]]:
    """`audited_cycles(module)` wraps `module.run_cycle` so that every decision made through
    it during the test is checked with `core.audit.booking_conflicts` (no device, CPU or
    memory serves two live jobs, evicted jobs live until they stop); a breach fails the test
    at teardown, also when the cycle ran in another thread of the process."""
    breaches: list[str] = []

    def install(module: Any) -> None:
        original = module.run_cycle

        def checked(snapshot: Any, profile: Any = "default", layout: Any = None) -> Any:
            decision = original(snapshot, profile, layout)
            breaches.extend(booking_conflicts(snapshot, decision))
            return decision

        monkeypatch.setattr(module, "run_cycle", checked)

    yield install
    assert not breaches, f"decisions broke the booking contract: {breaches[:5]}"
