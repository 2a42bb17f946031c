"""GPU health on a Ray cluster's nodes: one probe actor per node, NVML read there.

`GpuProbe` is a plain class that `Probes` makes a Ray actor, pinned to its node with a
hard node-affinity strategy and asking for no CPU or GPU. It opens NVML once
(`exec/gpuhealth.GpuHealth`) and keeps its XID event set for as long as it lives, so XID
errors between two checks are not missed; `check` answers (why checks are off there, or "",
and the problems found). `Probes` keeps a probe per live node with real GPUs (nodes whose
GPUs are declared virtual get none unless `always`), asks them all at once and waits at most
`CHECK_TIMEOUT_S`. A probe still starting or busy answers at a later check (at most one call
in flight each); one that failed, or did not answer `MAX_MISSES` checks in a row, is dropped
and made again (its node may be gone: Ray's liveness says so). Probes are owned by the
server's Ray driver and end with it.
"""

from __future__ import annotations

import logging
from typing import Any

from trainyard.exec.base import NodeInfo
from trainyard.exec.gpuhealth import GpuHealth, GpuProblem

log = logging.getLogger(__name__)

CHECK_TIMEOUT_S = 2.0
MAX_MISSES = 6


class GpuProbe:
    """NVML on one node (see the module docstring)."""

    def __init__(self) -> None:
        self._health = GpuHealth()
        self._reason = self._health.start()

    def check(self) -> tuple[str, list[tuple[int, str, str]]]:
        if self._reason:
            return self._reason, []
        return "", [(p.index, p.kind, p.detail) for p in self._health.check()]


class Probes:
    """The probe actors of one executor (see the module docstring)."""

    def __init__(self, ray: Any, namespace: str, always: bool = False) -> None:
        self._ray = ray
        self._namespace = namespace
        self.always = always
        self._actor = ray.remote(num_cpus=0, max_restarts=0)(GpuProbe)
        self._probes: dict[str, Any] = {}  # node name -> its probe
        self._calls: dict[str, Any] = {}  # node name -> its check in flight
        self._misses: dict[str, int] = {}  # node name -> checks in a row it did not answer
        self.off: dict[str, str] = {}  # node name -> why checks are off there

    def check(self, nodes: list[NodeInfo]) -> dict[str, list[GpuProblem]]:
        """The problems found on each live node that has a probe (made if missing)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray = self._ray
        wanted = {
            n.name: n
            for n in nodes
            if n.alive and n.gpus and n.engine_id and (self.always or not n.virtual)
        }
        for name in list(self._probes):
            if name not in wanted:
                self._drop(name)
        for name, node in wanted.items():
            if name not in self._probes:
                strategy = NodeAffinitySchedulingStrategy(node.engine_id, soft=False)
                self._probes[name] = self._actor.options(scheduling_strategy=strategy).remote()
            if name not in self._calls:
                self._calls[name] = self._probes[name].check.remote()
        refs = {ref: name for name, ref in self._calls.items()}
        if not refs:
            return {}
        ready, _late = ray.wait(list(refs), num_returns=len(refs), timeout=CHECK_TIMEOUT_S)
        done = {refs[ref] for ref in ready}
        for name in set(refs.values()) - done:
            self._misses[name] = self._misses.get(name, 0) + 1
            if self._misses[name] >= MAX_MISSES:
                log.warning("GPU probe on node %s does not answer: made again", name)
                self._drop(name)
        found: dict[str, list[GpuProblem]] = {}
        for ref in ready:
            name = refs[ref]
            self._calls.pop(name, None)
            self._misses.pop(name, None)
            try:
                why, problems = ray.get(ref)
            except ray.exceptions.RayError as error:
                log.warning("GPU probe on node %s failed: %s", name, error)
                self._drop(name)
                continue
            if why and self.off.get(name) != why:
                log.warning("GPU health checks off on node %s: %s", name, why)
            if why:
                self.off[name] = why
            else:
                self.off.pop(name, None)
            found[name] = [GpuProblem(i, kind, detail) for i, kind, detail in problems]
        return found

    def _drop(self, name: str) -> None:
        self._probes.pop(name, None)
        self._calls.pop(name, None)
        self._misses.pop(name, None)
