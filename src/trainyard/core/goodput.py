"""Goodput of elastic jobs: how fast a job makes progress on k GPUs, fitted from what it ran.

`fit(job)` turns a job's observed steps (`Elastic.samples`) into a `GoodputModel`; the resize
action asks it `goodput(gpus, nodes)` and `speedup(gpus, nodes)`. Pure and cheap: a fit is a
5x5 linear solve, a query a scan of a few batch sizes (remembered per size and nodes).

Throughput. A step of a global batch B on k GPUs over n nodes takes

    T(k, n, B) = a * m + c * B / k + s(k, n),   s = 0 on one GPU, s_node inside one node,
                                               s_net + slope * (k - 2) across nodes,

(overhead per micro-batch, per-sample compute shared by the k GPUs, gradient
synchronisation, dearer across the network), the shape of the throughput model of Pollux
(Qiao et al., OSDI'21, section 3.2) without its overlap exponent. m is the number of
micro-batches a GPU runs per step: a per-GPU batch above `max_local_batch` is split into m
equal micro-batches whose gradients are accumulated (as the SDK's `accumulation` does and
Pollux's jobs do), m = ceil(B / (k * max_local_batch)), 1 without a cap. A small
micro-batch leaves a GPU partly idle, which `a` measures: a job whose step barely shrinks
when its per-GPU batch halves has a large `a`, and accumulating pays that overhead again
for every micro-batch. The four parameters are fitted to the
samples by least squares on relative error, pulled towards a prior scaled from the newest
sample (overhead 2%, synchronisation 5% in a node and 15% across nodes of a one-GPU step),
with the weight of a twentieth of a sample, in relative step time: with one sample the prior
decides the shape, with samples at several sizes the data do. Until a job has run across
nodes, its network synchronisation is taken to cost what it measured inside a node
(optimism under uncertainty, as Pollux's model assumes before it has multi-node data): a
job that never crossed a node could otherwise never find out that crossing pays, and once
it has, the measurement decides.

Statistical efficiency. A step of batch B is worth `gain(B)` steps of the job's base batch
B0: gain = (var + sqr) / (var * B0 / B + sqr) with the gradient's squared norm `sqr` and
variance `var` measured at B0 (Pollux's efficiency; McCandlish et al.'s gradient noise scale
is var / sqr in these units). Without them the gain is 1: a larger batch buys nothing.

Goodput = gain(B) / T(k, n, B), in base-batch steps per second, with B the best batch
between B0 and `max_batch` with at least `min_local_batch` per GPU (the batch grows with the
GPUs when the job cannot run fewer samples per GPU; a fixed global batch when
max_batch == B0), accumulating above `max_local_batch`. A job that reported nothing yet gets
the prior alone (speedup(k) a little below k).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from trainyard.core.types import Elastic, Job, StepSample

__all__ = ["GoodputModel", "fit", "packed_nodes"]

_PRIOR = (0.02, 1.0, 0.05, 0.15)  # a, c*B0, s_node, s_net as shares of a one-GPU step
_SLOPE_TYPICAL = 8.0  # typical (replicas - 2) of a multi-node sample, for the ridge
_PRIOR_WEIGHT = 0.05  # weight of the prior against one sample (relative squared errors)
_BATCHES = 8  # batch sizes tried between the smallest and the largest allowed


@dataclass(frozen=True, slots=True)
class GoodputModel:
    """A fitted throughput model and efficiency of one job (see the module docstring)."""

    overhead: float  # a, seconds per step
    per_sample: float  # c, seconds per sample on one GPU
    sync_node: float  # seconds per step, several GPUs in one node
    sync_net: float  # seconds per step, several nodes
    batch: int
    max_batch: int
    max_local_batch: int
    grad_sqr: float
    grad_var: float
    sync_slope: float = 0.0  # seconds per step per replica beyond 2, several nodes
    min_local_batch: int = 0  # the smallest per-GPU batch (0: any)
    # goodput already computed, by (gpus, nodes): the rebalance asks the same sizes often
    _memo: dict[tuple[int, int], float] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def step_time(self, gpus: int, nodes: int, batch: float) -> float:
        if gpus <= 1:
            sync = 0.0
        elif nodes > 1:
            sync = self.sync_net + self.sync_slope * (gpus - 2)
        else:
            sync = self.sync_node
        micro = micro_batches(gpus, batch, self.max_local_batch)
        return self.overhead * micro + self.per_sample * batch / max(gpus, 1) + sync

    def gain(self, batch: float) -> float:
        sqr, var = self.grad_sqr, self.grad_var
        if sqr + var <= 0.0 or batch <= 0.0:
            return 1.0
        return (var + sqr) / (var * self.batch / batch + sqr)

    def best_batch(self, gpus: int) -> tuple[float, float]:
        """(lowest, highest) global batch the job may run at on `gpus` GPUs."""
        low = float(self.batch)
        high = float(max(self.max_batch, self.batch))
        if self.min_local_batch > 0:  # every GPU holds at least min_local_batch samples
            low = min(high, max(low, float(self.min_local_batch * gpus)))
        return low, high

    def goodput(self, gpus: int, nodes: int) -> float:
        """Base-batch steps per second on `gpus` GPUs over `nodes` nodes, at the best batch
        (tried: a geometric grid from the lowest to the highest, and the largest that needs
        no accumulation, where the step time jumps)."""
        if gpus <= 0:
            return 0.0
        key = (gpus, nodes)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        value = self._best_goodput(gpus, nodes)
        self._memo[key] = value
        return value

    def _best_goodput(self, gpus: int, nodes: int) -> float:
        low, high = self.best_batch(gpus)
        batches = [low]
        if high > low:
            ratio = (high / low) ** (1.0 / (_BATCHES - 1))
            for _ in range(_BATCHES - 1):
                batches.append(batches[-1] * ratio)
            whole = float(self.max_local_batch * gpus)
            if low < whole < high:
                batches.append(whole)
        return max(self.gain(b) / self.step_time(gpus, nodes, b) for b in batches)

    def speedup(self, gpus: int, nodes: int) -> float:
        """Goodput on `gpus` GPUs relative to one GPU."""
        one = self.goodput(1, 1)
        return self.goodput(gpus, nodes) / one if one > 0 else float(gpus)


def micro_batches(gpus: int, batch: float, max_local: int) -> int:
    """Micro-batches per step of a global `batch` on `gpus` GPUs holding at most `max_local`
    samples each (0: no cap, one)."""
    if max_local <= 0:
        return 1
    return max(1, math.ceil(batch / (max(gpus, 1) * max_local) - 1e-9))


def packed_nodes(gpus: int, per_node: int) -> int:
    """Nodes a tightly packed gang of `gpus` spans on nodes of `per_node` GPUs."""
    return max(1, -(-gpus // max(1, per_node)))


def _prior(
    sample: StepSample | None, base: int, max_local: int
) -> tuple[float, float, float, float]:
    """Prior parameters (a, c, s_node, s_net) scaled from one sample's one-GPU step time."""
    a, compute, s_node, s_net = _PRIOR
    if sample is None or sample.step_time <= 0 or sample.batch <= 0:
        one = 1.0  # any unit: only speedups are read without samples
    else:
        k = max(1, sample.gpus)
        sync = 0.0 if k == 1 else (s_net if sample.nodes > 1 else s_node)
        micro = micro_batches(k, sample.batch, max_local)
        # solve the prior's shape for the one-GPU step time of the base batch
        one = sample.step_time / (a * micro + compute * sample.batch / base / k + sync)
    return a * one, compute * one / max(1, base), s_node * one, s_net * one


