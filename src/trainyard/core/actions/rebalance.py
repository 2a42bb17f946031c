"""Rebalancing elastic jobs: the sizes the running elastic jobs should have, and the moves there.

Growth into idle GPUs (`actions/resize.py`) cannot undo an allocation that arrivals made
wasteful: a job that grew into a quiet cluster keeps its GPUs while jobs that came later run
at their minimum. Rebalancing corrects that. For each device class it shares the GPUs the
movable elastic jobs hold, plus the class's idle ones, so as to maximise

    sum over jobs j of  -w_j / s_j(k_j)

where s_j(k) is job j's speedup on k GPUs over one GPU (its goodput model, packed onto
whole nodes) and the weight w_j favours the jobs likely to finish soonest. The -1/s form is
Pollux's power mean with exponent -1 (Qiao et al., OSDI'21, section 4.2): it is the sum of
the jobs' remaining times when their remaining work is equal, so a GPU goes where it
shortens a job's run the most relative to its length. The weights (`weight`):
- a job that says how much it has left (`Elastic.remaining`, in samples) has
  w = (T1 / 1 h) ^ -REMAINING_EXPONENT, T1 the hours it would still need on one GPU: jobs
  nearer their end get more, as in the optimal sharing of parallelisable jobs of known sizes
  (heSRPT, Berg et al., SIGMETRICS'20: smaller jobs get larger shares, but not all of it,
  since each GPU added helps a job less). When every job being rebalanced says so, only
  the order of these weights is kept (the rank factor below replaces them): in heSRPT's
  optimum the shares depend on the order of the sizes, not on how far apart they are,
  and measured so the 8 Pollux workloads' mean JCT fell by about 1% at every load;
- any other job has w = 1 / (1 + attained / LAS_SCALE): less served, likely shorter (the
  least-attained-service rule of Tiresias, Gu et al., NSDI'19, which is also the order in
  which Pollux's search admits jobs). Both are 1 for a job an hour from its end or new.
- Each weight is then multiplied by (or, as above, replaced by) i ^ (p(1+p)/(1-p)), i the
  job's rank among the jobs
  being rebalanced counted from the one with the most left (the number of them with a
  weight at most its own; `rank_weights`). In heSRPT's optimum a job's share depends on
  its rank, not on how much smaller it is: with speedup k^p, the i-th largest of m jobs
  gets (i/m)^(1/(1-p)) - ((i-1)/m)^(1/(1-p)) of the GPUs, a share growing as i^(p/(1-p)).
  The sum of -w/s gives k proportional to w^(1/(1+p)), so the weight that reproduces it
  is i^(p(1+p)/(1-p)). p is measured, not assumed (`speedup_exponent`): the mean over the
  jobs of log2(goodput on twice its GPUs / goodput now), each clamped to
  [MIN_SPEEDUP_EXPONENT, MAX_SPEEDUP_EXPONENT]; the cap keeps the exponent finite (heSRPT
  becomes strict SRPT as p -> 1, which one over-optimistic model would impose on all).
  That needs the ranks to be true: when any job being rebalanced does not say what it has
  left (its rank is LAS's guess), p stays 1/2 (exponent 1.5).
  Finishing a job sooner shortens the wait of every job behind it, which the size factor
  alone undervalues when jobs' sizes are close.
- Between queues, each weight is then multiplied by the queue's fair share over its jobs
  being rebalanced, to the power 1 + p (`queue_shares`): the queues split the GPUs the
  movable jobs hold (and the idle ones) by their weights, and like jobs split their
  queue's part.

Every job keeps at least its minimum, raised for the jobs of a queue below its guarantee by
what the guarantee owes (`guarantee_floors`); the objective is separable and each
term concave in the job's speedup, so GPUs are handed out greedily by the best gain per GPU
(a heap: one job's next step is re-scored per step).

Elastic jobs placed earlier in the same cycle (not started yet) take part too, with no hold
and never below the size they were placed at: starting larger costs no restart.

Moves. A job is moved to its target only when the move is worth its restarts: a job that
grows must gain at least `Profile.resize_min_gain` of its goodput, a job moves at all only
after it has run `Profile.resize_hold_s` since its last (re)start, and the move as a whole
must pay (`move_delay`): over `Profile.resize_horizon_s`, or the time the allocation has
lasted when longer and every job being rebalanced says what it has left
(`moves.move_horizon`), the weighted time the growing jobs
gain must exceed what the shrunk ones lose plus `Profile.resize_restart_s` for every job it
restarts (the growing jobs with the smallest gains are left out until it does), and then
each growing job must repay its own restart and the shrinks made for it: smallest gain first,
a job the move is no worse without is left out (`actions/moves.py`). Counting
the shrunk jobs' restarts matters: a rebalance that grows one job restarts several, and
arrivals every few minutes undo its gains before they repay them. Jobs shrink in place (they keep a
subset of their devices) only as far as the growing jobs need, the cheapest loss per GPU
first, or all of it from one job when that delays the move less (every job shrunk restarts),
never below their target or minimum, and a queue gives only what it holds above its
guarantee unless every growing job is of that queue. While a queue owed its guarantee has a
job waiting, nothing is rebalanced (reclaim acts first). Targets depend only on the
allocation, the models and the slowly growing attained service, so without arrivals the
moves converge and stop.
"""

