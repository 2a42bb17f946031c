"""Admission: what a valid spec must also satisfy on this cluster before it is accepted.

`jobspec` checks a spec on its own; `Admission.check` checks it against the site (422, naming
the field and the fix):

- `working_dir` must lie inside one of the server's work roots (`--work-root`; by default its
  working directory, its user's home and the temporary directory), never inside the server's
  home (its database, tokens and run records), symlinks resolved;
- `topology` must name a level this cluster has (`island`, `node`, the nodes' topology
  levels, `cluster`): the scheduler could never place it otherwise;
- unless the spec says `wait_for_capacity: true`, some set of today's nodes must be able to
  run it: a node type with the `gpu_type` and `gpu_memory_gb` asked, enough such GPUs in the
  cluster (at its minimum size for an elastic job), on one node for a one-node job, and a node
  with the CPUs and memory of one node's share. Slurm refuses such jobs at submit the same way.

The cluster's shape is read from the `nodes` and `devices` tables and cached a few seconds.
An empty cluster (no node registered yet) admits every job: nothing can be known about it.

`check_room` bounds how many jobs one tenant may have queued (PENDING) at once
(`--max-queued-jobs`, 10,000 by default): beyond it a submit is answered 429, so one tenant
cannot fill the database or slow every round for the others. The count is read at most every
two seconds and the submissions accepted since are added to it.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from trainyard.core.snapshot import level_names
from trainyard.jobspec import JobSpec
from trainyard.server.api.errors import ApiError
from trainyard.server.db import Job, JobState, Node
from trainyard.server.loop.scheduling import topology_of

DEFAULT_MAX_QUEUED = 10_000


@dataclass(frozen=True)
class NodeShape:
    gpus: int
    gpu_type: str
    gpu_memory_gb: float
    cpus: float
    memory_gb: float


@dataclass(frozen=True)
class ClusterShape:
    """What the admission checks need of the cluster."""

    nodes: tuple[NodeShape, ...]
    levels: tuple[str, ...]  # every level a job's `topology` may name

    @classmethod
    def load(cls, session: Session) -> ClusterShape:
        nodes = []
        depth = 0
        for row in session.scalars(select(Node)):
            devices = list(row.devices)
            first = devices[0] if devices else None
            nodes.append(
                NodeShape(
                    gpus=len(devices),
                    gpu_type=first.gpu_type if first else "",
                    gpu_memory_gb=first.memory_gb if first else 0.0,
                    cpus=row.cpus,
                    memory_gb=row.memory_gb,
                )
            )
            depth = max(depth, len(row.topology_path or ()))
        return cls(tuple(nodes), level_names(topology_of(depth)))


class Admission:
    """The site's admission rules (see the module docstring)."""

    def __init__(
        self,
        sessions: sessionmaker[Session] | None,
        *,
        work_roots: tuple[Path, ...] = (),
        private: tuple[Path, ...] = (),
        ttl_s: float = 5.0,
        max_queued: int | None = DEFAULT_MAX_QUEUED,
        dirs_here: bool = False,
        others_enter: bool = False,
        on_ray: bool = False,
    ) -> None:
        self.sessions = sessions
        self.on_ray = on_ray  # jobs run on Ray's nodes (checkpoints stay on theirs)
        # jobs run as uids of their own (`--job-user dynamic`): a working_dir must let
        # others enter it, or the job fails at start (exit 127) where submit could say why
        self.others_enter = others_enter
        # jobs run on this machine (the local executor): a working_dir must exist here now,
        # unless the job waits for others (which may make it)
        self.dirs_here = dirs_here
        self.max_queued = max_queued
        self._queued: dict[int, tuple[float, int]] = {}  # tenant -> (read at, count since)
        self.work_roots = tuple(p.resolve() for p in work_roots)
        self.private = tuple(p.resolve() for p in private)
        self.ttl_s = ttl_s
        self._shape: tuple[float, ClusterShape] | None = None
        self._lock = threading.Lock()

    def shape(self) -> ClusterShape | None:
        if self.sessions is None:
            return None
        with self._lock:
            hit = self._shape
        if hit is not None and time.monotonic() - hit[0] < self.ttl_s:
            return hit[1]
        with self.sessions() as s:
            shape = ClusterShape.load(s)
        with self._lock:
            self._shape = (time.monotonic(), shape)
        return shape

    def check_room(self, tenant_id: int, tenant: str, jobs: int = 1) -> None:
        """Refuse (429) a submit of `jobs` jobs (an array's members) that would give a tenant
        more than `max_queued` jobs PENDING."""
        if self.max_queued is None or self.sessions is None:
            return
        with self._lock:
            hit = self._queued.get(tenant_id)
        if hit is None or time.monotonic() - hit[0] > 2.0:
            with self.sessions() as s:
                count = (
                    s.scalar(
                        select(func.count())
                        .select_from(Job)
                        .where(Job.tenant_id == tenant_id, Job.state == JobState.PENDING)
                    )
                    or 0
                )
            hit = (time.monotonic(), count)
        if hit[1] + jobs > self.max_queued:
            raise ApiError(
                429,
                f"tenant {tenant} has {hit[1]} jobs queued, the most one tenant may have "
                f"({self.max_queued}); wait for some to start, or cancel some",
                field="queue",
            )
        with self._lock:
            self._queued[tenant_id] = (hit[0], hit[1] + jobs)

    def check(self, spec: JobSpec) -> None:
        """Raise `ApiError` (422) if the site cannot accept `spec`."""
        if spec.working_dir is not None:
            self._check_working_dir(spec.working_dir, exists=self.dirs_here and not spec.after)
        if spec.resume_from is not None and self.on_ray:
            raise ApiError(
                422, "this server runs jobs on Ray, whose checkpoints stay on the nodes that "
                "wrote them: copy the earlier job's checkpoint to storage your job reads "
                "instead (resume_from works with the local executor)",
                field="resume_from",
            )  # fmt: skip
        shape = self.shape()
        if shape is None or not shape.nodes:
            return
        if spec.topology is not None and spec.topology not in shape.levels:
            raise ApiError(
                422,
                f"this cluster has no topology level {spec.topology!r}; use one of "
                f"{', '.join(shape.levels)} (or leave it out)",
                field="topology",
            )
        if not spec.wait_for_capacity:
            _check_capacity(spec, shape)

    def _check_working_dir(self, text: str, *, exists: bool) -> None:
        path = Path(text).expanduser()
        if not path.is_absolute():
            raise ApiError(
                422, f"{text!r} is relative; give an absolute path on the server's machine",
                field="working_dir",
            )  # fmt: skip
        real = path.resolve()
        for secret in self.private:
            if real == secret or secret in real.parents:
                raise ApiError(
                    422,
                    f"{text!r} is inside the server's state directory {secret}; run the job "
                    "from a directory of your own",
                    field="working_dir",
                )
        if self.work_roots and not any(
            real == root or root in real.parents for root in self.work_roots
        ):
            roots = ", ".join(str(r) for r in self.work_roots)
            raise ApiError(
                422,
                f"{text!r} is outside the server's work roots ({roots}); move the job there, "
                "or start the server with --work-root naming its directory",
                field="working_dir",
            )
        if exists and not real.is_dir():
            why = "not a directory" if _reachable(real.parent) else "not a directory it can reach"
            raise ApiError(
                422, f"{text!r} is {why} on the server's machine, where the job runs; create "
                "it (or let the server's user pass through it), or submit from one that exists",
                field="working_dir",
            )  # fmt: skip
        closed = _closed_to_others(real) if exists and self.others_enter else None
        if closed is not None:
            raise ApiError(
                422, f"{text!r}: jobs here run as users of their own, and {closed} does not "
                f"let other users enter it (mode {closed.stat().st_mode & 0o777:o}); "
                f"chmod o+x {closed} (o+rx for the working directory itself), or submit from "
                "a directory others may enter",
                field="working_dir",
            )  # fmt: skip


