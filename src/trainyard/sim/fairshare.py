"""The fair-share history in the simulator: each queue's decayed GPU usage, as the server
keeps it (`server/loop/fairshare.py`), with the same functions (`trainyard.accounting`).

Off unless `SimOptions.fairshare_half_life_s` is set (`trainyard simulate
--fairshare-half-life DAYS`): the recorded simulator figures were measured without history.
Every run interval is added when the job stops; running jobs add their open interval at
each round; a queue's usage includes its descendants'.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from trainyard.accounting import decayed, usage_share, with_ancestors
from trainyard.core.types import Queue


class SimFairShare:
    def __init__(self, queues: tuple[Queue, ...], total_gpus: int, half_life_s: float) -> None:
        self.half_life_s = half_life_s
        self.total_gpus = total_gpus
        self.parents = {q.name: q.parent for q in queues}
        self.closed: dict[str, float] = {q.name: 0.0 for q in queues}  # decayed at `self.at`
        self.at = 0.0

    def _age(self, t: float) -> None:
        if t > self.at:
            factor = 2.0 ** (-(t - self.at) / self.half_life_s)
            for name in self.closed:
                self.closed[name] *= factor
            self.at = t

    def add(self, queue: str, start: float, end: float, gpus: int) -> None:
        """A run interval that ended at `end` (the simulator's clock never goes back)."""
        self._age(end)
        self.closed[queue] += decayed([(start, end, gpus)], self.at, self.half_life_s)

    def queues(
        self, t: float, queues: tuple[Queue, ...], running: Iterable[tuple[str, float, int]]
    ) -> tuple[Queue, ...]:
        """`queues` with `usage` set at time `t`; `running` holds (queue, started, gpus)."""
        self._age(t)
        own = dict(self.closed)
        for queue, started, gpus in running:
            own[queue] += decayed([(started, t, gpus)], t, self.half_life_s)
        total = with_ancestors(own, self.parents)
        return tuple(
            replace(q, usage=usage_share(total[q.name], self.total_gpus, self.half_life_s))
            for q in queues
        )
