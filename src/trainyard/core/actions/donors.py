"""Which running elastic jobs a resize may restart, and how one shrinks in place (the resize
action's passes, `actions/resize.py`): `donors` (jobs that may be restarted now),
`restarting` (jobs already restarting at a new size in this cycle: resizing one once more
costs no further restart, `Statement.resize_again`) and `shrink` (a job keeps a subset of its
own devices, whole nodes first)."""

from __future__ import annotations

from trainyard.core.cycle import Cycle
from trainyard.core.placement import job_demand
from trainyard.core.state import Alloc
from trainyard.core.types import Job

__all__ = ["bounds", "donors", "restarting", "shrink"]


def bounds(job: Job) -> tuple[int, int]:
    lo = job.min_gpus if job.min_gpus is not None else job.gpus
    hi = job.max_gpus if job.max_gpus is not None else job.gpus
    return max(1, lo), max(1, hi)


def _reserved(cycle: Cycle) -> dict[int, int]:
    """Node -> devices some reservation of this cycle targets."""
    out: dict[int, int] = {}
    for h in cycle.holds:
        for n, mask in h.target:
            out[n] = out.get(n, 0) | mask
    return out


def donors(cycle: Cycle) -> list[Alloc]:
    """Running elastic jobs a resize may restart. Not one whose devices a reservation waits
    for (a restart would push back the end the reservation counts on), nor one on a device
    that may not be used now (a drained node, a failed GPU: it would restart there)."""
    stmt = cycle.stmt
    reserved = _reserved(cycle)
    usable = cycle.layout.usable_mask
    return [
        a
        for a in cycle.state.allocs.values()
        if a.queue >= 0
        and a.job.is_elastic
        and not (reserved and any(reserved.get(n, 0) & mask for n, mask, _c, _m in a.parts))
        and not any(mask & ~usable[n] for n, mask, _c, _m in a.parts)
        and a.job.preemptible  # a resize stops the job: the same protections as an eviction
        and cycle.now - a.started_at >= a.job.min_runtime
        and not a.placed_now
        and a.job.id not in stmt.resized
        and a.job.id not in stmt.evicted
    ]


def restarting(cycle: Cycle) -> list[Alloc]:
    """Elastic jobs resized earlier in this cycle, on their new placements: another size
    change costs them no further restart (the rebalance may move them). Not one evicted
    since, nor one on devices a reservation targets or that may not be used now (as
    `donors`)."""
    stmt = cycle.stmt
    allocs = cycle.state.allocs
    reserved = _reserved(cycle)
    usable = cycle.layout.usable_mask
    out = []
    for jid in stmt.resized:
        a = allocs.get(jid)
        if (
            a is not None
            and a.placed_now
            and a.queue >= 0
            and a.job.is_elastic
            and a.job.preemptible
            and jid not in stmt.evicted
            and not (reserved and any(reserved.get(n, 0) & m for n, m, _c, _m in a.parts))
            and not any(m & ~usable[n] for n, m, _c, _m in a.parts)
        ):
            out.append(a)
    return out


def shrink(cycle: Cycle, a: Alloc, gpus: int, reason: str) -> None:
    """Restart `a`'s job on `gpus` of its own devices: whole nodes kept first (those where it
    holds most), so that what it frees is as whole as possible. A job already restarting
    (`restarting`) is resized once more, still one restart."""
    stmt = cycle.stmt
    if a.placed_now and a.job.id in stmt.resized:
        old = stmt.resize_again(a.job.id, reason)
    else:
        old = stmt.resize(a.job.id, reason)
    job = old.job.with_gpus(gpus)
    cpu, mem = job_demand(job)
    parts: list[tuple[int, int, float, float]] = []
    left = gpus
    for n, mask, _c, _m in sorted(old.parts, key=lambda p: -p[1].bit_count()):
        if left <= 0:
            break
        keep = 0
        bits = mask
        while bits and keep.bit_count() < left:
            low = bits & -bits
            keep |= low
            bits ^= low
        left -= keep.bit_count()
        k = keep.bit_count()
        parts.append((n, keep, cpu * k, mem * k))
    end = old.expected_end
    alloc = Alloc(job, old.queue, old.cls, parts, cycle.now, True, end, gpus)
    cycle.stmt.allocate(alloc, "resize")
