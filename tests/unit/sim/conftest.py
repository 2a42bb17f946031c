"""Every decision the simulator makes in these tests keeps the booking contract."""

from collections.abc import Callable
from typing import Any

import pytest

from trainyard.sim import engine


@pytest.fixture(autouse=True)
def _audit_simulated_cycles(audited_cycles: Callable[[Any], None]) -> None:
    audited_cycles(engine)
