"""Trace-duration jobs made elastic for what-if studies (`--elastic-share`): which jobs, how
fast they run at each size, what the scheduler is told, and what a run shows."""

from __future__ import annotations

from dataclasses import replace

import pytest

from trainyard.sim.cluster import parse_cluster
from trainyard.sim.elastic_duration import ElasticDuration
from trainyard.sim.engine import simulate
from trainyard.sim.workload import SimJob, Workload, WorkloadError


def _workload(n: int) -> Workload:
    jobs = tuple(SimJob(f"j{i}", 60.0 * i, 1 + i % 4, duration=3_600.0) for i in range(n))
    return Workload(kind="test", source="test", jobs=jobs)


def test_the_share_is_chosen_by_job_id_reproducibly() -> None:
    model = ElasticDuration(0.5, seed=3, node_gpus=4, restart_s=30.0)
    wl = model.elastic_workload(_workload(400))
    chosen = {j.id for j in wl.jobs if j.max_gpus is not None}
    assert 150 < len(chosen) < 250
    again = ElasticDuration(0.5, seed=3, node_gpus=4, restart_s=30.0).elastic_workload(
        Workload(kind="test", source="test", jobs=_workload(400).jobs[::-1])
    )
    assert {j.id for j in again.jobs if j.max_gpus is not None} == chosen  # order-free
    other_seed = ElasticDuration(0.5, seed=4, node_gpus=4, restart_s=30.0)
    assert {j.id for j in other_seed.elastic_workload(_workload(400)).jobs if j.max_gpus} != chosen
    for job in wl.jobs:
        if job.max_gpus is not None:
            assert job.min_gpus == 1 and job.max_gpus == min(64, 4 * job.gpus)
    assert all(j.max_gpus is None for j in ElasticDuration(0.0, seed=3, node_gpus=4,
               restart_s=0.0).elastic_workload(_workload(50)).jobs)  # fmt: skip


def test_an_elastic_job_takes_its_trace_time_at_its_trace_size_and_scales_sublinearly() -> None:
    model = ElasticDuration(1.0, seed=0, node_gpus=4, restart_s=30.0)
    (job,) = model.elastic_workload(
        Workload(kind="t", source="t", jobs=(SimJob("a", 0.0, 2, duration=1000.0),))
    ).jobs
    assert model.work(job) / model.rate(job, (2,), "") == pytest.approx(1000.0)
    assert model.work(job) / model.isolated_rate(job) == pytest.approx(1000.0)
    one, four, eight_split = (model.rate(job, p, "") for p in ((1,), (4,), (4, 4)))
    assert one < four < 4 * one  # sublinear inside a node
    assert model.rate(job, (4, 4), "") < 2 * four  # dearer across nodes
    assert eight_split > 0
    rigid = replace(job, min_gpus=None, max_gpus=None)
    assert model.work(rigid) == 1000.0 and model.rate(rigid, (1,), "") == 1.0


def test_the_scheduler_learns_each_shape_it_ran_on() -> None:
    model = ElasticDuration(1.0, seed=0, node_gpus=4, restart_s=30.0)
    job = SimJob("a", 0.0, 2, duration=1000.0, min_gpus=1, max_gpus=8)
    info = model.elastic_info(job)
    assert info.batch == info.max_batch and not info.samples  # a fixed global batch
    info = model.observe(job, (2,), 0.0, info)
    info = model.observe(job, (4, 4), 10.0, info)
    info = model.observe(job, (2,), 20.0, info)
    assert [(s.gpus, s.nodes) for s in info.samples] == [(8, 2), (2, 1)]
    assert info.samples[1].step_time == pytest.approx(model.step_time(job, (2,)))


def test_elastic_jobs_grow_on_an_idle_cluster_and_the_allocation_is_recorded() -> None:
    model = ElasticDuration(1.0, seed=0, node_gpus=4, restart_s=30.0)
    wl = model.elastic_workload(
        Workload(kind="t", source="t", jobs=(SimJob("a", 0.0, 1, duration=20_000.0),))
    )
    result = simulate(wl, parse_cluster("2x4"), model, "default")
    (rec,) = result.records
    assert rec.end is not None and rec.end < 20_000.0  # it grew and finished sooner
    sizes = [g for _, g in rec.allocation]
    assert sizes[0] == 1 and max(sizes) == 4 and sizes[-1] == 0
    assert rec.resizes == len([g for g in sizes if g]) - 1


def test_bad_share_names_the_option() -> None:
    with pytest.raises(WorkloadError) as info:
        ElasticDuration(1.2, seed=0, node_gpus=4, restart_s=0.0)
    assert info.value.field == "--elastic-share"


def test_an_elastic_job_larger_than_the_cluster_runs_at_the_cluster_size() -> None:
    # Its trace size is 16 on an 8-GPU cluster: rigid, the workload is refused; elastic, the
    # job starts at most at 8 and keeps the work of its trace run (16 GPUs for an hour).
    model = ElasticDuration(1.0, seed=0, node_gpus=4, restart_s=30.0)
    big = SimJob("big", 0.0, 16, duration=3_600.0)
    with pytest.raises(WorkloadError) as err:
        simulate(Workload("test", "t", (big,)), parse_cluster("2x4"), model, "default")
    assert err.value.where == "big" and "asks for 16 GPUs; the cluster has 8" in str(err.value)
    wl = model.elastic_workload(Workload("test", "t", (big,)))
    result = simulate(wl, parse_cluster("2x4"), model, "default")
    (record,) = result.records
    assert record.gpus == 8 and max(g for _, g in record.allocation) == 8
    at_16 = model.step_time(big, model.packed(16))
    at_8 = model.step_time(big, model.packed(8))
    assert record.jct == pytest.approx(3_600.0 * at_8 / at_16 + 30.0, rel=0.02)
    tight = replace(wl.jobs[0], min_gpus=12)
    with pytest.raises(WorkloadError) as err:
        simulate(Workload("test", "t", (tight,)), parse_cluster("2x4"), model, "default")
    assert "needs at least 12 GPUs; the cluster has 8" in str(err.value)
