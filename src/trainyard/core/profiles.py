"""Built-in scheduling profiles, registered by name.

- `fifo`: one global line by submission time; the head blocks everyone behind it (the
  classic baseline; no backfill, no preemption).
- `priority`: priority order per queue, greedy (skips jobs that do not fit), preemption.
- `las`: Tiresias-style least-attained-service order, greedy, no preemption.
- `drf`: dominant-resource fair share across queues, FIFO inside a queue, backfill, reclaim.
- `default`: our best: DRF across queues with guaranteed quotas and reclaim; inside a queue
  priority, then least attained service; backfill with a reservation for the head of the
  line; priority preemption; topology- and fragmentation-aware placement.
"""

from __future__ import annotations

from trainyard.core.framework import PROFILES, Profile

_BUILTIN = (
    Profile(
        name="fifo",
        description="global FIFO; the head of the line blocks (baseline)",
        actions=("allocate",),
        job_order="fifo",
        queue_order="global",
        strict_order=True,
    ),
    Profile(
        name="priority",
        description="priority order, greedy, priority preemption",
        actions=("allocate", "preempt"),
        job_order="priority",
        queue_order="global",
    ),
    Profile(
        name="las",
        description="Tiresias-style least attained service, greedy",
        actions=("allocate",),
        job_order="las",
        queue_order="global",
    ),
    Profile(
        name="drf",
        description="dominant-resource fair share across queues, FIFO within, backfill, reclaim",
        actions=("allocate", "backfill", "reclaim"),
        job_order="fifo",
        queue_order="drf",
    ),
    Profile(
        name="default",
        description="DRF + quotas + reclaim, priority then LAS, backfill, preemption",
        actions=("allocate", "backfill", "reclaim", "preempt"),
        job_order="default",
        queue_order="drf",
    ),
)

for _p in _BUILTIN:
    PROFILES.register(_p.name, _p)
