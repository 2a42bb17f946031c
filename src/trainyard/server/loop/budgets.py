"""Budgets: a tenant that has used its GPU-hours for the period starts no new work.

`trainyard admin tenant budget NAME --gpu-hours H --period 30d` gives a tenant H GPU-hours
per rolling period. Its usage is the accounting's (`services/usage.py`: every run interval,
open ones of running jobs included, inside [now - period, now)). While it is at or above the
budget, its pending jobs are left out of the scheduling round with the reason
`budget: tenant T used U of its H GPU-hours in the last P; new work waits until ...` (jobs
already running go on: a budget holds new work, it does not kill; an elastic one may shrink
but not grow, `scheduling.load_snapshot`). As old intervals leave
the window, usage falls and the jobs start again. Recomputed at most every `refresh_s`.
"""

from __future__ import annotations

import math

from sqlalchemy import select
from sqlalchemy.orm import Session

from trainyard.accounting import overlap
from trainyard.server.db import Tenant
from trainyard.server.services.usage import intervals

DEFAULT_PERIOD_S = 30 * 86_400.0


class Budgets:
    def __init__(self, refresh_s: float = 10.0) -> None:
        self.refresh_s = refresh_s
        self._over: dict[int, str] = {}
        self._at = -math.inf

    def over(self, session: Session, now: float) -> dict[int, str]:
        """Tenant id -> the reason its new work waits, for every tenant over its budget."""
        if now - self._at < self.refresh_s:
            return self._over
        out: dict[int, str] = {}
        query = select(Tenant).where(Tenant.budget_gpu_hours.is_not(None))
        for tenant in session.scalars(query):
            assert tenant.budget_gpu_hours is not None
            period = tenant.budget_period_s or DEFAULT_PERIOD_S
            since = now - period
            spans = intervals(session, tenant_id=tenant.id, since=since, until=now, now=now)
            used = sum(iv.gpus * overlap(iv.start, iv.end, since, now) for iv in spans) / 3600.0
            if used >= tenant.budget_gpu_hours:
                out[tenant.id] = (
                    f"budget: tenant {tenant.name} used {used:.2f} of its "
                    f"{tenant.budget_gpu_hours:g} GPU-hours in the last {_days(period)}; new "
                    "work waits until older use leaves the window (an admin may raise it: "
                    f"trainyard admin tenant budget {tenant.name} --gpu-hours N)"
                )
        self._over, self._at = out, now
        return out


def _days(seconds: float) -> str:
    days = seconds / 86_400.0
    return f"{days:g} days" if days >= 1 else f"{seconds / 3600.0:g} hours"
