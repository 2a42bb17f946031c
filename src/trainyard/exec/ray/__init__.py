"""`RayExecutor`: a job's ranks as Ray actors, each on exactly the node and devices the core
chose (install with `pip install 'trainyard[ray]'`).

Connecting: `ray.init(address=...)` (an existing cluster: `ray://` or `host:port`; None
with no cluster running starts a local Ray, which tests do not use: they start
`ray.cluster_utils.Cluster`). Nodes come from `ray.nodes()` (`nodes.from_ray`: names, GPUs,
types, topology labels); the platform stores them and marks those Ray lost as LOST.

Launch: one `RankSupervisor` actor per rank (`actor.py`), detached, named
`<job>.<attempt>.<rank>` in the namespace `trainyard`, pinned with
`NodeAffinitySchedulingStrategy(node_id, soft=False)` and asking Ray for no CPU or GPU:
trainyard owns the GPUs of the nodes it schedules (`CUDA_VISIBLE_DEVICES` is set from the
core's choice, as the local executor sets it). The environment is the local executor's
(`jobenv`), with torchrun's multi-node variables: `WORLD_SIZE` (all ranks), `NODE_RANK` /
`GROUP_RANK`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `MASTER_ADDR` = rank 0's node and
`MASTER_PORT` a port free there. The job's directory (checkpoints, home, notice file) is the
server's `runs` directory: on a real cluster it must be a shared filesystem mounted at the
same path on every node (docs/ray.md).

Fencing: before attempt N of a job starts, every actor of an earlier attempt that Ray still
knows is killed and waited for; a rank's process dies with its actor (parent-death signal),
so no rank of an old attempt outlives it.

Status: each rank's `wait` is an object ref; `poll` looks at them without blocking. A rank
whose actor died (its node left, its process was killed) is *lost*: the run fails with
`RunStatus.infra` set, which costs the job no restart. Output is relayed by `poll` from each
actor's buffer to `<job dir>/logs/attempt-N/rank-R.log` on the server, so the log API is the
local executor's. A watcher thread wakes the server's loop (`set_waker`) as soon as a rank
ends or the set of live nodes changes.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainyard.exec import jobdirs, jobenv, procfs
from trainyard.exec.base import NodeInfo
from trainyard.exec.jobdirs import job_dir, private_dir, server_user
from trainyard.exec.ray.actor import RankSupervisor
from trainyard.exec.ray.logfile import append_capped
from trainyard.exec.ray.nodes import from_ray
from trainyard.exec.run import (
    DeviceBusy,
    LaunchSpec,
    NodeGone,
    RankInfo,
    RunHandle,
    RunState,
    RunStatus,
    describe_code,
    from_record,
    positions,
    record,
)

NAMESPACE = "trainyard"
DEFAULT_LOG_CAP = 64 * 1024 * 1024
START_TIMEOUT_S = 60.0


class RayMissing(RuntimeError):
    """Ray is not installed, or the cluster cannot be reached (the message says which)."""


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayMissing(
            "the Ray executor needs Ray: pip install 'trainyard[ray]' (ray is not installed)"
        ) from None
    return ray


@dataclass
class _Run:
    """What this process knows of one attempt: actors, pending refs, outcomes."""

    handle: RunHandle
    actors: dict[int, Any] = field(default_factory=dict)
    waits: dict[int, Any] = field(default_factory=dict)  # rank -> ref of `wait`
    reads: dict[int, Any] = field(default_factory=dict)  # rank -> ref of `read`
    codes: dict[int, int | None] = field(default_factory=dict)  # ended ranks
    lost: dict[int, str] = field(default_factory=dict)  # ranks whose actor died -> why
    ended_at: dict[int, float] = field(default_factory=dict)
    drained: set[int] = field(default_factory=set)  # ended ranks whose output is all relayed
    killed: set[int] = field(default_factory=set)  # lost because we killed the actor
    released: bool = False


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
        job_env: tuple[str, ...] = (),
        log_cap_bytes: int = DEFAULT_LOG_CAP,
        namespace: str = NAMESPACE,
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
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            try:
                ray.init(
                    address=address,
                    namespace=namespace,
                    log_to_driver=False,
                    include_dashboard=False,
                    configure_logging=False,
                )
            except Exception as error:  # ConnectionError, ValueError, RuntimeError ...
                raise RayMissing(f"cannot connect to Ray at {address or 'auto'}: {error}") from None
        self.address = address or ""
        self._actor = ray.remote(max_concurrency=4, num_cpus=0, max_restarts=0)(RankSupervisor)
        self._runs: dict[tuple[str, int], _Run] = {}
        self._latest: dict[str, _Run] = {}
        self._node_ids: dict[str, str] = {}  # node name -> Ray node id (alive nodes)
        self._lock = threading.Lock()
        self._waker: Any = None
        self._watch_stop = threading.Event()
        self._watcher: threading.Thread | None = None

    # ---- nodes -------------------------------------------------------------------------

    def nodes(self) -> list[NodeInfo]:
        """The cluster's nodes now (dead ones with `alive=False`)."""
        found = from_ray(self._ray.nodes(), self.virtual_gpus)
        self._node_ids = {n.name: n.engine_id for n in found if n.alive}
        return found

    def notes(self) -> list[str]:
        where = self.address or "a local Ray"
        return [
            f"Ray executor on {where}: ranks run as the Ray workers' user, without cgroup "
            "limits of trainyard's (the runs directory must be shared by every node)"
        ]

    def job_dir(self, job_id: str) -> Path:
        return job_dir(self.root_dir, job_id)

    def handles(self) -> list[RunHandle]:
        return [run.handle for run in self._latest.values()]

    def known_jobs(self) -> list[str]:
        jobs = self.root_dir / "jobs"
        return sorted(p.name for p in jobs.iterdir() if p.is_dir()) if jobs.is_dir() else []

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
            raise NodeGone(f"node {missing[0]} is not in the Ray cluster (lost or never joined)")
        self._fence(spec.job_id, spec.attempt)
        busy = self._busy(spec)
        if busy:
            raise DeviceBusy(spec.job_id, busy)
        jd = self.job_dir(spec.job_id)
        run_dir = jd / f"attempt-{spec.attempt}"
        if (run_dir / "run.json").exists():
            raise FileExistsError(f"{spec.job_id} attempt {spec.attempt} was already launched")
        log_dir = jd / "logs" / f"attempt-{spec.attempt}"
        for d in (self.root_dir, self.root_dir / "jobs", jd):
            private_dir(d, 0o711)
        for d in (run_dir, jd / "logs", log_dir, jd / "checkpoints", jd / "home", jd / "tmp"):
            private_dir(d, 0o700)
        jobdirs.clear_notice(jd)
        world = sum(h.workers for h in spec.hosts)
        handle = RunHandle(spec.job_id, spec.attempt, 0, 0, run_dir, (), tuple(self.notes()))
        handle.workers = world
        procfs.write_json_atomic(run_dir / "run.json", record(handle))
        run = _Run(handle)
        try:
            self._start(spec, run, log_dir, world)
        except BaseException:
            self._kill_all(run)
            raise
        procfs.write_json_atomic(run_dir / "run.json", record(handle))
        self._track(run)
        return handle

    def _start(self, spec: LaunchSpec, run: _Run, log_dir: Path, world: int) -> None:
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
            raise NodeGone(f"rank 0 could not start on node {where_}: {error}") from None
        h.port = port
        base = jobenv.job_environment(
            spec_env=spec.env,
            own=self._own_env(spec, world, len(spec.hosts), str(where["address"]), port),
            home=(jd / "home").resolve(),
            tmp=(jd / "tmp").resolve(),
            user=server_user(),
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
            starts[rank] = (run.actors[rank].start.remote(list(spec.command), env, cwd), devices)
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
                raise NodeGone(why) from None
            ranks.append(RankInfo(info.rank, int(got["pid"]), None, info.log, info.devices,
                                  info.node))  # fmt: skip
        h.ranks = tuple(ranks)
        h.pgid = ranks[0].pid if ranks else 0

    def _own_env(
        self, spec: LaunchSpec, world: int, nnodes: int, master: str, port: int
    ) -> dict[str, str]:
        own = {
            "WORLD_SIZE": str(world),
            "GROUP_WORLD_SIZE": str(nnodes),
            "ROLE_NAME": "default",
            "ROLE_WORLD_SIZE": str(world),
            "MASTER_ADDR": master,
            "MASTER_PORT": str(port),
            "TORCHELASTIC_RESTART_COUNT": str(spec.attempt),
            "TORCHELASTIC_RUN_ID": spec.job_id,
            "PYTHONUNBUFFERED": "1",
            "TRAINYARD_JOB_ID": spec.job_id,
            "TRAINYARD_ATTEMPT": str(spec.attempt),
            "TRAINYARD_CHECKPOINT_DIR": str((self.job_dir(spec.job_id) / "checkpoints").resolve()),
            "TRAINYARD_API_URL": self.api_url,
            "TRAINYARD_TOKEN": spec.token,
            "TRAINYARD_NOTICE_FILE": str(jobdirs.notice_path(self.job_dir(spec.job_id)).resolve()),
            "TRAINYARD_EXECUTOR": "ray",
        }
        if spec.virtual_gpus:
            own["TRAINYARD_VIRTUAL_GPUS"] = "1"
        if spec.array is not None:
            own.update(TRAINYARD_ARRAY_ID=spec.array[0], TRAINYARD_ARRAY_INDEX=str(spec.array[1]))
        return own

    def _busy(self, spec: LaunchSpec) -> dict[int, tuple[str, int]]:
        """Devices of the launch that a live run of another attempt holds (by device index
        of rank 0's node first; the node is named in the holder's placement)."""
        wanted = {(h.node, d) for h in spec.hosts for d in h.devices}
        busy: dict[int, tuple[str, int]] = {}
        for key, run in list(self._runs.items()):
            if self._settled(run):
                continue
            for r in run.handle.ranks:
                for d in r.devices:
                    if (r.node, d) in wanted:
                        busy[d] = key
        return busy

    def _fence(self, job_id: str, attempt: int) -> None:
        """Kill every actor of an earlier attempt of `job_id` that Ray still knows."""
        ray = self._ray
        for (job, number), run in list(self._runs.items()):
            if job == job_id and number < attempt and not self._settled(run):
                self._kill_all(run)
        prefix = f"{job_id}."
        names = [
            n for n in ray.util.list_named_actors() if isinstance(n, str) and n.startswith(prefix)
        ]
        old = [n for n in names if _attempt_of(n, prefix) is not None]
        old = [n for n in old if (_attempt_of(n, prefix) or 0) < attempt]
        for name in old:
            with contextlib.suppress(ValueError, ray.exceptions.RayError):
                ray.kill(ray.get_actor(name, namespace=self.namespace), no_restart=True)
        deadline = time.monotonic() + 10.0
        while old and time.monotonic() < deadline:
            alive = set(ray.util.list_named_actors())
            old = [n for n in old if n in alive]
            if old:
                time.sleep(0.05)

    def _track(self, run: _Run) -> None:
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
        run_dir = _attempt_dir(base, attempt)
        data = procfs.read_json(run_dir / "run.json") if run_dir else None
        if run_dir is None or not isinstance(data, dict):
            return None
        handle = from_record(data, run_dir)
        if (job_id, handle.attempt) in self._runs:
            return self._runs[(job_id, handle.attempt)].handle
        run = _Run(handle)
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

    def _settled(self, run: _Run) -> bool:
        return all(r.rank in run.codes or r.rank in run.lost for r in run.handle.ranks)

    def _collect(self, run: _Run) -> None:
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
                try:
                    run.codes[rank] = int(ray.get(ref))
                except ray.exceptions.RayError as error:
                    run.lost[rank] = _lost_reason(run.handle, rank, error)
                run.ended_at.setdefault(rank, time.time())
                with self._lock:
                    run.waits.pop(rank, None)
        self._relay(run)

    def _relay(self, run: _Run) -> None:
        """Append each rank's new output to its log on the server: one read in flight per
        rank (calls to a threaded actor may overlap, so never two); a rank that ended gets
        one last read of what it buffered before `wait` returned."""
        ray = self._ray
        logs = {r.rank: r.log for r in run.handle.ranks}
        for rank, actor in run.actors.items():
            if rank in run.lost or rank in run.drained or run.released:
                continue
            ref = run.reads.get(rank)
            if rank in run.codes:
                run.reads.pop(rank, None)
                with contextlib.suppress(ray.exceptions.RayError, TimeoutError):
                    if ref is not None:
                        append_capped(logs[rank], ray.get(ref, timeout=5.0), self.log_cap_bytes)
                    last = ray.get(actor.read.remote(), timeout=5.0)
                    append_capped(logs[rank], last, self.log_cap_bytes)
                run.drained.add(rank)
                continue
            if ref is not None:
                ready, _ = ray.wait([ref], timeout=0)
                if not ready:
                    continue
                with contextlib.suppress(ray.exceptions.RayError):
                    append_capped(logs[rank], ray.get(ref), self.log_cap_bytes)
            run.reads[rank] = actor.read.remote()

    def poll(self, handle: RunHandle) -> RunStatus:
        run = self._runs.get((handle.job_id, handle.attempt))
        if run is None:
            adopted = self.adopt(handle.job_id, handle.attempt)
            run = self._runs.get((handle.job_id, handle.attempt)) if adopted else None
        if run is None:
            return RunStatus("lost", {}, None, True, "no record of the run", infra=True)
        self._collect(run)
        h = run.handle
        codes: dict[int, int | None] = {r.rank: None for r in h.ranks}
        codes.update(run.codes)
        settled = self._settled(run)
        failures = sorted(
            (run.ended_at.get(rank, 0.0), rank)
            for rank in codes
            if rank in run.lost or (rank in run.codes and run.codes[rank] != 0)
        )
        first = failures[0][1] if failures else None
        stop = procfs.read_json(h.run_dir / "stop.json")
        stop_at = float(stop["at"]) if isinstance(stop, dict) else None
        ended = [run.ended_at[r] for r in codes if r in run.ended_at]
        all_done = settled
        last_end = max(ended) if all_done and ended else None
        state: RunState
        infra = False
        if stop_at is not None and (last_end is None or stop_at <= last_end):
            assert isinstance(stop, dict)
            state, reason = "stopped", f"stopped on request ({stop.get('reason', '')})"
        elif all_done and not failures:
            state, reason = "succeeded", f"all {len(codes)} ranks exited with code 0"
        elif first is not None:
            state = "failed"
            # a rank whose actor died took its peers down with it: the lost rank is the
            # cause, whichever exit arrived first (peers fail at once on a dead collective)
            died = sorted((run.ended_at[r], r) for r in run.lost if r not in run.killed)
            if died:
                first = died[0][1]
                infra, reason = True, f"rank {first} lost: {run.lost[first]}"
            else:
                reason = f"rank {first} {describe_code(run.codes[first])}"
        else:
            state, reason = "running", ""
        if not h.complete:
            state, infra = "failed", True
            reason = f"launch interrupted: {len(h.ranks)} of {h.workers} ranks were started"
        if state == "failed" and not settled:
            self._escalate(run, time.monotonic())
            # judged once every rank is accounted for (whose fault it was needs them all)
            state, infra, reason = "running", False, f"stopping: {reason}"
        elif stop_at is not None and not settled and time.time() - stop_at >= self.grace_s:
            self._signal(run, signal.SIGKILL)
        if settled:
            self._release(run)
        return RunStatus(state, codes, first, settled, reason, infra=infra)

    # ---- stopping ----------------------------------------------------------------------

    def _signal(self, run: _Run, sig: signal.Signals) -> None:
        for rank, actor in run.actors.items():
            if rank not in run.codes and rank not in run.lost:
                actor.signal.remote(int(sig))

    def _escalate(self, run: _Run, now: float) -> None:
        h = run.handle
        if h.term_sent_at is None:
            h.term_sent_at = now
            self._signal(run, signal.SIGTERM)
        elif now - h.term_sent_at >= self.grace_s:
            self._signal(run, signal.SIGKILL)
            if now - h.term_sent_at >= self.grace_s + 10.0:  # unresponsive actors
                self._kill_all(run)

    def _release(self, run: _Run) -> None:
        """Kill the detached actors of a settled run (they would stay otherwise)."""
        if run.released:
            return
        run.released = True
        self._kill_all(run)

    def _kill_all(self, run: _Run) -> None:
        ray = self._ray
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
            stop_file = handle.run_dir / "stop.json"
            if not stop_file.exists():
                procfs.write_json_atomic(stop_file, {"at": time.time(), "reason": reason})
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
        deadline = time.monotonic() + grace
        while not status.settled and time.monotonic() < deadline:
            time.sleep(0.05)
            status = self.poll(handle)
        if not status.settled:
            run = self._runs[(handle.job_id, handle.attempt)]
            self._signal(run, signal.SIGKILL)
            end = time.monotonic() + 5.0
            while not status.settled and time.monotonic() < end:
                time.sleep(0.05)
                status = self.poll(handle)
            if not status.settled:
                self._kill_all(run)
                status = self.poll(handle)
        return status

    # ---- waking the loop ---------------------------------------------------------------

    def set_waker(self, wake: Any) -> None:
        """Call `wake()` (from a thread) when a rank ends or the live nodes change."""
        self._waker = wake
        if self._watcher is None:
            self._watcher = threading.Thread(target=self._watch, name="ray-watch", daemon=True)
            self._watcher.start()

    def _watch(self) -> None:
        ray = self._ray
        alive: frozenset[str] | None = None
        last_nodes = 0.0
        while not self._watch_stop.is_set():
            with self._lock:
                refs = [ref for run in self._runs.values() for ref in run.waits.values()]
            try:
                if refs:
                    ready, _ = ray.wait(refs, num_returns=1, timeout=0.2)
                    if ready and self._waker is not None:
                        self._waker()
                        self._watch_stop.wait(0.2)  # the loop collects it meanwhile
                else:
                    self._watch_stop.wait(0.2)
                if time.monotonic() - last_nodes >= 0.5:
                    last_nodes = time.monotonic()
                    now = frozenset(n["NodeID"] for n in ray.nodes() if n.get("Alive"))
                    if alive is not None and now != alive and self._waker is not None:
                        self._waker()
                    alive = now
            except Exception:  # Ray shutting down: the loop stops with the server
                self._watch_stop.wait(0.5)

    def close(self) -> None:
        self._watch_stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=2.0)
        if self._owns_ray:
            with contextlib.suppress(Exception):
                self._ray.shutdown()


def _attempt_of(name: str, prefix: str) -> int | None:
    parts = name[len(prefix) :].split(".")
    return int(parts[0]) if len(parts) == 2 and parts[0].isdigit() else None


def _attempt_dir(base: Path, attempt: int | None) -> Path | None:
    if attempt is not None:
        d = base / f"attempt-{attempt}"
        return d if d.is_dir() else None
    found = [
        (int(p.name.split("-", 1)[1]), p)
        for p in (base.glob("attempt-*") if base.is_dir() else [])
        if p.name.split("-", 1)[1].isdigit()
    ]
    return max(found)[1] if found else None


def _lost_reason(h: RunHandle, rank: int, error: Exception) -> str:
    node = next((r.node for r in h.ranks if r.rank == rank), "?")
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return f"its supervisor on node {node} died ({type(error).__name__}: {text[:160]})"


__all__ = ["NAMESPACE", "RayExecutor", "RayMissing"]