def _solve(m: list[list[float]], v: list[float]) -> list[float] | None:
    """Gaussian elimination with partial pivoting; None if singular."""
    n = len(v)
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-18:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        v[col], v[pivot] = v[pivot], v[col]
        for r in range(col + 1, n):
            f = m[r][col] / m[col][col]
            if f:
                for c in range(col, n):
                    m[r][c] -= f * m[col][c]
                v[r] -= f * v[col]
    out = [0.0] * n
    for r in range(n - 1, -1, -1):
        out[r] = (v[r] - sum(m[r][c] * out[c] for c in range(r + 1, n))) / m[r][r]
    return out


def _solve_nonneg(m: list[list[float]], v: list[float]) -> list[float] | None:
    """The least-squares solution of the normal equations `m x = v` with every x >= 0: the
    most negative parameter is fixed at 0 and the others are solved again, until none is
    negative (a time cannot be negative, and clipping one without refitting the rest leaves
    them fitted to a value it does not have). None if singular."""
    free = list(range(len(v)))
    out = [0.0] * len(v)
    while free:
        x = _solve([[m[i][j] for j in free] for i in free], [v[i] for i in free])
        if x is None or not all(math.isfinite(t) for t in x):
            return None
        worst = min(range(len(free)), key=lambda t: x[t])
        if x[worst] >= 0.0:
            for t, i in enumerate(free):
                out[i] = x[t]
            return out
        free.pop(worst)
    return out


def _features(s: StepSample, max_local: int) -> list[float]:
    k = max(1, s.gpus)
    net = 1.0 if s.nodes > 1 else 0.0
    return [
        float(micro_batches(k, s.batch, max_local)),
        s.batch / k,
        1.0 if k > 1 and s.nodes <= 1 else 0.0,
        net,
        net * max(0, k - 2),
    ]


def fit(job: Job) -> GoodputModel:
    """The job's `GoodputModel` from its `Elastic` data (the prior alone without samples)."""
    info = job.elastic or Elastic()
    base = info.batch if info.batch > 0 else 1
    samples = [s for s in info.samples if s.step_time > 0 and s.batch > 0 and s.gpus > 0]
    prior = (*_prior(samples[-1] if samples else None, base, info.max_local_batch), 0.0)
    params = list(prior)
    nf = 5
    if samples:
        # the prior's pull, in relative step time: a parameter's typical share of a step
        one = prior[0] / _PRIOR[0]  # the prior's one-GPU step time of the base batch
        typical = (1.0, float(base), 1.0, 1.0, _SLOPE_TYPICAL)  # feature values, typical step
        m = [[0.0] * nf for _ in range(nf)]
        v = [0.0] * nf
        for s in samples:
            x = _features(s, info.max_local_batch)
            w = 1.0 / (s.step_time * s.step_time)  # relative error
            for i in range(nf):
                v[i] += w * x[i] * s.step_time
                for j in range(nf):
                    m[i][j] += w * x[i] * x[j]
        for i in range(nf):  # ridge towards the prior
            reg = _PRIOR_WEIGHT * (typical[i] / one) ** 2
            m[i][i] += reg
            v[i] += reg * prior[i]
        solved = _solve_nonneg(m, v)
        if solved is not None:
            params = solved
            if params[1] <= 0.0:
                params[1] = prior[1]
    if not any(s.nodes > 1 for s in samples):
        params[3] = params[2]  # never measured across nodes: optimistic, as Pollux's model
        params[4] = 0.0
    return GoodputModel(
        overhead=params[0],
        per_sample=params[1],
        sync_node=params[2],
        sync_net=max(params[3], params[2]),
        batch=base,
        max_batch=max(info.max_batch, base),
        max_local_batch=info.max_local_batch,
        grad_sqr=info.grad_sqr,
        grad_var=info.grad_var,
        sync_slope=params[4],
        min_local_batch=info.min_local_batch,
    )
