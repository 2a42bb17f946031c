"""trainyard.core: the pure scheduling core.

Snapshot in, decision out: `run_cycle(snapshot, profile) -> Decision`. No I/O, no clock, no
imports of the server, database, executors or simulator (a test enforces this). Policies,
actions and scorers are plugins found by name (`PROFILES`, `ACTIONS`, `EVICTORS`,
`JOB_ORDERS`, `SCORERS`). See docs/architecture.md for the design and the invariants.
"""

from trainyard.core import actions, plugins, profiles
from trainyard.core.apply import apply_decision
from trainyard.core.cycle import run_cycle
from trainyard.core.framework import (
    ACTIONS,
    EVICTORS,
    JOB_ORDERS,
    PROFILES,
    SCORERS,
    Profile,
    UnknownNameError,
    get_profile,
)
from trainyard.core.snapshot import Snapshot, SnapshotError, validate
from trainyard.core.topology import Layout, build_layout
from trainyard.core.types import (
    Decision,
    Elastic,
    Eviction,
    Job,
    Node,
    NodeDevices,
    NotGrown,
    PendingReason,
    Placement,
    Queue,
    Reservation,
    Resize,
    RunningJob,
    StepSample,
    Topology,
)

__all__ = [
    "ACTIONS",
    "EVICTORS",
    "JOB_ORDERS",
    "PROFILES",
    "SCORERS",
    "Decision",
    "Elastic",
    "Eviction",
    "Job",
    "Layout",
    "Node",
    "NodeDevices",
    "NotGrown",
    "PendingReason",
    "Placement",
    "Profile",
    "Queue",
    "Reservation",
    "Resize",
    "RunningJob",
    "Snapshot",
    "SnapshotError",
    "StepSample",
    "Topology",
    "UnknownNameError",
    "actions",
    "apply_decision",
    "build_layout",
    "get_profile",
    "plugins",
    "profiles",
    "run_cycle",
    "validate",
]
