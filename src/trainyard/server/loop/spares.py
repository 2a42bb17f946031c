"""Which nodes are hot spares this round (`trainyard up --spares N`).

Up to N nodes are kept idle for jobs recovering from a failure (`core/spares.py` gives them
the spares first; no other job is placed there). A spare is a node that is schedulable,
healthy with every device healthy, and that no job holds a device on. Those already spare
in the last round stay spare while they qualify (a stable pool: the operator sees the same
names), and the pool is topped up from the other idle nodes, last by name first (the
scheduler fills nodes from the first by name, so the last ones are the likeliest to stay
idle). A spare that a recovering job took is no longer idle: the next idle node replaces it.
When fewer than N nodes are idle, the pool is smaller until capacity frees up. The pool is
stored on the nodes' rows when it changes (`Spares.store`), for operators to see.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from sqlalchemy import update
from sqlalchemy.orm import Session

from trainyard import core
from trainyard.server.db import Node as NodeRow


class Spares:
    """The pool of hot spares across rounds (the platform keeps one)."""

    def __init__(self, count: int = 0) -> None:
        self.count = count
        self.names: tuple[str, ...] = ()  # the spares of the last round
        self._stored: tuple[str, ...] | None = None  # what the nodes' rows say (None: unknown)

    def mark(self, nodes: tuple[core.Node, ...], busy: set[str]) -> tuple[core.Node, ...]:
        """`nodes` with this round's spares marked; `busy`: nodes a job holds devices on."""
        if self.count <= 0:
            return nodes
        idle = [
            n.name
            for n in nodes
            if n.schedulable and n.gpus and not n.unavailable and n.name not in busy
        ]
        kept = [name for name in self.names if name in idle][: self.count]
        for name in reversed(idle):
            if len(kept) >= self.count:
                break
            if name not in kept:
                kept.append(name)
        self.names = tuple(sorted(kept))
        chosen = set(kept)
        return tuple(replace(n, spare=True) if n.name in chosen else n for n in nodes)

    def store(self, sessions: Callable[[], Session]) -> None:
        """The spares on the nodes' rows (`Node.spare`) when they changed, so that `trainyard
        nodes` and `admin node list` show them (an outside review found them named only in
        pending reasons); the first call also clears those a previous server left."""
        if self.names == self._stored:
            return
        with sessions() as s:
            s.execute(update(NodeRow).values(spare=NodeRow.name.in_(self.names)))
            s.commit()
        self._stored = self.names