from __future__ import annotations

import bisect
import heapq
import math
from dataclasses import dataclass
from typing import Final

from trainyard.core.goodput import GoodputModel, packed_nodes
from trainyard.core.queues import QueueIndex
from trainyard.core.state import Alloc
from trainyard.core.types import Job

__all__ = [
    "DEFAULT_SPEEDUP_EXPONENT",
    "LAS_SCALE",
    "MAX_SPEEDUP_EXPONENT",
    "MIN_QUEUE_FACTOR",
    "MIN_SPEEDUP_EXPONENT",
    "REMAINING_EXPONENT",
    "Entry",
    "guarantee_floors",
    "move_delay",
    "plan_targets",
    "queue_factors",
    "queue_shares",
    "rank_weights",
    "reports_left",
    "seconds_left",
    "sizes_above",
    "speedup_exponent",
    "weight",
]

LAS_SCALE: Final = 14_400.0  # GPU-seconds of service that halve a job's weight
# Its magnitude counts only when some job being rebalanced does not say what it has left
# (`rank_weights`); then it sets how a known time left compares with LAS's guess.
REMAINING_EXPONENT: Final = 0.5
# The speedup exponent p of heSRPT's rank weights (module docstring), per job: a job whose
# goodput does not grow counts as MIN, one that grows by 2^0.7 or more as MAX (rank exponent
# at most 0.7 x 1.7 / 0.3 = 4). Measured on the Pollux workloads (docs/benchmarks.md): caps
# 0.6 / 0.7 / 0.8 give 0.873 / 0.870 / 0.872 x Pollux at load 1.0, 0.914 / 0.916 / 0.931 at
# 0.5 (0.8 leaves one workload above Pollux there), 0.852 / 0.843 / 0.848 at 1.5.
MIN_SPEEDUP_EXPONENT: Final = 0.1
MAX_SPEEDUP_EXPONENT: Final = 0.7
DEFAULT_SPEEDUP_EXPONENT: Final = 0.5  # when no job's goodput can be read
MIN_QUEUE_FACTOR: Final = 1e-12  # a queue's factor stays positive: a job is never free to shrink
_MIN_LEFT_H: Final = 1.0 / 60.0  # a job a minute from its end weighs no more than that


