"""`LocalExecutor`: runs a job's ranks as real processes on this machine.

The layout under `root_dir/jobs/<job id>/` is `exec/jobdirs.py`'s.

Process groups: rank 0's wrapper starts a new process group (`process_group=0`) and every
other rank joins it (`process_group=<rank 0 pid>`), so one `killpg` reaches every process of
the job, the commands the wrappers started included (a new *session* could not be joined),
and a terminal's Ctrl-C on the server does not reach jobs.

Everything `poll` needs is on disk and identified by (pid, start time), so a new executor on
the same root (a restarted server) re-attaches with `adopt` and still learns each rank's exit
code from the wrapper's exit file. `run.json` is written before the first rank starts (with
the number of ranks meant to start) and after each one, so a launch cut short by a crash is
recognised: `poll` reports it failed and stops what did start. A job's processes put the
server's interpreter directory first on `PATH` (`python` is the virtualenv's). A job fails as
soon as one rank ends with a non-zero code: the others then get SIGTERM and, after the grace
period, SIGKILL.

Devices: the executor keeps a ledger of the devices its live runs hold (`device_holders`; a
run is live while any of its processes is). `launch` refuses (`DeviceBusy`, before anything
of the new run exists) to start a rank on a device that a live run holds, whatever the caller
asked: a job evicted a moment ago keeps its devices through its grace period. Stopping comes
in two forms: `request_stop` (SIGTERM now, SIGKILL from a later `poll` once the grace period
has passed since the stop was recorded; it never blocks, so a server loop goes on meanwhile)
and `stop` (the same, waited for).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from trainyard.exec import cgroups, jobdirs, jobenv, logs, procfs
from trainyard.exec.gpuhealth import GpuProblem
from trainyard.exec.identity import Identity, JobUsers
from trainyard.exec.jobdirs import job_dir, owned_dir, private_dir, server_user
from trainyard.exec.run import (
    DeviceBusy,
    LaunchSpec,
    RankInfo,
    RunHandle,
    RunState,
    RunStatus,
    describe_code,
    from_record,
    positions,
    record,
    split_devices,
)

DEFAULT_LOG_CAP = 64 * 1024 * 1024  # bytes of output kept per rank (rank-r.log + rank-r.log.1)
WRAPPER = Path(__file__).with_name("rankwrap.py")
# The rank wrapper's own environment: fixed, nothing of the job's. It runs as the server's
# user (root, when jobs run as uids of their own) until its child's exec, so a job's
# LD_PRELOAD there would run the job's code as that user (rankwrap's docstring).
WRAPPER_ENV: Final = {"PATH": jobenv.DEFAULT_PATH, "LANG": "C.UTF-8"}


class LocalExecutor:
    name = "local"

    def __init__(
        self,
        root_dir: Path,
        api_url: str = "",
        grace_s: float = 10.0,
        *,
        sys_root: Path = Path("/sys"),
        users: JobUsers | None = None,
        job_env: tuple[str, ...] = (),
        job_umask: int | None = None,
        log_cap_bytes: int = DEFAULT_LOG_CAP,
    ) -> None:
        self.root_dir = Path(root_dir)
        # who jobs run as (`exec/identity.py`; by default the server's user), which server
        # variables they get by name (`exec/jobenv.py`), and their umask as the server's user
        self.users = users if users is not None else JobUsers("server")
        self.job_env = job_env
        self.job_umask = job_umask
        self.log_cap_bytes = log_cap_bytes  # per rank: rankwrap keeps the newest this many
        self.api_url = api_url
        self.grace_s = grace_s
        self.cgroup_support = cgroups.detect(sys_root)
        self._handles: dict[str, RunHandle] = {}
        # every run launched or adopted that may still have processes, by (job, attempt):
        # the device ledger (a job's older attempt may outlive its latest handle)
        self._live: dict[tuple[str, int], RunHandle] = {}

    @property
    def limits_supported(self) -> bool:
        return self.cgroup_support.supported

    def nodes(self) -> None:
        """None: this executor runs on the server's own machine (the server registers it)."""

    def gpu_problems(self) -> dict[str, list[GpuProblem]]:
        """{}: the platform checks this machine's GPUs itself (loop/nodewatch.py)."""
        return {}

    def notes(self) -> list[str]:
        return [] if self.limits_supported else [self.cgroup_support.reason]

    def close(self) -> None:
        """Nothing to release: runs outlive the executor and are adopted again."""

    def handles(self) -> list[RunHandle]:
        """The latest run of every job this executor launched or adopted."""
        return list(self._handles.values())

    def job_dir(self, job_id: str) -> Path:
        return job_dir(self.root_dir, job_id)

    # ---- launch ------------------------------------------------------------------------

    def launch(self, spec: LaunchSpec) -> RunHandle:
        if spec.workers < 1:
            raise ValueError(f"workers: expected >= 1, got {spec.workers}")
        if not spec.command:
            raise ValueError("command: must not be empty")
        if spec.attempt < 0:
            raise ValueError(f"attempt: expected >= 0, got {spec.attempt}")
        if spec.cwd is not None and not Path(spec.cwd).is_dir():
            raise ValueError(
                f"working_dir: {spec.cwd} is not a directory on this machine; create it, or "
                "submit from a directory that exists"
            )
        per_rank = split_devices(spec.devices, spec.workers)
        shown = list(spec.devices) if spec.visible_devices == "node" else []
        busy = self._busy(spec.devices)
        if busy:
            raise DeviceBusy(spec.job_id, busy)
        job_dir = self.job_dir(spec.job_id)
        run_dir = job_dir / f"attempt-{spec.attempt}"
        if (run_dir / "run.json").exists():
            raise FileExistsError(f"{spec.job_id} attempt {spec.attempt} was already launched")
        log_dir = job_dir / "logs" / f"attempt-{spec.attempt}"
        for d in (self.root_dir, self.root_dir / "jobs", job_dir):
            private_dir(d, 0o711)  # others may pass through to their own directories only
        for d in (run_dir, job_dir / "logs", log_dir):
            private_dir(d, 0o700)
        who = self.users.for_job(job_dir)
        ckpt, home, tmp = job_dir / "checkpoints", job_dir / "home", job_dir / "tmp"
        jobdirs.seed(ckpt, spec.resume_from and self.job_dir(spec.resume_from))  # --resume-from
        for d in (ckpt, home, tmp):
            owned_dir(d, who)
        notes, cgroup = self._limits(spec)
        notes = (*notes, self._identity_note(who))
        port = procfs.free_port()
        own = jobenv.launch_variables(
            spec, world=spec.workers, nnodes=1, master="127.0.0.1", port=port,
            job_dir=job_dir, api_url=self.api_url,
        )  # fmt: skip
        own.update(LOCAL_WORLD_SIZE=str(spec.workers), GROUP_RANK="0")
        jobdirs.clear_notice(job_dir)
        base = jobenv.job_environment(
            spec_env=spec.env,
            own=own,
            home=home.resolve(),
            tmp=tmp.resolve(),
            user=who.name or server_user(),
            passthrough=self.job_env,
        )
        handle = RunHandle(spec.job_id, spec.attempt, 0, port, run_dir, (), notes, cgroup)
        handle.workers = spec.workers
        handle.uid = who.uid if self.users.mode == "dynamic" else None  # its alone
        self._save(handle)  # before any process: a crash mid-launch leaves a partial record
        ranks: list[RankInfo] = []
        try:
            for rank, devices in enumerate(per_rank):
                env = {
                    **base,
                    "RANK": str(rank),
                    "LOCAL_RANK": str(rank),
                    "ROLE_RANK": str(rank),
                    # as torchrun: every rank sees the job's devices here, LOCAL_RANK picks
                    "CUDA_VISIBLE_DEVICES": ",".join(map(str, shown or devices)),
                    "TRAINYARD_RANK_DEVICES": ",".join(map(str, positions(shown, devices))),
                }
                log = log_dir / f"rank-{rank}.log"
                env_in, env_out = os.pipe()  # the job's environment, for its command only
                argv = [sys.executable, "-I", "-S", str(WRAPPER), "--env-fd", str(env_in)]
                argv += ["--cwd", str(spec.cwd or os.getcwd())]  # entered as the job's user
                argv += ["--exit-file", str(handle.exit_file(rank))]
                argv += ["--pid-file", str(handle.pid_file(rank))]
                if cgroup is not None:
                    argv += ["--cgroup", str(cgroup)]
                argv += ["--log", str(log), "--log-cap", str(self.log_cap_bytes)]
                if who.uid is not None:
                    argv += ["--user", f"{who.uid}:{who.gid}", "--umask", "077"]
                elif self.job_umask is not None:
                    argv += ["--umask", f"{self.job_umask:03o}"]
                try:
                    with log.open("ab") as out:
                        proc = subprocess.Popen(
                            [*argv, "--", *spec.command],
                            stdin=subprocess.DEVNULL,
                            stdout=out,
                            stderr=subprocess.STDOUT,
                            cwd=run_dir,  # the wrapper's; its command's is --cwd
                            env=WRAPPER_ENV,
                            pass_fds=(env_in,),
                            process_group=handle.pgid,  # 0 for rank 0: a new group
                        )
                except BaseException:
                    os.close(env_out)
                    raise
                finally:
                    os.close(env_in)
                jobenv.send_environment(env_out, env)
                if rank == 0:
                    handle.pgid = proc.pid
                handle.procs[rank] = proc
                ranks.append(RankInfo(rank, proc.pid, procfs.start_time(proc.pid), log, devices))
                handle.ranks = tuple(ranks)
                self._save(handle)  # after every rank: a crash mid-launch leaves no stranger
        except BaseException:
            self._signal(handle, signal.SIGKILL)
            raise
        self._handles[spec.job_id] = handle
        self._live[(spec.job_id, spec.attempt)] = handle
        return handle

    # ---- the device ledger -------------------------------------------------------------

    def device_holders(self) -> dict[int, list[tuple[str, int]]]:
        """Device -> (job id, attempt) of every live run holding it (runs launched or adopted
        by this executor; more than one holder would be a double booking)."""
        out: dict[int, list[tuple[str, int]]] = {}
        for h in list(self._live.values()):
            if not self._alive_members(h):
                continue
            for r in h.ranks:
                for d in r.devices:
                    out.setdefault(d, []).append((h.job_id, h.attempt))
        return out

    def _busy(self, devices: tuple[int, ...]) -> dict[int, tuple[str, int]]:
        """The devices of `devices` that a live run holds, with the holder; forgets runs
        that have settled."""
        if not devices:
            return {}
        wanted = set(devices)
        busy: dict[int, tuple[str, int]] = {}
        for key, h in list(self._live.items()):
            if not self._alive_members(h):
                del self._live[key]
                continue
            for r in h.ranks:
                for d in wanted.intersection(r.devices):
                    busy[d] = key
        return busy

    def _limits(self, spec: LaunchSpec) -> tuple[tuple[str, ...], Path | None]:
        if spec.cpus is None and spec.memory_gb is None:
            return (), None
        support = self.cgroup_support
        if not support.supported:
            return (f"cpu/memory limits are not enforced: {support.reason}",), None
        try:
            name = f"{spec.job_id}-a{spec.attempt}"
            group = cgroups.JobCgroup.create(support, name, spec.cpus, spec.memory_gb)
        except OSError as e:
            return (f"cpu/memory limits are not enforced: cannot create a cgroup: {e}",), None
        return (f"cpu/memory limits enforced by cgroup {group.path}",), group.path

    def _identity_note(self, who: Identity) -> str:
        if who.uid is not None:
            return f"runs as uid {who.uid} ({who.name}), apart from the server and other jobs"
        return self.users.note or "runs as the server's user"

    def _save(self, h: RunHandle) -> None:
        procfs.write_json_atomic(h.run_dir / "run.json", record(h))

    # ---- adoption ----------------------------------------------------------------------

    def adopt(self, job_id: str, attempt: int | None = None) -> RunHandle | None:
        """Re-attach to the latest (or given) attempt recorded on disk; None when there is no
        record. Poll the handle to learn whether it still runs, ended, or was lost."""
        run_dir = jobdirs.attempt_dir(self.job_dir(job_id), attempt)
        data = procfs.read_json(run_dir / "run.json") if run_dir else None
        if run_dir is None or not isinstance(data, dict):
            return None
        handle = from_record(data, run_dir)
        self._handles[job_id] = handle
        self._live.setdefault((job_id, handle.attempt), handle)
        return handle

    def known_jobs(self) -> list[str]:
        return jobdirs.known_jobs(self.root_dir)

    # ---- status and stopping -----------------------------------------------------------

    def _members(self, h: RunHandle) -> list[tuple[int, int | None]]:
        """(pid, start time) of every process we know of: wrappers and their commands."""
        members = [(r.pid, r.start_time) for r in h.ranks]
        for r in h.ranks:
            rec = procfs.read_json(h.pid_file(r.rank))
            if isinstance(rec, dict):
                members.append((int(rec["pid"]), rec.get("start_time")))
        return members

    def _recorded_alive(self, h: RunHandle) -> list[int]:
        # our own children (the wrappers) are alive until reaped: a wrapper's main thread is a
        # zombie in /proc while its log thread still exits, and waitpid waits for both
        ours = {proc.pid for proc in h.procs.values() if proc.poll() is None}
        return [
            pid for pid, started in self._members(h) if pid in ours or procfs.alive(pid, started)
        ]

    def _strays(self, h: RunHandle, known: list[int]) -> list[int]:
        """Processes of the job's own uid that the run does not record: one that left the
        process group (`setsid`) and outlived its rank, which, without cgroups, signals to
        the group miss. Every process of that uid is the job's (a uid is never another
        job's) and of its latest attempt (a job's attempts do not overlap), so an older
        attempt's handle has none."""
        if h.uid is None:
            return []
        latest = self._handles.get(h.job_id)
        if latest is not None and latest.attempt > h.attempt:
            return []
        return [pid for pid in procfs.pids_of_uid(h.uid) if pid not in known]

    def _alive_members(self, h: RunHandle) -> list[int]:
        """The run's live processes: those it records, and the strays of its uid."""
        recorded = self._recorded_alive(h)
        return recorded + self._strays(h, recorded)

    def _signal(self, h: RunHandle, sig: signal.Signals) -> None:
        """Signal the job's process group, any member that left it, and the strays of its
        uid; the group only while a process it records is verifiably alive (so a reused
        group id is never signalled)."""
        recorded = self._recorded_alive(h)
        if recorded and h.pgid > 0:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(h.pgid, sig)
        for pid in recorded:
            if procfs.process_group(pid) != h.pgid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
        for pid in self._strays(h, recorded):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def _rank_end(self, h: RunHandle, r: RankInfo, now: float) -> tuple[bool, int | None, float]:
        proc = h.procs.get(r.rank)  # our child: its exit is what waitpid says (see above)
        if proc.poll() is None if proc is not None else procfs.alive(r.pid, r.start_time):
            return False, None, 0.0
        wrapper_rc = proc.returncode if proc is not None else None
        rec = procfs.read_json(h.exit_file(r.rank))
        if isinstance(rec, dict):
            return True, int(rec["returncode"]), float(rec["finished_at"])
        return True, wrapper_rc, h.seen_end.setdefault(r.rank, now)

    def poll(self, handle: RunHandle) -> RunStatus:
        h, now = handle, time.time()
        ends = {r.rank: self._rank_end(h, r, now) for r in h.ranks}
        codes = {rank: code for rank, (_, code, _) in ends.items()}
        failures = sorted((t, rank) for rank, (done, code, t) in ends.items() if done and code != 0)
        all_done = all(done for done, _, _ in ends.values())
        recorded = self._recorded_alive(h)
        strays = self._strays(h, recorded)  # one look at /proc a poll
        for pid in strays if all_done else ():  # the ranks ended: what they left behind goes
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        # every rank's exit known (a child just killed may not be reaped yet), none alive
        settled = all_done and not recorded and not strays
        first = failures[0][1] if failures else None
        unstartable = ""
        state: RunState
        stop = jobdirs.stop_record(h.run_dir)
        stop_at = stop[0] if stop is not None else None
        last_end = max(t for _, _, t in ends.values()) if all_done and ends else None
        if stop_at is not None and (last_end is None or stop_at <= last_end):
            # stopped while running: a clean exit after SIGTERM is a stop, not a success
            assert stop is not None
            state, reason = "stopped", f"stopped on request ({stop[1]})"
        elif all_done and not failures:
            state, reason = "succeeded", f"all {len(ends)} ranks exited with code 0"
        elif failures and first is not None:
            lost = all_done and all(c is None for c in codes.values()) and h.adopted
            state = "lost" if lost else "failed"
            unstartable = h.start_error(first)  # the command never ran: the spec's fault
            how = f"could not start: {unstartable}" if unstartable else describe_code(codes[first])
            reason = f"rank {first} {how}"
            if lost:
                reason = "every process of the run vanished without an exit record"
        else:
            state, reason = "running", ""
        if not h.complete:  # the launch was cut short: the job cannot run with ranks missing
            state = "failed"
            reason = f"launch interrupted: {len(h.ranks)} of {h.workers} ranks were started"
        if state in ("failed", "lost") and not settled:
            self._escalate(h, time.monotonic())
        elif stop_at is not None and not settled and time.time() - stop_at >= self.grace_s:
            self._signal(h, signal.SIGKILL)  # a requested stop past its grace period
        if settled and h.cgroup is not None:
            cgroups.JobCgroup(h.cgroup).remove()
        return RunStatus(state, codes, first, settled, reason, ended_at=last_end,
                         final=state == "failed" and bool(unstartable))  # fmt: skip

    def _escalate(self, h: RunHandle, now: float) -> None:
        if h.term_sent_at is None:
            h.term_sent_at = now
            self._signal(h, signal.SIGTERM)
        elif now - h.term_sent_at >= self.grace_s:
            self._signal(h, signal.SIGKILL)

    def request_stop(self, handle: RunHandle, reason: str = "") -> RunStatus:
        """Record the stop and send SIGTERM to the job's process group, without waiting: a
        later `poll` sends SIGKILL once the grace period has passed since the stop was
        recorded (also after a server restart: the time is in `stop.json`). Idempotent; a
        run that already ended keeps its outcome."""
        status = self.poll(handle)
        if status.state == "running":
            jobdirs.record_stop(handle.run_dir, reason, time.time())
        if status.settled:
            return status
        if handle.term_sent_at is None:  # the notice first: the SDK reads it on SIGTERM
            jobdirs.write_notice(self.job_dir(handle.job_id), reason)
            handle.term_sent_at = time.monotonic()
            self._signal(handle, signal.SIGTERM)
        return self.poll(handle)

    def stop(self, handle: RunHandle, grace_s: float | None = None, reason: str = "") -> RunStatus:
        """SIGTERM to the job's process group, up to `grace_s` to exit, then SIGKILL; waits
        for it. Idempotent; a run that already ended keeps its outcome."""
        grace = self.grace_s if grace_s is None else grace_s
        if self.poll(handle).state == "running":
            jobdirs.record_stop(handle.run_dir, reason, time.time())
        if self._alive_members(handle):
            self._signal(handle, signal.SIGTERM)
            self._wait_gone(handle, grace)
            if self._alive_members(handle):
                self._signal(handle, signal.SIGKILL)
                self._wait_gone(handle, 5.0)
        return self.poll(handle)

    def _wait_gone(self, h: RunHandle, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self._alive_members(h) and time.monotonic() < deadline:
            time.sleep(0.02)

    # ---- logs --------------------------------------------------------------------------

    def log_paths(
        self, job_id: str, rank: int | None = None, attempt: int | None = None
    ) -> dict[int, Path]:
        return log_paths(self.root_dir, job_id, rank, attempt)

    def logs(
        self, job_id: str, rank: int | None = None, attempt: int | None = None
    ) -> Iterator[str]:
        paths = self.log_paths(job_id, rank, attempt)
        return logs.read_lines(paths, prefix=len(paths) > 1)

    def follow(
        self,
        job_id: str,
        rank: int | None = None,
        attempt: int | None = None,
        interval_s: float = 0.1,
    ) -> Iterator[str]:
        """New lines as they are written, until the run has ended and every line is read."""
        paths = self.log_paths(job_id, rank, attempt)
        handle = self._handles.get(job_id) or self.adopt(job_id)
        if handle is None or (attempt is not None and attempt != handle.attempt):
            return logs.read_lines(paths, prefix=len(paths) > 1)
        h = handle
        return logs.follow_lines(paths, len(paths) > 1, lambda: self.poll(h).settled, interval_s)


def log_paths(
    root_dir: Path, job_id: str, rank: int | None = None, attempt: int | None = None
) -> dict[int, Path]:
    """The per-rank log files of the latest (or given) attempt of a job, by rank; reading
    them needs no executor (the API serves logs this way)."""
    d = jobdirs.attempt_dir(job_dir(root_dir, job_id) / "logs", attempt)
    if d is None:
        return {}
    paths = {int(p.stem.split("-")[1]): p for p in d.glob("rank-*.log")}
    return {r: p for r, p in paths.items() if rank is None or r == rank}


__all__ = [
    "DeviceBusy",
    "LaunchSpec",
    "LocalExecutor",
    "RankInfo",
    "RunHandle",
    "RunStatus",
    "job_dir",
    "split_devices",
]
