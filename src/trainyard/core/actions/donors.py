"""Which running elastic jobs a resize may restart, and how one shrinks in place (the resize
action's passes, `actions/resize.py`): `donors` (jobs that may be restarted now),
`restarting` (jobs already restarting at a new size in this cycle: resizing one once more
costs no further restart, `Statement.resize`) and `shrink` (a job keeps a subset of its own
devices, whole nodes first)."""

from __future__ import annotations

from collections.abc import Callable

from trainyard.core.cycle import Cycle
from trainyard.core.placement import job_demand
from trainyard.core.state import Alloc

__all__ = ["donors", "restarting", "shrink"]


def _may_restart(cycle: Cycle, skip: str = "") -> Callable[[Alloc], bool]:
    """Whether a resize may restart a job's run (`donors`, `restarting`): an elastic job
    that may be stopped (`preemptible`), not evicted in this cycle, not on devices a
    reservation waits for (a restart would push back the end the reservation counts on;
    but for `skip`'s own: the job the GPUs are freed for), nor on a device that may not be
    used now (a drained node, a failed GPU: it would restart there)."""
    evicted = cycle.stmt.evicted
    usable = cycle.layout.usable_mask
    reserved: dict[int, int] = {}  # node -> devices some reservation of this cycle targets
    for h in cycle.holds:
        if h.job.id == skip:
            continue
        for n, mask in h.target:
            reserved[n] = reserved.get(n, 0) | mask

    def may(a: Alloc) -> bool:
        return (
            a.queue >= 0
            and a.job.is_elastic
            and a.job.preemptible  # a resize stops the job: the same protections as an eviction
            and a.job.id not in evicted
            and not (reserved and any(reserved.get(n, 0) & m for n, m, _c, _m in a.parts))
            and not any(m & ~usable[n] for n, m, _c, _m in a.parts)
        )

    return may


def donors(cycle: Cycle, skip: str = "") -> list[Alloc]:
    """Running elastic jobs a resize may restart now (`_may_restart`): run past their
    `min_runtime`, and not placed or resized in this cycle (`skip`: a waiting job whose own
    reservation is not in the way of the GPUs freed for it)."""
    may = _may_restart(cycle, skip)
    resized = cycle.stmt.resized
    return [
        a
        for a in cycle.state.allocs.values()
        if not a.placed_now
        and a.job.id not in resized
        and cycle.now - a.started_at >= a.job.min_runtime
        and may(a)
    ]


def restarting(cycle: Cycle) -> list[Alloc]:
    """Elastic jobs resized earlier in this cycle, on their new placements: another size
    change costs them no further restart (the rebalance may move them). As `donors`
    otherwise (`_may_restart`)."""
    if not cycle.stmt.resized:
        return []  # the common case: no reservation map to build
    may = _may_restart(cycle)
    allocs = cycle.state.allocs
    out = []
    for jid in cycle.stmt.resized:
        a = allocs.get(jid)
        if a is not None and a.placed_now and may(a):
            out.append(a)
    return out


def shrink(
    cycle: Cycle, a: Alloc, gpus: int, reason: str, release: frozenset[int] = frozenset()
) -> None:
    """Restart `a`'s job on `gpus` of its own devices: whole nodes kept first (those where it
    holds most), so that what it frees is as whole as possible; its devices on the nodes
    `release` are given up first. A job already restarting (`restarting`) is resized once
    more, still one restart (`Statement.resize`)."""
    old = cycle.stmt.resize(a.job.id, reason)
    job = old.job.with_gpus(gpus)
    cpu, mem = job_demand(job)
    parts: list[tuple[int, int, float, float]] = []
    left = gpus
    for n, mask, _c, _m in sorted(old.parts, key=lambda p: (p[0] in release, -p[1].bit_count())):
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
