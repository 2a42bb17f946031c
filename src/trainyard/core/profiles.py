"""Built-in scheduling profiles, registered by name.

- `fifo`: one global line by submission time; the head blocks everyone behind it (the
  classic baseline; no backfill, no preemption).
- `priority`: priority order per queue, greedy (skips jobs that do not fit), preemption.
- `las`: Tiresias-style least-attained-service order, greedy, no preemption.
- `tiresias`: Tiresias (Gu et al., NSDI'19) as the Pollux artifact runs it: two LAS levels split
  at 16 GPU-hours, FIFO inside a level, greedy, and jobs of a more served level preempted for
  those of a less served one (`las_preempt`); worst-fit placement (the emptiest node first,
  on the fewest nodes), as that artifact places jobs.
- `drf`: dominant-resource fair share across queues, FIFO inside a queue, backfill, reclaim.
- `default`: our best. Across queues the least served next job first (Tiresias's LAS levels,
  between tenants too; a queue holding no GPU counts as least served), DRF among queues
  whose next jobs are equally served, guaranteed
  quotas and reclaim (`las_drf`); inside a queue priority, then least attained service;
  backfill with a reservation for the head of the line (also without run-time estimates,
  for a head that fits one node and has waited 15 minutes, and, against starvation, for one
  spanning nodes that has waited a day in all); priority preemption, then
  least-attained-service preemption (Tiresias' rule); topology- and fragmentation-aware
  placement, with delay scheduling: a job that fits one node waits up to 15 minutes for one
  before spanning nodes (cross-node gangs run slower; `docs/benchmarks.md` shows the effect
  on the Pollux workloads).
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
        name="tiresias",
        description="Tiresias 2-level LAS (16 GPU-hour threshold), greedy, LAS preemption",
        actions=("allocate", "las_preempt"),
        job_order="las",
        queue_order="global",
        scorers=(("topology", 4.0), ("spread", 1.0)),
        las_thresholds=(57_600.0,),
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
        description="LAS then DRF across queues, quotas + reclaim, priority then LAS, "
        "backfill, elastic resize by goodput, preemption",
        actions=("allocate", "backfill", "resize", "reclaim", "preempt", "las_preempt"),
        job_order="default",
        queue_order="las_drf",
        locality_wait_s=900.0,
        reserve_unknown_after_s=900.0,
        reserve_gang_after_s=86_400.0,
    ),
)

for _p in _BUILTIN:
    PROFILES.register(_p.name, _p)
