"""The goodput model's fit: step times with gradient accumulation, non-negative parameters."""

from __future__ import annotations

import math

import pytest

from trainyard.core import Elastic, Job, StepSample
from trainyard.core.goodput import GoodputModel, fit, micro_batches

# A job whose GPU is half idle at a small per-GPU batch: 0.05 s per micro-batch whatever its
# size, 0.005 s per sample, synchronisation 0.05 s in a node and 0.3 s across nodes.
TRUTH = GoodputModel(
    overhead=0.05, per_sample=0.005, sync_node=0.05, sync_net=0.3,
    batch=8, max_batch=512, max_local_batch=16, grad_sqr=0.0, grad_var=0.0,
)  # fmt: skip


def _elastic(info: Elastic) -> Job:
    return Job(id="j", queue="q", gpus=1, min_gpus=1, max_gpus=64, elastic=info)


def _job(samples: list[tuple[int, int, int]], batch: int = 8, max_batch: int = 512) -> Job:
    """An elastic job that ran (gpus, nodes, batch) with TRUTH's step times."""
    steps = tuple(StepSample(k, n, b, TRUTH.step_time(k, n, b)) for k, n, b in samples)
    return _elastic(Elastic(batch=batch, max_batch=max_batch, max_local_batch=16, samples=steps))


@pytest.mark.parametrize(
    ("gpus", "batch", "cap", "want"),
    [(1, 8, 16, 1), (1, 16, 16, 1), (1, 17, 16, 2), (4, 256, 16, 4), (4, 250, 16, 4),
     (2, 64, 0, 1), (0, 8, 4, 2)],
)  # fmt: skip
def test_micro_batches_split_a_share_above_the_cap(
    gpus: int, batch: int, cap: int, want: int
) -> None:
    assert micro_batches(gpus, batch, cap) == want


def test_accumulating_pays_the_per_micro_batch_overhead_again() -> None:
    one = TRUTH.step_time(1, 1, 16)
    assert TRUTH.step_time(1, 1, 64) == pytest.approx(4 * 0.05 + 64 * 0.005)
    assert TRUTH.step_time(1, 1, 64) == pytest.approx(4 * one)  # four micro-batches of 16
    assert TRUTH.step_time(4, 1, 64) == pytest.approx(0.05 + 16 * 0.005 + 0.05)


def test_fit_recovers_a_job_that_accumulates() -> None:
    """Samples taken with accumulation (per-GPU shares of 32 on a cap of 16) pin the
    per-micro-batch overhead that a model without accumulation cannot see: the fit predicts
    the batches and sizes the job never ran (inside a node) within 12% (the prior's pull,
    along the direction the samples pin least; it is within 3% at a fifth of its weight)."""
    job = _job([(1, 1, 8), (1, 1, 32), (4, 1, 128), (4, 1, 32), (2, 1, 16), (2, 1, 64)])
    model = fit(job)
    assert model.overhead == pytest.approx(TRUTH.overhead, rel=0.25)
    for k in (1, 2, 3, 4):
        for b in (8, 48, 96, 256, 512):
            assert model.step_time(k, 1, b) == pytest.approx(TRUTH.step_time(k, 1, b), rel=0.12)


def test_a_fixed_global_batch_on_few_gpus_runs_in_micro_batches() -> None:
    """A job that must keep its global batch of 64 with 16 per GPU runs 4 micro-batches on one
    GPU: its speedup on 4 GPUs counts the accumulation it no longer needs."""
    model = fit(_job([(1, 1, 64), (2, 1, 64), (4, 1, 64)], batch=64, max_batch=64))
    want = TRUTH.step_time(1, 1, 64) / TRUTH.step_time(4, 1, 64)
    assert model.speedup(4, 1) == pytest.approx(want, rel=0.05)
    assert want > 2.5  # 2.1 if one GPU ran all 64 in one micro-batch


def test_fitted_parameters_are_never_negative_and_fit_the_samples() -> None:
    """Samples whose unconstrained least-squares overhead is negative (per-sample time grows
    faster than linearly) get overhead 0 with the other parameters refitted, not clipped."""
    steps = (
        StepSample(1, 1, 8, 0.10), StepSample(1, 1, 16, 0.26), StepSample(2, 1, 16, 0.15),
        StepSample(2, 1, 32, 0.31),
    )  # fmt: skip
    model = fit(_elastic(Elastic(batch=8, max_batch=64, samples=steps)))
    params = (model.overhead, model.per_sample, model.sync_node, model.sync_net)
    assert all(p >= 0.0 for p in params)
    assert model.overhead == 0.0
    errors = [abs(math.log(model.step_time(s.gpus, s.nodes, s.batch) / s.step_time)) for s in steps]
    assert max(errors) < 0.15  # clipping a without refitting the rest misses by over 40%