def _closed_to_others(folder: Path) -> Path | None:
    """The first of `folder` and its parents that a user other than its owner and group may
    not pass through (no o+x), or None when every one lets them."""
    for part in (*reversed(folder.parents), folder):
        try:
            mode = part.stat().st_mode
        except OSError:
            return part
        if not mode & 0o001:
            return part
    return None


def _reachable(folder: Path) -> bool:
    """Can this process look into `folder` (or is it missing for everyone)?"""
    try:
        folder.stat()
    except PermissionError:
        return False
    except OSError:
        return True  # missing: "not a directory" is the answer
    return os.access(folder, os.X_OK)


def _check_capacity(spec: JobSpec, shape: ClusterShape) -> None:
    gpus: int = spec.gpus or 0
    if spec.elastic is not None and spec.elastic.min_gpus is not None:
        gpus = spec.elastic.min_gpus
    hint = "; or set wait_for_capacity: true to wait for nodes that may join"
    fits = [n for n in shape.nodes if n.gpus > 0] if gpus else list(shape.nodes)
    if gpus and spec.gpu_type:
        fits = [n for n in fits if n.gpu_type.lower() == spec.gpu_type.lower()]
        if not fits:
            types = sorted({n.gpu_type for n in shape.nodes if n.gpus})
            raise ApiError(
                422, f"no node has GPUs of type {spec.gpu_type!r} (this cluster has: "
                f"{', '.join(types) or 'none'}){hint}", field="gpu_type",
            )  # fmt: skip
    if gpus and spec.gpu_memory_gb:
        fits = [n for n in fits if n.gpu_memory_gb >= spec.gpu_memory_gb]
        if not fits:
            raise ApiError(
                422, f"no node has GPUs with {spec.gpu_memory_gb:g} GB of memory{hint}",
                field="gpu_memory_gb",
            )  # fmt: skip
    total = sum(n.gpus for n in fits)
    if gpus > total:
        raise ApiError(
            422, f"{gpus} GPUs asked, and the cluster has {total} that suit the job{hint}",
            field="elastic.min_gpus" if spec.elastic is not None else "gpus",
        )  # fmt: skip
    per_node = -(-gpus // spec.nodes) if gpus else 0
    if spec.core_nodes > 1:
        enough = [n for n in fits if n.gpus >= per_node]
        if len(enough) < spec.nodes:
            raise ApiError(
                422, f"{spec.nodes} nodes with {per_node} GPU{'s' if per_node != 1 else ''} "
                f"each asked, and the cluster has {len(enough)} such "
                f"node{'s' if len(enough) != 1 else ''}{hint}",
                field="nodes",
            )  # fmt: skip
    if per_node and not any(n.gpus >= per_node for n in fits):
        biggest = max((n.gpus for n in fits), default=0)
        raise ApiError(
            422, f"{per_node} GPUs on one node asked, and the largest node has {biggest}{hint}",
            field="gpus",
        )  # fmt: skip
    share = spec.nodes * ((spec.gpus or 1) / max(gpus, 1) if spec.elastic is not None else 1.0)
    for name, need, haves in (
        ("cpus", spec.cpus, [n.cpus for n in fits]),
        ("memory_gb", spec.memory_gb, [n.memory_gb for n in fits]),
    ):
        if need and not any(have + 1e-9 >= need / share for have in haves):
            most = max(haves, default=0.0)
            raise ApiError(
                422, f"{need / share:g} {name} per node asked, and the largest node has "
                f"{most:g}{hint}", field=name,
            )  # fmt: skip
