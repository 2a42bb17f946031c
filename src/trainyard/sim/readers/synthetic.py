"""Synthetic Philly-like workloads: no file needed.

Rules: `n` jobs; submission times from `trainyard.sim.workload.arrivals.sample_arrivals` (Philly's
diurnal profile and burst-preserving gap distribution, the first job at 0 = midnight of the
trace clock; `load` compresses the gaps); sizes from `trainyard.sim.workload.philly.sample_gpus`
and run times from `sample_duration`; queue ``q<k>`` with ``k`` uniform over the ``queues``
option (default 1). One `random.Random(seed)` draws all arrivals first, then per job the size,
the run time and (with more than one queue) the queue. Ids are ``syn-I``.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from trainyard.sim.readers._common import check_options, positive_int_option
from trainyard.sim.workload import SimJob, Workload
from trainyard.sim.workload.arrivals import sample_arrivals
from trainyard.sim.workload.philly import sample_duration, sample_gpus

__all__ = ["DEFAULT_JOBS", "OPTIONS", "synthetic"]

OPTIONS = ("queues",)
DEFAULT_JOBS = 1000


def synthetic(
    n: int, *, seed: int, load: float, options: Mapping[str, str], source: str
) -> Workload:
    """Generate `n` jobs (see the module docstring for the rules)."""
    check_options("synthetic", options, OPTIONS)
    queues = positive_int_option(options, "queues", 1)
    rng = random.Random(seed)
    times = sample_arrivals(rng, n, load)
    jobs = []
    for i, t in enumerate(times):
        gpus = sample_gpus(rng)
        duration = sample_duration(rng)
        queue = f"q{rng.randrange(queues)}" if queues > 1 else "q0"
        jobs.append(SimJob(id=f"syn-{i}", submit_time=t, gpus=gpus, queue=queue, duration=duration))
    names = tuple(f"q{k}" for k in range(queues))
    return Workload(kind="synthetic", source=source, jobs=tuple(jobs), queues=names)
