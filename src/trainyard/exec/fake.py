"""`FakeExecutor`: runs nothing, for tests of the platform loop only.

Runs live in memory. A test decides how each one ends (`finish`, `lose`; `settled=False`:
a process of the run is still alive), whose stops take time (`slow`: a stop leaves the run
stopping until `finish`), which nodes exist (`set_nodes`), and which nodes a launch fails on
(`gone`). With a `root_dir` that exists, a stop is recorded in the run's `stop.json`, as
the local executor records it. The platform then shows what it does with each outcome,
with no process started. Never used by the server: `trainyard up` takes `local` or `ray`
only.
"""

from __future__ import annotations

import time
from pathlib import Path

from trainyard.exec import jobdirs
from trainyard.exec.base import NodeInfo
from trainyard.exec.gpuhealth import GpuProblem
from trainyard.exec.run import LaunchSpec, NodeGone, RankInfo, RunHandle, RunState, RunStatus


class FakeExecutor:
    name = "fake"

    def __init__(self, root_dir: Path = Path("/nonexistent"), grace_s: float = 0.0) -> None:
        self.root_dir = root_dir
        self.grace_s = grace_s
        self.launched: list[LaunchSpec] = []
        self.stopped: list[tuple[str, int, str]] = []
        self.gone: set[str] = set()  # launches naming one of these nodes fail (NodeGone)
        self.slow: set[str] = set()  # jobs whose stop does not end the run (until `finish`)
        self._nodes: list[NodeInfo] | None = None
        self.faults: dict[str, list[GpuProblem]] = {}  # what gpu_problems reports
        self._runs: dict[tuple[str, int], RunHandle] = {}
        self._status: dict[tuple[str, int], RunStatus] = {}

    # ---- what a test controls ---------------------------------------------------------

    def set_nodes(self, nodes: list[NodeInfo] | None) -> None:
        self._nodes = nodes

    def gpu_problems(self) -> dict[str, list[GpuProblem]]:
        """What a test put in `faults` (node -> problems), reported until it takes it out."""
        return {node: list(found) for node, found in self.faults.items()}

    def finish(
        self, job_id: str, codes: dict[int, int | None], infra: bool = False,
        settled: bool = True,
    ) -> None:  # fmt: skip
        """End the latest run of `job_id` with these exit codes (None: the rank was lost);
        `settled=False`: a process of it is still alive (the others are being stopped)."""
        h = self._latest(job_id)
        bad = [r for r, c in codes.items() if c != 0]
        state: RunState = "succeeded" if not bad else "failed"
        reason = "all ranks exited with code 0" if not bad else f"rank {bad[0]} failed"
        if any(j == h.job_id and a == h.attempt for j, a, _r in self.stopped):
            state, reason = "stopped", "stopped on request"
        self._status[(h.job_id, h.attempt)] = RunStatus(
            state, dict(codes), bad[0] if bad else None, settled, reason, infra=infra
        )

    def lose(self, job_id: str, rank: int = 0) -> None:
        """The infrastructure lost a rank of the latest run (a node went away)."""
        h = self._latest(job_id)
        codes: dict[int, int | None] = {r.rank: -15 for r in h.ranks}
        codes[rank] = None
        self.finish(job_id, codes, infra=True)

    # ---- the executor interface -------------------------------------------------------

    def launch(self, spec: LaunchSpec) -> RunHandle:
        for host in spec.hosts:
            if host.node in self.gone:
                raise NodeGone(f"node {host.node} is gone", host.node)
        self.launched.append(spec)
        ranks = tuple(
            RankInfo(i, 0, None, Path("/dev/null"), (), h.node)
            for i, h in enumerate(h for h in spec.hosts for _ in range(h.workers))
        ) or (RankInfo(0, 0, None, Path("/dev/null"), spec.devices),)
        run_dir = self.job_dir(spec.job_id) / f"attempt-{spec.attempt}"
        handle = RunHandle(spec.job_id, spec.attempt, 0, 0, run_dir, ranks)
        self._runs[(spec.job_id, spec.attempt)] = handle
        codes: dict[int, int | None] = {r.rank: None for r in ranks}
        self._status[(spec.job_id, spec.attempt)] = RunStatus("running", codes, None, False)
        return handle

    def poll(self, handle: RunHandle) -> RunStatus:
        return self._status[(handle.job_id, handle.attempt)]

    def request_stop(self, handle: RunHandle, reason: str = "") -> RunStatus:
        key = (handle.job_id, handle.attempt)
        self.stopped.append((handle.job_id, handle.attempt, reason))
        if self._status[key].settled:
            return self._status[key]
        if self.root_dir.is_dir():
            handle.run_dir.mkdir(parents=True, exist_ok=True)
            jobdirs.record_stop(handle.run_dir, reason, time.time())
        codes: dict[int, int | None] = {r.rank: -15 for r in handle.ranks}
        if handle.job_id in self.slow:
            codes = dict.fromkeys(codes)
        settled = handle.job_id not in self.slow
        self._status[key] = RunStatus("stopped", codes, None, settled, f"stopped ({reason})")
        return self._status[key]

    def stop(self, handle: RunHandle, grace_s: float | None = None, reason: str = "") -> RunStatus:
        return self.request_stop(handle, reason)

    def adopt(self, job_id: str, attempt: int | None = None) -> RunHandle | None:
        if attempt is None:
            found = [h for (j, _a), h in self._runs.items() if j == job_id]
            return max(found, key=lambda h: h.attempt) if found else None
        return self._runs.get((job_id, attempt))

    def known_jobs(self) -> list[str]:
        return sorted({j for j, _a in self._runs})

    def handles(self) -> list[RunHandle]:
        return list(self._runs.values())

    def job_dir(self, job_id: str) -> Path:
        return self.root_dir / "jobs" / job_id

    def nodes(self) -> list[NodeInfo] | None:
        return self._nodes

    def notes(self) -> list[str]:
        return ["fake executor: nothing runs (tests only)"]

    def close(self) -> None:
        """Nothing to release."""

    def _latest(self, job_id: str) -> RunHandle:
        handle = self.adopt(job_id)
        if handle is None:
            raise KeyError(f"no run of {job_id}")
        return handle
