"""`RayExecutor`: a job's ranks as Ray actors, each on exactly the node and devices the core
chose (install with `pip install 'trainyard[ray]'`).

Connecting: `ray.init(address=...)` (an existing cluster: the head's `host:port`, checked
first by `connect.check_address`; None with no cluster running starts a local Ray, which
tests do not use: they start `ray.cluster_utils.Cluster`). Nodes come from `ray.nodes()`
(`nodes.from_ray`: names, GPUs, types, topology labels); the platform stores them and
marks those Ray lost as LOST.

Launch: one `RankSupervisor` actor per rank (`actor.py`), detached, named
`<job>.<attempt>.<rank>` in the namespace `trainyard`, pinned with
`NodeAffinitySchedulingStrategy(node_id, soft=False)` and asking Ray for no CPU or GPU:
trainyard owns the GPUs of the nodes it schedules (`CUDA_VISIBLE_DEVICES` is set from the
core's choice, as the local executor sets it). The environment is the local executor's
(`jobenv`), with torchrun's multi-node variables: `WORLD_SIZE` (all ranks), `NODE_RANK` /
`GROUP_RANK`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `MASTER_ADDR` = rank 0's node and
`MASTER_PORT` a port free there. The job's directory (checkpoints, home, notice file) is the
server's `runs` directory: on a real cluster it must be a shared filesystem mounted at the
same path on every node (docs/ray.md). Ranks run as the Ray workers' user, or with
`users` in mode dynamic (`--job-user dynamic`) as the job's own uid (its folders chowned).

Fencing: before attempt N of a job starts, every actor of an earlier attempt that Ray still
knows is killed and waited for; a rank's process dies with its actor (parent-death signal).
A rank on a node cut off from Ray outlives what Ray knows: the job's fence file names
attempt N first, every supervisor kills its rank once it reads a later attempt there, and
attempt N waits for them to read it when an earlier rank may be such a one (`fence.py`).

Status: each rank's `wait` is an object ref; `poll` looks at them without blocking. A rank
whose actor died (its node left, its process was killed) is *lost*: the run fails with
`RunStatus.infra` set, which costs the job no restart. Output is relayed by `poll` from each
actor's buffer to `<job dir>/logs/attempt-N/rank-R.log` on the server, so the log API is the
local executor's. A watcher thread wakes the server's loop (`set_waker`) as soon as a rank
ends or the set of live nodes changes.

GPU health: a probe actor on each node with real GPUs reads NVML there (`health.py`);
`gpu_problems` is what the platform's checks ask (loop/nodewatch.py).

Parts: `actor.py` (the rank supervisor), `nodes.py` (Ray's nodes as trainyard's), `health.py`
(the GPU probes), `runs.py` (what is known of an attempt and how it is judged), `watch.py`
(the watcher thread), `logfile.py` (relayed output, capped as local logs are), `fence.py`,
`connect.py` (the address check).
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from pathlib import Path
from typing import Any

from trainyard.exec import jobdirs, jobenv, procfs
from trainyard.exec.base import NodeInfo
from trainyard.exec.gpuhealth import GpuProblem
from trainyard.exec.identity import Identity, JobUsers
from trainyard.exec.jobdirs import job_dir, owned_dir, private_dir, server_user
from trainyard.exec.ray import connect, fence
from trainyard.exec.ray.actor import RankSupervisor
from trainyard.exec.ray.connect import RayMissing, check_address, quiet_driver_errors, run_notes
from trainyard.exec.ray.health import Probes
from trainyard.exec.ray.logfile import relay
from trainyard.exec.ray.nodes import duplicates, from_ray, report_clashes
from trainyard.exec.ray.runs import RayRun, busy_devices, exit_of, judge, lost_reason
from trainyard.exec.ray.watch import Watcher
from trainyard.exec.run import (
    DeviceBusy,
    LaunchSpec,
    NodeGone,
    RankInfo,
    RunHandle,
    RunStatus,
    from_record,
    positions,
    record,
)

NAMESPACE = "trainyard"
DEFAULT_LOG_CAP = 64 * 1024 * 1024
START_TIMEOUT_S = 60.0
UNRESPONSIVE_S = 10.0  # after SIGKILL was asked: a supervisor this slow is killed by Ray
SWEEP_TIMEOUT_S = 5.0  # the supervisors' sweep of the job's uid, at the end of a run


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayMissing(
            "the Ray executor needs Ray: pip install 'trainyard[ray]' (ray is not installed)"
        ) from None
    return ray


class RayExecutor:
    name = "ray"

    def __init__(
        self,
        root_dir: Path,
        *,
        address: str | None = None,
        api_url: str = "",
        grace_s: float = 10.0,
        virtual_gpus: bool = False,
        gpu_checks: bool | None = None,
        job_env: tuple[str, ...] = (),
        log_cap_bytes: int = DEFAULT_LOG_CAP,
        namespace: str = NAMESPACE,
        users: JobUsers | None = None,
    ) -> None:
        ray = _ray()
        self._ray = ray
        self.root_dir = Path(root_dir)
        self.api_url = api_url
        self.grace_s = grace_s
        self.virtual_gpus = virtual_gpus
        self.job_env = job_env
        self.log_cap_bytes = log_cap_bytes
        self.namespace = namespace
        self.users = users if users is not None else JobUsers("server")
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            check_address(address)  # ray.init would wait for ever where nothing listens
            try:
                ray.init(
                    address=address,
                    namespace=namespace,
                    log_to_driver=False,
                    include_dashboard=False,
                    configure_logging=False,
                )
            except Exception as error:  # ConnectionError, ValueError, RuntimeError ...
                raise RayMissing(connect.refusal(address, error)) from None
            quiet_driver_errors(ray)
        self.address = address or ""
        self._actor = ray.remote(max_concurrency=4, num_cpus=0, max_restarts=0)(RankSupervisor)
        self._runs: dict[tuple[str, int], RayRun] = {}
        self._latest: dict[str, RayRun] = {}
        self._node_ids: dict[str, str] = {}  # node name -> Ray node id (alive nodes)
        self._clashes: dict[str, list[str]] = {}  # names two live nodes claim (logged)
        self._lock = threading.Lock()
        self._watcher: Watcher | None = None
        # GPU health on each node (health.py): None checks nodes with real GPUs only
        self._probes: Probes | None = (
            None if gpu_checks is False else Probes(ray, namespace, always=bool(gpu_checks))
        )
        self._found: list[NodeInfo] = []

    # ---- nodes -------------------------------------------------------------------------

    def nodes(self) -> list[NodeInfo]:
        """The cluster's nodes now (dead ones with `alive=False`); two live nodes claiming
        one name are logged as an error once per clash (`nodes.duplicates`)."""
        records = self._ray.nodes()
        found = from_ray(records, self.virtual_gpus, prefer=self._node_ids)
        self._clashes = report_clashes(duplicates(records), found, self._clashes)
        self._node_ids = {n.name: n.engine_id for n in found if n.alive}
        self._found = found
        return found

    def gpu_problems(self) -> dict[str, list[GpuProblem]]:
        """GPU faults found now on each node that is checked (health.py)."""
        if self._probes is None:
            return {}
        return self._probes.check(self._found or self.nodes())

    def gpu_checks_off(self) -> dict[str, str]:
        """Nodes whose GPUs cannot be checked, and why (e.g. no NVML driver there)."""
        return dict(self._probes.off) if self._probes is not None else {}

    def notes(self) -> list[str]:
        real = any(n.alive and not n.virtual for n in self._found or self.nodes())
        on = self._probes is not None and ((real and not self.virtual_gpus) or self._probes.always)
        return run_notes(self.address, self.users.mode != "server", on)

    def job_dir(self, job_id: str) -> Path:
        return job_dir(self.root_dir, job_id)

    def handles(self) -> list[RunHandle]:
        return [run.handle for run in self._latest.values()]

    def known_jobs(self) -> list[str]:
        return jobdirs.known_jobs(self.root_dir)

    # ---- launch ------------------------------------------------------------------------

    def launch(self, spec: LaunchSpec) -> RunHandle:
        if not spec.command:
            raise ValueError("command: must not be empty")
        if not spec.hosts:
            raise ValueError("hosts: the Ray executor needs the nodes of the run")
        if not all(h.node in self._node_ids for h in spec.hosts):
            self.nodes()
        missing = [h.node for h in spec.hosts if h.node not in self._node_ids]
        if missing:
            why = f"node {missing[0]} is not in the Ray cluster (lost or never joined)"
            raise NodeGone(why, missing[0])
        jd = self.job_dir(spec.job_id)
        for d in (self.root_dir, self.root_dir / "jobs", jd):
            private_dir(d, 0o711)
        earlier = [n for n in jobdirs.attempts(jd) if n < spec.attempt]
        seen = {n: run for (job, n), run in self._runs.items() if job == spec.job_id}
        unsure = fence.unsure(earlier, seen)
        fence.write(jd, spec.attempt)  # ranks of earlier attempts that read it stop
        self._fence(spec.job_id, spec.attempt)
        if unsure:  # ranks that may live where nobody can reach them: give them time to read
            time.sleep(fence.WAIT_S)
        busy = busy_devices(list(self._runs.items()), spec.hosts)
        if busy:
            raise DeviceBusy(spec.job_id, busy)
        run_dir = jd / f"attempt-{spec.attempt}"
        if (run_dir / "run.json").exists():
            raise FileExistsError(f"{spec.job_id} attempt {spec.attempt} was already launched")
        log_dir = jd / "logs" / f"attempt-{spec.attempt}"
        for d in (run_dir, jd / "logs", log_dir):
            private_dir(d, 0o700)
        who = self.users.for_job(jd)  # the server's user, or the job's own uid (dynamic)
        for d in (jd / "checkpoints", jd / "home", jd / "tmp"):
            owned_dir(d, who)
        jobdirs.clear_notice(jd)
        world = sum(h.workers for h in spec.hosts)
        handle = RunHandle(spec.job_id, spec.attempt, 0, 0, run_dir, (), tuple(self.notes()))
        handle.workers, handle.uid = world, who.uid  # the job's own uid (dynamic), or None
        procfs.write_json_atomic(run_dir / "run.json", record(handle))
        run = RayRun(handle)
        try:
            self._start(spec, run, log_dir, world, who)
        except BaseException:
            self._kill_all(run)
            raise
        procfs.write_json_atomic(run_dir / "run.json", record(handle))
        self._track(run)
        return handle

    def _start(
        self, spec: LaunchSpec, run: RayRun, log_dir: Path, world: int, who: Identity
    ) -> None:
        ray = self._ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        h, jd = run.handle, self.job_dir(spec.job_id)
        rank, placed = 0, []
        for node_rank, host in enumerate(spec.hosts):
            strategy = NodeAffinitySchedulingStrategy(self._node_ids[host.node], soft=False)
            for local in range(host.workers):
                actor = self._actor.options(
                    name=f"{spec.job_id}.{spec.attempt}.{rank}",
                    namespace=self.namespace,
                    lifetime="detached",
                    scheduling_strategy=strategy,
                ).remote()
                run.actors[rank] = actor
                placed.append((rank, node_rank, local, host))
                rank += 1
        try:
            where = ray.get(run.actors[0].node.remote(), timeout=START_TIMEOUT_S)
            port = int(ray.get(run.actors[0].free_port.remote(), timeout=START_TIMEOUT_S))
        except (ray.exceptions.RayError, TimeoutError) as error:
            where_ = spec.hosts[0].node
            raise NodeGone(f"rank 0 could not start on node {where_}: {error}", where_) from None
        h.port = port
        own = jobenv.launch_variables(
            spec, world=world, nnodes=len(spec.hosts), master=str(where["address"]), port=port,
            job_dir=jd, api_url=self.api_url,
        )  # fmt: skip
        own["TRAINYARD_EXECUTOR"] = "ray"
        base = jobenv.job_environment(
            spec_env=spec.env,
            own=own,
            home=(jd / "home").resolve(),
            tmp=(jd / "tmp").resolve(),
            user=who.name or server_user(),
            passthrough=self.job_env,
        )
        cwd = str(spec.cwd) if spec.cwd else None
        starts = {}
        for rank, node_rank, local, host in placed:
            per = len(host.devices) // host.workers if host.workers else 0
            devices = host.devices[local * per : (local + 1) * per]
            shown = list(host.devices) if spec.visible_devices == "node" else []
            env = {
                **base,
                "RANK": str(rank),
                "LOCAL_RANK": str(local),
                "ROLE_RANK": str(rank),
                "NODE_RANK": str(node_rank),
                "GROUP_RANK": str(node_rank),
                "LOCAL_WORLD_SIZE": str(host.workers),
                "CUDA_VISIBLE_DEVICES": ",".join(map(str, shown or devices)),
                "TRAINYARD_RANK_DEVICES": ",".join(map(str, positions(shown, devices))),
                "TRAINYARD_NODE": host.node,
            }
            user = (who.uid, who.gid) if who.uid is not None and who.gid is not None else None
            start = run.actors[rank].start.remote(
                list(spec.command), env, cwd, str(fence.fence_file(jd)), spec.attempt, user
            )
            starts[rank] = (start, devices)
            log = log_dir / f"rank-{rank}.log"
            log.touch(mode=0o600)
            run.handle.ranks += (RankInfo(rank, 0, None, log, devices, host.node),)
        ranks = []
        for info in run.handle.ranks:
            ref, _devices = starts[info.rank]
            try:
                got = ray.get(ref, timeout=START_TIMEOUT_S)
            except (ray.exceptions.RayError, TimeoutError) as error:
                why = f"rank {info.rank} could not start on {info.node}: {error}"
                raise NodeGone(why, info.node) from None
            if got.get("error"):  # the command never ran (kept as the local wrapper keeps it)
                why = f"on node {info.node}: {got['error']}"
                procfs.write_json_atomic(run.handle.exit_file(info.rank), {"error": why})
            ranks.append(RankInfo(info.rank, int(got["pid"]), None, info.log, info.devices,
                                  info.node))  # fmt: skip
        h.ranks = tuple(ranks)
        h.pgid = ranks[0].pid if ranks else 0

    def _fence(self, job_id: str, attempt: int) -> None:
        """Kill every actor of an earlier attempt of `job_id` that Ray still knows."""
        for (job, number), run in list(self._runs.items()):
            if job == job_id and number < attempt and not run.settled:
                self._kill_all(run)
        fence.kill_named(self._ray, self.namespace, job_id, attempt)

    def _track(self, run: RayRun) -> None:
        h = run.handle
        with self._lock:
            self._runs[(h.job_id, h.attempt)] = run
            self._latest[h.job_id] = run
            for rank, actor in run.actors.items():
                if rank not in run.waits and rank not in run.codes and rank not in run.lost:
                    run.waits[rank] = actor.wait.remote()

    # ---- adoption ----------------------------------------------------------------------

    def adopt(self, job_id: str, attempt: int | None = None) -> RunHandle | None:
        ray = self._ray
        if attempt is not None and (job_id, attempt) in self._runs:
            return self._runs[(job_id, attempt)].handle
        base = self.job_dir(job_id)
        run_dir = jobdirs.attempt_dir(base, attempt)
        data = procfs.read_json(run_dir / "run.json") if run_dir else None
        if run_dir is None or not isinstance(data, dict):
            return None
        handle = from_record(data, run_dir)
        if (job_id, handle.attempt) in self._runs:
            return self._runs[(job_id, handle.attempt)].handle
        run = RayRun(handle)
        for info in handle.ranks:
            name = f"{job_id}.{handle.attempt}.{info.rank}"
            try:
                run.actors[info.rank] = ray.get_actor(name, namespace=self.namespace)
            except ValueError:
                run.lost[info.rank] = f"its actor {name} is gone"
                run.ended_at[info.rank] = time.time()
        self._track(run)
        return handle

    # ---- status ------------------------------------------------------------------------

    def _collect(self, run: RayRun) -> None:
        """Take the outcomes that have arrived and relay output (never blocks for long)."""
        ray = self._ray
        with self._lock:
            waits = dict(run.waits)
        if waits:
            ready, _ = ray.wait(list(waits.values()), num_returns=len(waits), timeout=0)
            done = {id(ref) for ref in ready}
            for rank, ref in waits.items():
                if id(ref) not in done:
                    continue
                at = None  # when it exited, by its node's clock (a lost rank: now)
                try:
                    run.codes[rank], at = exit_of(ray.get(ref))
                except ray.exceptions.RayError as error:
                    run.lost[rank] = lost_reason(run.handle, rank, error)
                run.ended_at.setdefault(rank, at or time.time())
                with self._lock:
                    run.waits.pop(rank, None)
        relay(self._ray, run, self.log_cap_bytes)

    def poll(self, handle: RunHandle) -> RunStatus:
        run = self._runs.get((handle.job_id, handle.attempt))
        if run is None:
            adopted = self.adopt(handle.job_id, handle.attempt)
            run = self._runs.get((handle.job_id, handle.attempt)) if adopted else None
        if run is None:
            return RunStatus("lost", {}, None, True, "no record of the run", infra=True)
        self._collect(run)
        stop = jobdirs.stop_record(run.handle.run_dir)
        verdict = judge(run, stop)
        if verdict.failing:
            self._escalate(run, time.monotonic())
        elif stop is not None and not run.settled:  # a requested stop past its grace period:
            past = time.time() - stop[0] - self.grace_s
            if past >= 0:
                self._signal(run, signal.SIGKILL)
            if past >= UNRESPONSIVE_S:  # actors that do not answer: killed by Ray
                self._kill_all(run)
        if run.settled:
            self._release(run)
        return RunStatus(verdict.state, run.exit_codes(), verdict.first, run.settled,
                         verdict.reason, infra=verdict.infra, ended_at=run.last_end(),
                         final=verdict.final)  # fmt: skip

    # ---- stopping ----------------------------------------------------------------------

    def _signal(self, run: RayRun, sig: signal.Signals) -> None:
        for rank, actor in run.actors.items():
            if rank not in run.codes and rank not in run.lost:
                actor.signal.remote(int(sig))

    def _escalate(self, run: RayRun, now: float) -> None:
        h = run.handle
        if h.term_sent_at is None:
            h.term_sent_at = now
            self._signal(run, signal.SIGTERM)
        elif now - h.term_sent_at >= self.grace_s:
            self._signal(run, signal.SIGKILL)
            if now - h.term_sent_at >= self.grace_s + UNRESPONSIVE_S:  # unresponsive actors
                self._kill_all(run)

    def _release(self, run: RayRun) -> None:
        """Kill the detached actors of a settled run (they would stay otherwise)."""
        if run.released:
            return
        run.released = True
        self._kill_all(run)

    def _kill_all(self, run: RayRun) -> None:
        ray = self._ray
        if run.handle.uid is not None and not run.swept:  # what left the ranks' sessions dies
            run.swept = True  # with the run: every process of the job's uid on their nodes
            sweeps = [actor.sweep.remote() for actor in run.actors.values()]
            with contextlib.suppress(Exception):
                ray.wait(sweeps, num_returns=len(sweeps), timeout=SWEEP_TIMEOUT_S)
        for rank, actor in list(run.actors.items()):
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
            if rank not in run.codes and rank not in run.lost:
                run.lost[rank] = "its actor was killed"
                run.killed.add(rank)
                run.ended_at.setdefault(rank, time.time())
        with self._lock:
            run.waits.clear()

    def request_stop(self, handle: RunHandle, reason: str = "") -> RunStatus:
        status = self.poll(handle)
        if status.state == "running":
            jobdirs.record_stop(handle.run_dir, reason, time.time())
        if status.settled:
            return status
        run = self._runs[(handle.job_id, handle.attempt)]
        if run.handle.term_sent_at is None:
            jobdirs.write_notice(self.job_dir(handle.job_id), reason)
            run.handle.term_sent_at = time.monotonic()
            self._signal(run, signal.SIGTERM)
        return self.poll(handle)

    def stop(self, handle: RunHandle, grace_s: float | None = None, reason: str = "") -> RunStatus:
        grace = self.grace_s if grace_s is None else grace_s
        status = self.request_stop(handle, reason)
        run = self._runs.get((handle.job_id, handle.attempt))
        for wait_s, then in ((grace, signal.SIGKILL), (5.0, None)):
            deadline = time.monotonic() + wait_s
            while not status.settled and time.monotonic() < deadline:
                time.sleep(0.05)
                status = self.poll(handle)
            if status.settled or run is None:
                return status
            if then is not None:
                self._signal(run, then)
        if run is not None:
            self._kill_all(run)  # actors that did not answer
        return self.poll(handle)

    # ---- waking the loop ---------------------------------------------------------------

    def set_waker(self, wake: Any) -> None:
        """Call `wake()` (from a thread) when a rank ends or the live nodes change."""
        if self._watcher is None:
            self._watcher = Watcher(self._ray, self._pending, wake)

    def _pending(self) -> list[Any]:
        with self._lock:
            return [ref for run in self._runs.values() for ref in run.waits.values()]

    def close(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
        if self._owns_ray:
            with contextlib.suppress(Exception):
                self._ray.shutdown()


__all__ = ["NAMESPACE", "RayExecutor", "RayMissing"]
