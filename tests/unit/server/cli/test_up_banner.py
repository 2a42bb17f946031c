"""The recovery line of `trainyard up`'s banner counts each job once (outside review 11, F13:
one job that failed while no server ran, and was requeued, read as three jobs)."""

from __future__ import annotations

from trainyard.cli.up import _recovered
from trainyard.server.loop.step_report import StepReport


def test_each_recovered_job_is_counted_once() -> None:
    rec = StepReport(0.0)
    rec.adopted += ["a", "b", "c", "d"]  # a run record found for each
    rec.failed += ["b", "c"]
    rec.requeued += ["b"]
    rec.succeeded += ["d"]
    rec.launched += ["e"]
    assert _recovered(rec) == (
        "1 job(s) still running, re-adopted, 3 ended while no server ran (1 succeeded, "
        "1 failed, 1 failed and requeued), 1 launched"
    )
    only = StepReport(0.0)
    only.adopted += ["x"]
    assert _recovered(only) == "1 job(s) still running, re-adopted, 0 launched"
