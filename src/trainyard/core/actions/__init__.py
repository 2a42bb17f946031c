"""The cycle's actions, in order of disruption; importing this package registers them.

allocate -> backfill -> resize (elastic jobs) -> reclaim -> preempt (or las_preempt). Each
works through the cycle's `Statement`.
"""

from trainyard.core.actions import allocate, backfill, las_preempt, preempt, reclaim, resize

__all__ = ["allocate", "backfill", "las_preempt", "preempt", "reclaim", "resize"]
