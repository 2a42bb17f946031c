"""`bench/pollux_oracle.py`'s options: a bad value stops it with a message naming the option,
before any simulation runs; `--truth-apps` gives the truth to the named applications' jobs
only."""

from __future__ import annotations

import sys

import pytest

from bench_scripts import load
from trainyard.sim.workload import Workload


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--restart-s", "-1"], "--restart-s"),
        (["--restart-s", "nan"], "--restart-s"),
        (["--explore", "0"], "--explore"),
        (["--interval", "-60"], "--interval"),
        (["--interval", "inf"], "--interval"),
        (["--truth-apps", "resnet"], "--truth-apps"),
        (["--truth-apps", "yolov3", "--fitted"], "--truth-apps"),
    ],
)
def test_a_bad_option_is_named(
    argv: list[str], named: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    tool = load("pollux_oracle")
    monkeypatch.setattr(sys, "argv", ["pollux_oracle.py", *argv])
    with pytest.raises(SystemExit) as stop:
        tool.main()
    assert named in str(stop.value)


def test_the_truth_is_given_only_to_the_named_applications() -> None:
    from test_pollux_speed import shared_pollux

    from trainyard.core import Job
    from trainyard.core.types import Elastic, StepSample
    from trainyard.sim.pollux_jobs import PolluxJobs
    from trainyard.sim.workload import SimJob

    tool = load("pollux_oracle")
    speed = PolluxJobs(shared_pollux() / "profiles")
    sims = tuple(
        SimJob(id=f"{app}-1", submit_time=0.0, gpus=4, application=app, batch_size=bs)
        for app, bs in (("yolov3", 64), ("cifar10", 128))
    )
    made = speed.elastic_workload(Workload("pollux", "test", sims))
    elastic = Elastic(
        batch=64, max_batch=64, samples=(StepSample(1, 1, 64, 0.5),), remaining=6400.0
    )
    some, every = tool.Truth(frozenset({"yolov3"})), tool.Truth()
    for truth in (some, every):
        truth.speed, truth.jobs = speed, {j.id: j for j in made.jobs}
    yolo = Job(id="yolov3-1", gpus=4, elastic=elastic)
    cifar = Job(id="cifar10-1", gpus=4, elastic=elastic)
    assert isinstance(some.fit(yolo), tool.TruthModel)
    assert not isinstance(some.fit(cifar), tool.TruthModel)  # the fitted model
    assert isinstance(every.fit(cifar), tool.TruthModel)
