"""A real Ray cluster on this machine for the Ray executor's tests (`ray.cluster_utils.Cluster`).

One head (no GPUs: it runs nothing of ours) and worker nodes labelled `trainyard.io/node`
w1, w2, w3 with 4 GPUs each, declared to Ray (there are no GPUs here: the executor is told
they are virtual, and jobs on them run on the CPU). w1 and w2 are in rack r1, w3 in r2. The
head uses fast health checks (a dead node is noticed in about 1.5 s instead of ~14 s,
docs/ray.md). A test may remove nodes (`remove`); `ensure()` adds back the missing ones
under the same names, so every test starts with the three.

Without Ray installed the tests skip, unless TRAINYARD_REQUIRE contains `ray` or CI=true:
then they fail, saying how to install it.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest

from trainyard.exec.ray.nodes import FAST_HEALTH_CHECKS

NODES = {"w1": "r1", "w2": "r1", "w3": "r2"}
GPUS_PER_NODE = 4


def required() -> bool:
    wanted = {p.strip().lower() for p in os.environ.get("TRAINYARD_REQUIRE", "").split(",")}
    return "ray" in wanted or os.environ.get("CI", "").strip().lower() == "true"


def import_ray() -> Any:
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # bind 127.0.0.1 only
    try:
        import ray
    except ImportError:
        hint = "pip install 'trainyard[ray]' (make test installs it)"
        if required():
            pytest.fail(f"Ray is required (TRAINYARD_REQUIRE/CI) but missing: {hint}", False)
        pytest.skip(f"Ray is not installed: {hint}")
    return ray


class RayWorld:
    """The cluster, its worker nodes by name, and the driver's connection to it."""

    def __init__(self) -> None:
        ray = import_ray()
        from ray.cluster_utils import Cluster

        self.ray = ray
        group, on_term = os.getpgrp(), signal.getsignal(signal.SIGTERM)
        # shutdown_at_exit=False: Ray would otherwise make this (the pytest) process a
        # process-group leader for a "reaper" that SIGTERMs the whole group, and install a
        # SIGTERM handler here that drains the node and calls sys.exit(1). A stray SIGTERM then
        # failed whichever unrelated test was running (seen once in a full run); `shutdown`
        # stops every process of the cluster instead.
        self.cluster = Cluster(
            initialize_head=True,
            shutdown_at_exit=False,
            head_node_args={"num_cpus": 1, "num_gpus": 0, "_system_config": FAST_HEALTH_CHECKS},
        )
        assert (os.getpgrp(), signal.getsignal(signal.SIGTERM)) == (group, on_term)
        self.workers: dict[str, Any] = {}
        ray.init(address=self.cluster.address, namespace="trainyard", log_to_driver=False,
                 include_dashboard=False)  # fmt: skip
        self.ensure()

    @property
    def address(self) -> str:
        return str(self.cluster.address)

    def ensure(self) -> None:
        """Every worker node of `NODES` alive (the removed ones added back)."""
        added = False
        for name, rack in NODES.items():
            if name not in self.workers:
                labels = {"trainyard.io/node": name, "trainyard.io/rack": rack}
                self.workers[name] = self.cluster.add_node(
                    num_cpus=2, num_gpus=GPUS_PER_NODE, labels=labels
                )
                added = True
        if added:
            self.cluster.wait_for_nodes()
            self._wait_alive(set(self.workers))

    def remove(self, name: str) -> float:
        """Remove a worker node (its raylet and every process on it die); the time it went."""
        node = self.workers.pop(name)
        self.cluster.remove_node(node, allow_graceful=False)
        return time.time()

    def _wait_alive(self, names: set[str], timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            alive = {
                (n.get("Labels") or {}).get("trainyard.io/node")
                for n in self.ray.nodes()
                if n.get("Alive")
            }
            if names <= alive:
                return
            time.sleep(0.1)
        raise AssertionError(f"Ray nodes {sorted(names)} did not come up")

    def shutdown(self) -> None:
        self.ray.shutdown()
        self.cluster.shutdown()
