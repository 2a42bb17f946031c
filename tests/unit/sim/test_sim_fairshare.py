"""The simulator's fair-share history (`sim/fairshare.py`) uses the server's arithmetic
(`trainyard.accounting`): a queue that ran the whole cluster for one half-life holds half of
the decayed capacity, its parent includes it, and an open interval counts as it runs."""

from __future__ import annotations

import pytest

from trainyard.core.types import Queue
from trainyard.sim.fairshare import SimFairShare

DAY = 86_400.0


def test_usage_shares_match_the_servers_arithmetic() -> None:
    queues = (Queue("root"), Queue("a", parent="root"), Queue("b", parent="root"))
    fair = SimFairShare(queues, total_gpus=8, half_life_s=DAY)
    fair.add("a", 0.0, DAY, 8)
    shares = {q.name: q.usage for q in fair.queues(DAY, queues, [])}
    assert shares == pytest.approx({"root": 0.5, "a": 0.5, "b": 0.0})
    later = {q.name: q.usage for q in fair.queues(2 * DAY, queues, [("b", DAY, 8)])}
    assert later["a"] == pytest.approx(0.25)
    assert later["b"] == pytest.approx(0.5)
    assert later["root"] == pytest.approx(0.75)