@dataclass(slots=True)
class Entry:
    """One movable elastic job in the target computation."""

    alloc: Alloc
    lo: int
    hi: int
    weight: float
    model: GoodputModel
    one: float  # goodput on one GPU
    target: int = 0
    owed: int = 0  # GPUs of growth its queue's guarantee entitles it to (`guarantee_floors`)

    def inverse(self, k: int, per_node: int) -> float:
        """1 / speedup on k GPUs packed onto nodes of `per_node` GPUs."""
        gp = self.model.goodput(k, packed_nodes(k, per_node))
        return self.one / gp if gp > 0.0 else math.inf


def weight(job: Job, one: float) -> float:
    """The rebalance weight of `job`, whose goodput on one GPU is `one` base-batch steps per
    second (see the module docstring)."""
    left = seconds_left(job, one)
    if left is not None:
        return float(max(left / 3600.0, _MIN_LEFT_H) ** -REMAINING_EXPONENT)
    return 1.0 / (1.0 + max(0.0, job.attained_service) / LAS_SCALE)


def seconds_left(job: Job, goodput: float) -> float | None:
    """Seconds `job` still needs at `goodput` base-batch steps per second, from the samples
    it says it has left; None when it does not say (or `goodput` is not positive)."""
    info = job.elastic
    if info is None or not reports_left(job) or goodput <= 0.0:
        return None
    return info.remaining / info.batch / goodput


def reports_left(job: Job) -> bool:
    """Does `job` say how much work it has left (`Elastic.remaining`)?"""
    info = job.elastic
    return info is not None and info.remaining > 0.0 and info.batch > 0


def speedup_exponent(entries: list[Entry], per_node: int) -> float:
    """The entries' mean speedup exponent: per job, log2 of its goodput on twice its GPUs
    (packed) over its goodput now, clamped to [MIN_SPEEDUP_EXPONENT, MAX_SPEEDUP_EXPONENT].
    Only when every entry says how much work it has left: ranks by attained service (LAS)
    are a guess at the order of sizes, and sharpening a guess towards SRPT costs more than
    it gains (docs/benchmarks.md), so they keep the default exponent (1/2)."""
    if not all(reports_left(e.alloc.job) for e in entries):
        return DEFAULT_SPEEDUP_EXPONENT
    total, n = 0.0, 0
    for e in entries:
        k = max(e.alloc.gpus, 1)
        now = e.model.goodput(k, packed_nodes(k, per_node))
        twice = e.model.goodput(2 * k, packed_nodes(2 * k, per_node))
        if now > 0.0 and twice > 0.0:
            p = math.log2(twice / now)
            total += min(max(p, MIN_SPEEDUP_EXPONENT), MAX_SPEEDUP_EXPONENT)
            n += 1
    return total / n if n else DEFAULT_SPEEDUP_EXPONENT


def rank_weights(entries: list[Entry], per_node: int) -> float:
    """Weigh each entry by its rank ^ (p(1+p)/(1-p)), p = `speedup_exponent`: the rank is the
    number of entries whose weight is at most its own (1 for the job with the most left; ties
    share the higher). When every entry says how much it has left the rank replaces the
    weight (heSRPT's shares depend on the order of the sizes alone); otherwise it multiplies
    it (LAS's guesses at the sizes keep their spread). Returns p."""
    p = speedup_exponent(entries, per_node)
    exponent = p * (1.0 + p) / (1.0 - p)
    ranked = sorted(e.weight for e in entries)
    known = all(reports_left(e.alloc.job) for e in entries)
    for e in entries:
        factor = bisect.bisect_right(ranked, e.weight) ** exponent
        e.weight = factor if known else e.weight * factor
    return p


