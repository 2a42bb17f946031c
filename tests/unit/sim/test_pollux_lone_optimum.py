"""`bench/pollux_model.py`'s lone-job optimum: the best schedule of a job alone, paying the
simulator's restarts and first start, lies between the ideal (restarts free, no first start)
plus the first start and the best single size held throughout."""

from __future__ import annotations

from test_pollux_speed import shared_pollux

from bench_scripts import load
from trainyard.sim.pollux_jobs import PolluxJobs
from trainyard.sim.pollux_speed import PolluxSpeed
from trainyard.sim.workload import SimJob, Workload


def test_the_optimum_lies_between_the_ideal_and_one_size_throughout() -> None:
    tool, sim = load("pollux_model"), load("simulator")
    speed = PolluxJobs(shared_pollux() / "profiles")
    (job,) = speed.elastic_workload(
        Workload(
            kind="test",
            source="test",
            jobs=(SimJob("c", 0.0, 4, application="cifar10", batch_size=128),),
        )
    ).jobs
    assert job.max_gpus is not None and job.max_gpus > 4
    best = tool.optimum_alone(speed, job)
    ideal = sim._ideal_alone(speed, job)

    def fixed(k: int) -> float:
        work, done, seconds = speed.work(job), 0.0, 0.0
        while done < work:
            end = min(speed.next_change(job, done), work)
            seconds += (end - done) / speed.rate_at(job, PolluxSpeed.packed(k), "", done)
            done = end
        return speed.first_start_s + seconds

    one_size = min(fixed(k) for k in range(1, job.max_gpus + 1))
    assert ideal + speed.first_start_s <= best <= one_size
    assert best < one_size  # this job's best size changes as it trains: a move pays
