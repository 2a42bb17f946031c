"""What a simulation produces: per-job records, the cluster timeline, and the run's identity.

This module owns the contract between the engine (`trainyard.sim.engine`, which fills these)
and the metrics and reports (`trainyard.sim.metrics`, `trainyard.sim.report`, which only read
them). All times are seconds of simulated time from the workload's start.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["JobRecord", "Sample", "SimResult"]


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One job's life.

    - `first_start`/`end`: None when it never started / never finished (simulation cut off).
    - `run_time`: seconds it held GPUs in all (restart penalties included).
    - `preemptions`: times it was evicted; `restarts`: starts after the first one.
    - `isolated_time`: how long it would take alone on an idle cluster at its requested size
      (its speed model's isolated rate, plus the first-start penalty): the reference of
      finish-time fairness.
    - `gpu_seconds`: GPU-seconds it held (an elastic job's size changes; None: `gpus` x
      `run_time`); `resizes`: restarts at another size (elastic jobs).
    - `allocation`: (time, GPUs held from then on) at every change, 0 when stopped: the
      job's allocation over time (the report's plot).
    """

    id: str
    queue: str
    gpus: int
    submit: float
    first_start: float | None
    end: float | None
    run_time: float
    preemptions: int
    restarts: int
    isolated_time: float
    gpu_seconds: float | None = None
    resizes: int = 0
    allocation: tuple[tuple[float, int], ...] = ()

    @property
    def held(self) -> float:
        """GPU-seconds held."""
        return self.gpu_seconds if self.gpu_seconds is not None else self.gpus * self.run_time

    @property
    def jct(self) -> float | None:
        """Job completion time: end - submit."""
        return None if self.end is None else self.end - self.submit

    @property
    def queueing_delay(self) -> float | None:
        """Time from submission to the first start."""
        return None if self.first_start is None else self.first_start - self.submit


@dataclass(frozen=True, slots=True)
class Sample:
    """The cluster from `t` until the next sample (piecewise constant).

    - `allocated`: GPUs held by running jobs.
    - `pending_jobs`/`pending_gpus`: jobs waiting (submitted, not running, not finished) and
      the GPUs they ask for.
    - `fragmented_free`: the free GPUs when at least one waiting job asks for no more GPUs
      than are free (of a type it accepts) yet the scheduler could not place it for lack of a
      contiguous enough block (not for quota, reservation or ordering); else 0.
    """

    t: float
    allocated: int
    pending_jobs: int
    pending_gpus: int
    fragmented_free: int


@dataclass(frozen=True)
class SimResult:
    """A finished simulation: identity, records in submission order, timeline, counters."""

    workload: str
    cluster: str
    policy: str
    seed: int
    total_gpus: int
    records: tuple[JobRecord, ...]
    samples: tuple[Sample, ...]
    end_time: float
    rounds: int
    queues: tuple[str, ...] = ()
