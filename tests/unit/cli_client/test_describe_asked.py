"""`trainyard describe` shows what the job asked for, as `scontrol show job` does: its
command, what it reserves, its time limit and priority (outside review 12 found them only in
`--json`)."""

from __future__ import annotations

from typing import Any

from trainyard.cli.jobs import render_job


def _job(**spec: Any) -> dict[str, Any]:
    return {
        "id": "j-1", "name": "train", "state": "RUNNING", "queue": "default", "user": "ada",
        "tenant": "acme", "gpus": 0, "submitted_at": 0.0, "started_at": 1.0, "attempt": 1,
        "restart_count": 0, "max_restarts": 3, "events": [],
        "spec": {"command": ["python", "train.py", "--lr", "3e-4 x"], **spec},
    }  # fmt: skip


def test_describe_shows_the_command_reservations_time_limit_and_priority() -> None:
    text = render_job(_job(cpus=2.0, memory_gb=8, time_limit_s=5400.0, priority=5), None, False)
    assert "command:" in text and "python train.py --lr '3e-4 x'" in text
    assert "2 CPUs, 8 GB" in text and "time limit:" in text and "1h30m" in text
    assert "priority:" in text and " 5" in text
    plain = render_job(_job(), None, False)
    assert "no CPU or memory reserved" in plain and "time limit" not in plain
    assert "priority" not in plain


def test_wait_reports_a_killed_job_as_a_shell_does() -> None:
    from trainyard.cli.wait import exit_status

    assert exit_status([{"state": "FAILED", "exit_code": -9}]) == 137  # SIGKILL
    assert exit_status([{"state": "FAILED", "exit_code": 3}]) == 3
    assert exit_status([{"state": "FAILED", "exit_code": None}]) == 1
    assert exit_status([{"state": "CANCELLED", "exit_code": -15}]) == 1
    text = render_job({**_job(), "state": "FAILED", "exit_message": "hung: no progress"}, None,
                      False)  # fmt: skip
    assert "exit:" in text and "no exit code: hung: no progress" in text
