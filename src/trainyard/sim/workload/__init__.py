"""Workloads: what the simulator and the scheduler benchmarks run.

- `jobs`: the simulator's workload types (`SimJob`, `Workload`, `WorkloadError`), the contract
  between the readers (`trainyard.sim.readers`) and the engine; re-exported here.
- `philly` and `arrivals`: job sizes, run times and the arrival process fitted to the Philly
  trace, kept as numbers in code, so synthetic workloads and the demo need no trace file.
- `cluster`: a half-occupied synthetic cluster with a queue (`trainyard.sim.timing` times
  cycles on it).
"""

from trainyard.sim.workload.jobs import (
    SimJob,
    Workload,
    WorkloadError,
    fit_to_cluster,
    larger_than,
    without,
)

__all__ = ["SimJob", "Workload", "WorkloadError", "fit_to_cluster", "larger_than", "without"]
