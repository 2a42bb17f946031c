"""`trainyard describe` shows what a job's reports said (found by an outside review: the docs
said so, only `--json` did)."""

from __future__ import annotations

import time

from trainyard.cli.jobs import render_job


def _job(progress: dict[str, object] | None) -> dict[str, object]:
    return {
        "id": "j-1", "name": "el", "state": "RUNNING", "queue": "research", "user": "ada",
        "tenant": "acme", "gpus": 4, "min_gpus": 1, "max_gpus": 4, "submitted_at": time.time(),
        "placement": None, "attempt": 2, "restart_count": 0, "max_restarts": 3, "events": [],
        "progress": progress,
    }  # fmt: skip


def test_the_latest_report_and_the_step_time_at_each_size_are_shown() -> None:
    progress = {
        "attempt": 1, "world_size": 4, "step": 1219, "samples": 58_512, "loss": 0.52131,
        "remaining_samples": 9_600, "reported_at": time.time() - 3,
        "observed": [
            {"gpus": 2, "nodes": 1, "batch": 48, "step_time": 0.09, "steps": 400,
             "samples_per_s": 533.3},
            {"gpus": 4, "nodes": 1, "batch": 48, "step_time": 0.105, "steps": 178,
             "samples_per_s": 457.1},
        ],
    }  # fmt: skip
    text = render_job(_job(progress), None, colour=False)
    assert "progress:" in text and "step 1,219 (attempt 1)" in text
    assert "58,512 samples" in text and "loss 0.5213" in text and "9,600 samples left" in text
    assert "0.09 s on 2 GPUs (1 node), batch 48, 533.3 samples/s" in text
    assert "0.105 s on 4 GPUs" in text


def test_a_job_without_reports_shows_no_progress() -> None:
    assert "progress" not in render_job(_job(None), None, colour=False)
    assert "step time" not in render_job(_job({"observed": []}), None, colour=False)


def test_started_is_the_first_run_and_a_resized_run_is_shown_apart() -> None:
    """Found by an outside review: `started:` showed the latest resize's restart, labelled
    as the job's start."""
    now = time.time()
    moves = [(40, None, "PENDING"), (35, "STARTING", "RUNNING"), (27, "RUNNING", "RESIZING"),
             (26, "STARTING", "RUNNING")]  # fmt: skip
    events = [
        {"time": now - ago, "from_state": old, "to_state": new, "reason": "", "details": {}}
        for ago, old, new in moves
    ]
    job = _job(None) | {"started_at": now - 26, "events": events}
    lines = render_job(job, None, colour=False).splitlines()
    started = next(line for line in lines if line.strip().startswith("started:"))
    assert "35s ago" in started
    run = next(line for line in lines if line.strip().startswith("this run:"))
    assert "26s ago" in run
    first_only = job | {"events": events[:2], "started_at": now - 35}
    text = render_job(first_only, None, colour=False)
    assert "this run:" not in text and "35s ago" in text
