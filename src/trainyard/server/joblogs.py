"""Job logs as the API serves them: read from the local executor's per-rank log files.

The server's log reader never touches the processes (the scheduler loop's executor owns
them): it only reads files. Following ends when the database says the followed attempt is
over (the job left STARTING/RUNNING or moved on to a later attempt), so a follower sees
every line the run wrote, then stops.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from trainyard.exec import logs
from trainyard.exec.local import log_paths


class JobLogs:
    """Per-rank log files under an executor root (`<root>/jobs/<id>/logs/attempt-<n>/`)."""

    def __init__(self, runs_dir: Path) -> None:
        self.runs_dir = runs_dir

    def paths(self, job_id: str, rank: int | None, attempt: int | None) -> dict[int, Path]:
        return log_paths(self.runs_dir, job_id, rank, attempt)

    def read(self, job_id: str, rank: int | None, attempt: int | None) -> Iterator[str]:
        paths = self.paths(job_id, rank, attempt)
        return logs.read_lines(paths, prefix=rank is None and len(paths) > 1)

    def follow(
        self,
        job_id: str,
        rank: int | None,
        attempt: int | None,
        ended: Callable[[], bool],
        interval_s: float = 0.2,
        ranks: int | None = None,
    ) -> Iterator[str]:
        """Lines as they are written until `ended()`; files are looked for again at every
        read, as a run may not be launched yet. `ranks`: how many the job has (several:
        lines are prefixed even before every rank's file exists)."""
        paths = self.paths(job_id, rank, attempt)
        prefix = rank is None and max(ranks or 0, len(paths)) > 1
        return logs.follow_lines(
            lambda: self.paths(job_id, rank, attempt), prefix, ended, interval_s
        )
