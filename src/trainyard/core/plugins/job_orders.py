"""Job orders within a queue (lower key runs first), registered by name.

- `fifo`: submission time.
- `priority`: priority (higher first), then submission time.
- `las`: Tiresias-style discretised least attained service: jobs are bucketed by attained
  GPU-seconds at `Profile.las_thresholds`; lower buckets first, FIFO inside a bucket. Short and
  small jobs thus pass long ones without any knowledge of durations.
- `sjf`: shortest expected GPU-time first when known; unknown sizes go last, FIFO.
- `default`: priority, then LAS bucket, then submission time.

Every order puts a job requeued after a failure (`Job.recovering`) before the others of its
queue: it lost its place through no choice of its own and resumes from its checkpoint.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any, Final

from trainyard.core.framework import JOB_ORDERS, Profile
from trainyard.core.types import Job

_INF: Final = float("inf")


def las_level(job: Job, profile: Profile) -> int:
    """Index of the attained-service bucket of `job` (0: least served)."""
    return bisect_right(profile.las_thresholds, job.attained_service)


def fifo(job: Job, profile: Profile) -> tuple[Any, ...]:
    return (not job.recovering, job.submit_time, job.id)


def priority(job: Job, profile: Profile) -> tuple[Any, ...]:
    return (not job.recovering, -job.priority, job.submit_time, job.id)


def las(job: Job, profile: Profile) -> tuple[Any, ...]:
    return (not job.recovering, las_level(job, profile), job.submit_time, job.id)


def sjf(job: Job, profile: Profile) -> tuple[Any, ...]:
    size = job.expected_duration * max(job.gpus, 1) if job.expected_duration is not None else _INF
    return (not job.recovering, size, job.submit_time, job.id)


def default(job: Job, profile: Profile) -> tuple[Any, ...]:
    return (not job.recovering, -job.priority, las_level(job, profile), job.submit_time, job.id)


for _name, _fn in (
    ("fifo", fifo),
    ("priority", priority),
    ("las", las),
    ("sjf", sjf),
    ("default", default),
):
    JOB_ORDERS.register(_name, _fn)
