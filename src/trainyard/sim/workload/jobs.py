"""The simulator's workload types: `SimJob`, `Workload` and `WorkloadError`.

This module owns the contract between workload readers (`trainyard.sim.readers`) and the engine
(`trainyard.sim.engine`): a workload is an ordered tuple of jobs with submission times in
seconds from the workload's start. How fast a job progresses on a placement is not a property
of the job but of a `trainyard.sim.speed.SpeedModel` chosen with the workload.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from trainyard.errors import FieldError

__all__ = ["SimJob", "Workload", "WorkloadError", "fit_to_cluster", "larger_than", "without"]


class WorkloadError(FieldError):
    """A workload file or option is malformed. `field` (also `where`) is ``file:line:column``
    (or the option name), `message` says what is wrong and how to fix it."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(where, message)
        self.args = (f"{where}: {message}",)

    @property
    def where(self) -> str:
        return self.field


@dataclass(frozen=True, slots=True)
class SimJob:
    """One job of a workload.

    - `submit_time`: seconds from the workload's start.
    - `gpus`: the GPU count the job asks for (a gang).
    - `queue`: the queue (tenant, or Philly virtual cluster) it is submitted to.
    - `duration`: run time in seconds on `gpus` GPUs, when the trace gives it (Philly,
      synthetic). None when the speed model derives it (Pollux, Gavel).
    - `application`: the model type (Pollux application, Gavel job type) for speed models.
    - `batch_size`: global batch size (Pollux).
    - `priority`: the job's priority (higher may preempt lower, per the profile).
    - `preemptible`: False for a job the scheduler may never evict.
    - `min_gpus`/`max_gpus`: an elastic job's size range (None: rigid at `gpus`); the
      scheduler may start, grow and shrink it within it, and its speed model says how fast it
      runs at each size.
    """

    id: str
    submit_time: float
    gpus: int
    queue: str = "default"
    duration: float | None = None
    application: str | None = None
    batch_size: int | None = None
    priority: int = 0
    preemptible: bool = True
    min_gpus: int | None = None
    max_gpus: int | None = None

    @property
    def fewest_gpus(self) -> int:
        """The fewest GPUs the job can run on: its minimum when elastic, else its size."""
        return self.min_gpus if self.min_gpus is not None else self.gpus


@dataclass(frozen=True)
class Workload:
    """Jobs in submission order (ties by id), with where they came from: `kind` (philly,
    pollux, gavel, synthetic, ...) and `source`, the spec it was read from (`pollux:PATH`;
    results and reports label the workload by it)."""

    kind: str
    source: str
    jobs: tuple[SimJob, ...]
    queues: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        ordered = tuple(sorted(self.jobs, key=lambda j: (j.submit_time, j.id)))
        object.__setattr__(self, "jobs", ordered)
        if not self.queues:
            names = sorted({j.queue for j in ordered})
            object.__setattr__(self, "queues", tuple(names))


def fit_to_cluster(job: SimJob, gpus: int) -> SimJob:
    """`job` on a cluster of `gpus` GPUs: as it is when its size fits; an elastic job that asks
    for more starts at most at the cluster's size (its minimum fits); a rigid job that asks for
    more, or an elastic one whose minimum does not fit, is a `WorkloadError`."""
    if job.gpus <= gpus:
        return job
    if job.fewest_gpus > gpus:
        rigid = job.min_gpus is None and job.max_gpus is None
        asks = f"asks for {job.gpus}" if rigid else f"needs at least {job.fewest_gpus}"
        raise WorkloadError(job.id, f"{asks} GPUs; the cluster has {gpus}")
    return replace(job, gpus=gpus)


def larger_than(
    jobs: tuple[SimJob, ...], gpus: int
) -> tuple[tuple[SimJob, ...], tuple[SimJob, ...]]:
    """The jobs that cannot run on `gpus` GPUs (`fit_to_cluster` refuses them: a rigid job
    asking for more, an elastic one whose minimum is more), and the elastic ones that ask for
    more but whose minimum fits (`fit_to_cluster` starts them at most at the cluster's size)."""
    over = [job for job in jobs if job.gpus > gpus]
    unfit = tuple(job for job in over if job.fewest_gpus > gpus)
    return unfit, tuple(job for job in over if job.fewest_gpus <= gpus)


def without(workload: Workload, left_out: tuple[SimJob, ...]) -> Workload:
    """`workload` less the jobs of `left_out` (by id; its queues kept)."""
    ids = {j.id for j in left_out}
    return replace(workload, jobs=tuple(j for j in workload.jobs if j.id not in ids))