def queue_factors(job_queues: list[int], queues: QueueIndex, p: float) -> dict[int, float]:
    """The factor each queue's jobs are weighed by (`queue_shares`), for jobs of the queues
    `job_queues` (one entry per job); empty when they are all of one queue."""
    jobs: dict[int, int] = {}
    for q in job_queues:
        jobs[q] = jobs.get(q, 0) + 1
    if len(jobs) < 2:
        return {}
    active: set[int] = set()
    for q in jobs:
        active.update(queues.path[q])
    own: dict[int, float] = {}  # weight of a queue's own jobs beside its active children
    kids_total: dict[int, float] = {}  # the weights of those children
    for q in jobs:
        kids = [queues.weight[k] for k in queues.children[q] if k in active]
        if kids:
            own[q], kids_total[q] = sum(kids) / len(kids), sum(kids)
    out: dict[int, float] = {}
    for q, n in jobs.items():
        s = own[q] / (own[q] + kids_total[q]) if q in own else 1.0
        for a in queues.path[q]:
            parent = queues.parent[a]
            group = queues.roots if parent < 0 else queues.children[parent]
            total = sum(queues.weight[b] for b in group if b in active) + own.get(parent, 0.0)
            s *= queues.weight[a] / total if total > 0.0 else 1.0
        out[q] = max((s / n) ** (1.0 + p), MIN_QUEUE_FACTOR)
    return out


def queue_shares(entries: list[Entry], queues: QueueIndex, p: float) -> None:
    """Weigh each entry by its queue's fair share of the GPUs being rebalanced, so that queue
    weights hold between tenants as they order rigid jobs (DRF): the share of a queue is the
    product, from its root down, of each queue's weight over the weights of its siblings
    that hold entries; a queue's own jobs, beside its children that hold entries, count as
    one more child weighing as their mean (so only the ratios of weights count); a job's
    factor is (share / jobs of its queue being rebalanced) ^ (1 + p), at least
    `MIN_QUEUE_FACTOR` (`queue_factors`). With speedups k^p the objective gives each job GPUs
    in proportion to its weight ^ 1 / (1 + p), so like jobs of one queue split that queue's
    share, and the queues split the GPUs by weight. Jobs of one queue alone are unchanged.
    Not counted: the GPUs a queue's rigid jobs hold; a queue's guarantee acts through
    `guarantee_floors` and the shrink rule (no queue is taken below its guarantee)."""
    factors = queue_factors([e.alloc.queue for e in entries], queues, p)
    if factors:
        for e in entries:
            e.weight *= factors[e.alloc.queue]


