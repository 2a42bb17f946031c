"""Elastic jobs in the simulator: they grow into idle GPUs, shrink for arrivals, and are
accounted by the GPU-seconds they held; Pollux workloads run elastic unless `--rigid`."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest
from test_pollux_speed import shared_pollux

from trainyard.core import Elastic, StepSample
from trainyard.sim.cluster import parse_cluster
from trainyard.sim.engine import SimOptions, simulate
from trainyard.sim.metrics import summarize
from trainyard.sim.records import SimResult
from trainyard.sim.workload import SimJob, Workload


class Scaling:
    """A job's work in GPU-seconds at perfect scaling less 5% per doubling; it reports
    what it measures on each placement, as an SDK would."""

    name = "scaling"
    first_start_s = 0.0
    restart_s = 30.0

    def work(self, job: SimJob) -> float:
        assert job.duration is not None
        return job.duration

    def rate(self, job: SimJob, per_node: tuple[int, ...], gpu_type: str) -> float:
        k = sum(per_node)
        return k * 0.95 ** (k.bit_length() - 1)

    def isolated_rate(self, job: SimJob) -> float:
        return self.rate(job, (job.gpus,), "")

    def elastic_info(self, job: SimJob) -> Elastic:
        return Elastic(batch=64, max_batch=64)

    def observe(self, job: SimJob, per_node: tuple[int, ...], progress: float, info: Elastic):
        k = sum(per_node)
        step = 64 / self.rate(job, per_node, "")
        sample = StepSample(k, len(per_node), 64, step)
        return replace(info, samples=(*info.samples, sample))


def _workload(*jobs: SimJob) -> Workload:
    return Workload(kind="test", source="test", jobs=jobs)


def test_an_elastic_job_grows_into_idle_gpus_and_finishes_sooner() -> None:
    job = SimJob("e", 0.0, 2, duration=40_000.0, min_gpus=1, max_gpus=16)
    rigid = replace(job, min_gpus=None, max_gpus=None)
    cluster = parse_cluster("4x4")
    grown = simulate(_workload(job), cluster, Scaling(), "default")
    fixed = simulate(_workload(rigid), cluster, Scaling(), "default")
    (g,), (f,) = grown.records, fixed.records
    assert g.resizes >= 1 and f.resizes == 0
    assert g.end is not None and f.end is not None and g.end < 0.6 * f.end
    assert g.gpu_seconds is not None and g.gpu_seconds > g.gpus * g.run_time  # it held more
    assert summarize(grown)["gpu_hours"] == pytest.approx(g.gpu_seconds / 3600, abs=1e-3)


def test_an_arrival_gets_gpus_from_an_elastic_job() -> None:
    big = SimJob("e", 0.0, 2, duration=400_000.0, min_gpus=1, max_gpus=8)
    late = SimJob("r", 20_000.0, 6, duration=3_600.0)
    result = simulate(
        _workload(big, late), parse_cluster("2x4"), Scaling(), "default", SimOptions()
    )
    rec = {r.id: r for r in result.records}
    assert rec["r"].first_start is not None
    assert rec["r"].first_start - rec["r"].submit <= 120  # within two rounds, by a shrink
    assert rec["e"].preemptions == 0 and rec["e"].resizes >= 2  # grown, then shrunk


def test_a_full_cluster_is_rebalanced_without_an_arrival_or_completion() -> None:
    """An elastic job that arrives at a cluster an elastic job fills starts small (the other
    shrinks for it); later rounds move GPUs to it although nothing arrives or ends: the
    resize rules read the time (holds, ages), so the rounds must happen."""
    big = SimJob("a", 0.0, 8, duration=4_000_000.0, min_gpus=1, max_gpus=8)
    new = SimJob("b", 36_000.0, 1, duration=400_000.0, min_gpus=1, max_gpus=8)
    result = simulate(_workload(big, new), parse_cluster("2x4"), Scaling(), "default")
    rec = {r.id: r for r in result.records}
    b = rec["b"]
    assert b.first_start is not None and b.end is not None
    first_end = min(r.end for r in result.records if r.end is not None)
    grown = [(t, g) for t, g in b.allocation if g > 1 and t < first_end]
    assert b.allocation[0][1] == 1 and grown, b.allocation
    assert grown[0][0] - b.first_start <= 3_600  # moved within an hour of its start


def test_rounds_at_every_event_still_grow_and_end() -> None:
    """With `--interval 0` a hold that ends wakes one round (the job alone grows into the
    idle GPUs then), and a full cluster of elastic jobs does not wake rounds forever."""
    alone = SimJob("e", 0.0, 2, duration=40_000.0, min_gpus=1, max_gpus=8)
    every = SimOptions(interval_s=0)
    (g,) = simulate(_workload(alone), parse_cluster("2x4"), Scaling(), "default", every).records
    assert g.end is not None and max(n for _t, n in g.allocation) == 8
    big = SimJob("a", 0.0, 8, duration=400_000.0, min_gpus=1, max_gpus=8)
    new = SimJob("b", 3_600.0, 1, duration=40_000.0, min_gpus=1, max_gpus=8)
    results: list[SimResult] = []
    run = threading.Thread(  # a daemon: if the clock stops advancing, the test fails, not hangs
        target=lambda: results.append(
            simulate(_workload(big, new), parse_cluster("2x4"), Scaling(), "default", every)
        ),
        daemon=True,
    )
    run.start()
    run.join(timeout=120)
    assert results, "the simulation did not end (a round woken at a time already past?)"
    assert all(r.end is not None for r in results[0].records)
    paced = simulate(_workload(big, new), parse_cluster("2x4"), Scaling(), "default")
    assert results[0].rounds <= paced.rounds  # no more rounds than one a minute
    assert [r.allocation for r in results[0].records] == [r.allocation for r in paced.records]


def test_rounds_at_every_event_look_again_while_a_job_could_grow() -> None:
    """With `--interval 0`, a job that the round at its hold's end does not grow is looked at
    again a hold later: the restart rule asks a 1-minute-old job for a gain it will not ask of
    a 2-minute-old one, and nothing else happens in between. It used to stay on 1 GPU to
    its end, with the other 3 idle."""
    job = SimJob("e", 0.0, 1, duration=40_000.0, min_gpus=1, max_gpus=2)
    for every in (SimOptions(interval_s=0), SimOptions()):
        (r,) = simulate(_workload(job), parse_cluster("1x4"), Scaling(), "default", every).records
        grown = [t for t, n in r.allocation if n == 2]
        assert grown and 60.0 < grown[0] <= 600.0, r.allocation


def test_pollux_workloads_run_elastic_unless_rigid() -> None:
    from trainyard.sim.pollux_jobs import PolluxJobs

    speed = PolluxJobs(shared_pollux() / "profiles")
    jobs = (
        SimJob("c", 0.0, 2, application="cifar10", batch_size=128),
        SimJob("n", 0.0, 1, application="ncf", batch_size=32768),
    )
    work = speed.elastic_workload(_workload(*jobs))
    c, n = work.jobs
    assert (c.min_gpus, c.gpus) == (1, 2) and c.max_gpus is not None and c.max_gpus > 2
    assert n.min_gpus is None and n.max_gpus is None  # a fixed batch on one GPU: rigid
    info = speed.elastic_info(c)
    assert info.batch == 128 and info.max_batch > 128 and info.grad_sqr > 0
    seen = speed.observe(c, (2,), 0.0, info)
    assert [(s.gpus, s.nodes) for s in seen.samples] == [(2, 1)]
    result = simulate(work, parse_cluster("4x4"), speed, "default")
    assert all(r.end is not None for r in result.records)
