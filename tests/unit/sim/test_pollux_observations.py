"""What a Pollux job tells the scheduler (`PolluxJobs.observe` / `report`): a step sample per
GPUs, nodes and batch it has run at, the newest last, as the server keeps a job's reports."""

from __future__ import annotations

from test_pollux_speed import shared_pollux

from trainyard.server.services.reports import MAX_SAMPLES
from trainyard.sim.pollux_jobs import SAMPLES_KEPT, PolluxJobs
from trainyard.sim.workload import SimJob


def _cifar() -> tuple[PolluxJobs, SimJob]:
    speed = PolluxJobs(shared_pollux() / "profiles")
    job = SimJob("c", 0.0, 4, application="cifar10", batch_size=128)
    return speed, job


def _batch_changes(speed: PolluxJobs, job: SimJob, per_node: tuple[int, ...]) -> list[float]:
    """Progress points where the job's best batch on `per_node` differs from the one before."""
    work, out, last = speed.work(job), [], None
    for i in range(200):
        progress = work * i / 200
        batch = speed.adaptive.best_batch(job, per_node, speed.adaptive.epoch(job, progress)).batch
        if last is not None and batch != last:
            out.append(progress)
        last = batch
    return out


def test_a_new_batch_on_the_same_gpus_is_a_new_sample_and_the_old_one_stays() -> None:
    speed, job = _cifar()
    info = speed.observe(job, (4,), 0.0, speed.elastic_info(job))
    first = info.samples[-1]
    assert [(s.gpus, s.nodes) for s in info.samples] == [(4, 1)]
    assert speed.report(job, 0.0, info) is info  # nothing changed: the same object
    change = _batch_changes(speed, job, (4,))[0]
    later = speed.report(job, change, info)
    assert later.samples[0] == first and len(later.samples) == 2
    newest = later.samples[-1]
    assert (newest.gpus, newest.nodes) == (4, 1) and newest.batch != first.batch
    assert newest.step_time > 0


def test_running_again_at_a_sample_s_shape_makes_it_the_newest_without_a_copy() -> None:
    speed, job = _cifar()
    info = speed.observe(job, (4,), 0.0, speed.elastic_info(job))
    info = speed.observe(job, (4, 4), 0.0, info)
    info = speed.observe(job, (4,), 0.0, info)
    assert [(s.gpus, s.nodes) for s in info.samples] == [(8, 2), (4, 1)]


def test_at_most_as_many_samples_as_the_server_passes_to_the_core() -> None:
    assert SAMPLES_KEPT == MAX_SAMPLES
    speed, job = _cifar()
    info = speed.elastic_info(job)
    shapes = [(k,) for k in (1, 2, 3, 4)] + [(4,) * n for n in range(2, 17)]
    for per_node in shapes:
        info = speed.observe(job, per_node, 0.0, info)
    assert len(info.samples) == SAMPLES_KEPT
    assert (info.samples[-1].gpus, info.samples[-1].nodes) == (64, 16)