def guarantee_floors(entries: list[Entry], queues: QueueIndex) -> None:
    """Raise the minimum of the entries of queues below their guarantee (on their whole path,
    as reclaim counts it) by what the guarantee still owes them, as far as the other
    queues' entries hold GPUs above their own guarantees and minimums: a queue guaranteed 8
    whose elastic job runs at 2 (it started small, or its other jobs ended) beside a queue
    that borrows is owed 6 more, as a waiting job of its queue would reclaim them, however
    the weights split the rest (outside review 16, F5). Such a growth is `owed` and is made
    whether or not it repays its restarts (`actions/moves.py`). The queues furthest below
    their guarantee are served first; a growth counts against every queue on its path (a
    parent's guarantee is paid once, to its own jobs or its children's: outside review 17,
    F1); what the lenders hold is shared out as it goes, so the floors can be paid (F2);
    a queue's jobs share what it is owed evenly, within their maximums (F4). Between the
    jobs of one queue, and into idle GPUs, a guarantee owes nothing: the simulator
    guarantees a lone queue the whole cluster."""
    by_queue: dict[int, list[Entry]] = {}
    spare: dict[int, int] = {}  # GPUs each queue's entries could give above their minimum
    for e in entries:
        q = e.alloc.queue
        by_queue.setdefault(q, []).append(e)
        spare[q] = spare.get(q, 0) + max(0, e.alloc.gpus - e.lo)
    lend = {q: max(0, min(g, queues.over_guaranteed(q))) for q, g in spare.items()}
    pool = sum(lend.values())
    left = {a: queues.guaranteed[a] - queues.gpus[a] for q in by_queue for a in queues.path[q]}
    order = sorted(
        (q for q in by_queue if queues.guaranteed[q] > queues.gpus[q]),
        key=lambda q: (queues.gpus[q] / queues.guaranteed[q], q),
    )
    for q in order:
        owe = min(min(left[a] for a in queues.path[q]), pool - lend[q])
        if owe <= 0:
            continue
        jobs = sorted(by_queue[q], key=lambda e: (e.hi - e.alloc.gpus, e.alloc.job.id))
        given = 0
        for i, e in enumerate(jobs):  # water-filling: the tightest first, the rest evenly
            grow = min(e.hi - e.alloc.gpus, (owe - given) // (len(jobs) - i))
            if grow > 0:
                e.owed = grow
                e.lo = max(e.lo, e.alloc.gpus + grow)
                given += grow
        for a in queues.path[q]:
            left[a] -= given
        pool -= given


def move_delay(
    moves: list[tuple[Entry, int]], per_node: int, now: float, restart_s: float, horizon_s: float
) -> float:
    """Weighted seconds by which moving each entry's job to its new size delays its end, summed
    (negative: the move pays). A job restarted on k GPUs instead of its current size loses
    `restart_s` (nothing for one placed in this cycle, which has not started) and then runs at
    the goodput ratio for the horizon: `horizon_s`, or the time it has left when it says (its
    remaining samples at today's goodput), or its age when that is shorter and it does not.
    Each job's seconds count with its rebalance weight, so that a move is judged by the same
    priorities that set its targets."""
    total = 0.0
    for e, k in moves:
        a = e.alloc
        old = e.model.goodput(a.gpus, len(a.parts))
        new = e.model.goodput(k, packed_nodes(k, per_node))
        if old <= 0.0 or new <= 0.0:
            return math.inf
        left = seconds_left(a.job, old)
        if left is None:
            left = max(now - a.job.submit_time, 0.0)
        lost = 0.0 if a.placed_now else restart_s
        total += e.weight * (min(left, horizon_s) * (old / new - 1.0) + lost)
    return total


def sizes_above(now: int, top: int, per_node: int) -> list[int]:
    """Sizes to try above `now` up to `top`: every one within a node, then whole nodes, and
    `top` itself."""
    out = list(range(now + 1, min(top, per_node) + 1))
    k = (now // per_node + 1) * per_node if per_node else top
    while k <= top:
        if k > per_node and k not in out:
            out.append(k)
        k += per_node
    if top > now and top not in out:
        out.append(top)
    return out


def _next_step(e: Entry, budget: int, per_node: int) -> tuple[float, int] | None:
    """The best (gain per GPU, size) above `e.target` within `budget` more GPUs."""
    top = min(e.hi, e.target + budget)
    if top <= e.target:
        return None
    here = e.inverse(e.target, per_node)
    best: tuple[float, int] | None = None
    for k in sizes_above(e.target, top, per_node):
        gain = e.weight * (here - e.inverse(k, per_node)) / (k - e.target)
        if gain > 0.0 and (best is None or gain > best[0]):
            best = (gain, k)
    return best


def plan_targets(entries: list[Entry], free: int, per_node: int) -> None:
    """Set each entry's `target`: its minimum, then the greedy share of the rest (see the
    module docstring). `free` is the class's idle GPUs."""
    budget = free + sum(e.alloc.gpus - e.lo for e in entries)
    for e in entries:
        e.target = e.lo
    heap: list[tuple[float, int, int]] = []
    for i, e in enumerate(entries):
        step = _next_step(e, budget, per_node)
        if step is not None:
            heap.append((-step[0], i, step[1]))
    heapq.heapify(heap)
    while heap and budget > 0:
        _neg, i, k = heapq.heappop(heap)
        e = entries[i]
        if k - e.target > budget:  # the budget shrank since: score it again
            step = _next_step(e, budget, per_node)
            if step is not None:
                heapq.heappush(heap, (-step[0], i, step[1]))
            continue
        budget -= k - e.target
        e.target = k
        step = _next_step(e, budget, per_node)
        if step is not None:
            heapq.heappush(heap, (-step[0], i, step[1]))
