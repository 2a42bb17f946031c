"""`StepReport`: what one turn of the platform's loop (`Platform.step` or `recover`) did, by
job id: the lists the server logs and the tests read. `_Out` is how one job's work reports
into it (`(kind, job id)` pairs, merged once the job's transaction has committed)."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainyard.server.loop import scheduling

_Out = list[tuple[str, str]]


@dataclass
class StepReport:
    """What one `step` (or `recover`) did, by job id."""

    now: float
    started: list[str] = field(default_factory=list)  # STARTING -> RUNNING when observed
    launched: list[str] = field(default_factory=list)
    succeeded: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    requeued: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)  # stop requested (or done)
    resized: list[str] = field(default_factory=list)  # RESIZING -> STARTING: relaunch now
    blocked: list[str] = field(default_factory=list)  # launch refused: a device is busy
    adopted: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    applied: scheduling.Applied | None = None

    def _merge(self, out: _Out) -> None:
        for kind, job_id in out:
            getattr(self, kind).append(job_id)
