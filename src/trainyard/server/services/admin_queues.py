"""Queue administration on the database (`trainyard admin queue add|set|list|rm`): the tree
rules of `services/admin.py`'s docstring, checked before anything is written.

A change of the tree takes its lock first (`_lock_tree`: a PostgreSQL advisory lock for the
transaction; on SQLite the database's write lock, taken by a write that changes nothing), so
that two operators' changes are checked one after the other: read and checked at once, two
`queue set qa --parent qb` / `queue set qb --parent qa` both passed and stored a cycle, and
every scheduling round then failed."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, delete, func, or_, select, update
from sqlalchemy.orm import Session

from trainyard.server.db import Device, Health, Job, JobState, Node, Queue, Tenant
from trainyard.server.lifecycle import HOLDS_DEVICES
from trainyard.server.services.admin_common import (
    UNSET,
    AdminError,
    Unset,
    check_name,
)
from trainyard.server.services.admin_common import find as _find
from trainyard.server.services.admin_common import flush as _flush
from trainyard.server.services.jobs import gpus_held_under


@dataclass(frozen=True, slots=True)
class QueueInfo:
    name: str
    parent: str | None
    tenant: str | None  # None: shared by all tenants
    guaranteed: int
    limit: int | None
    weight: float
    children: tuple[str, ...]
    pending: int
    running: int
    max_priority: int | None = None  # its own limit (ancestors' limits apply too)
    default_priority: int | None = None  # for specs naming none (else the nearest ancestor's)
    gpus_held: int = 0  # by its jobs and its descendants' (what guaranteed and limit bound)


MAX_GPUS = 2**31 - 1  # a 32-bit column; far beyond any cluster


def _check_numbers(guaranteed: int, limit: int | None, weight: float) -> None:
    if not 0 <= guaranteed <= MAX_GPUS:
        raise AdminError("guaranteed", f"must be 0 to {MAX_GPUS} GPUs, got {guaranteed}")
    if limit is not None and not 0 <= limit <= MAX_GPUS:
        raise AdminError("limit", f"must be 0 to {MAX_GPUS} GPUs (or no limit), got {limit}")
    if limit is not None and limit < guaranteed:
        raise AdminError(
            "limit",
            f"{limit} is below guaranteed {guaranteed}; raise the limit or lower the guarantee",
        )
    if not (weight > 0 and math.isfinite(weight)):
        raise AdminError("weight", f"must be a number > 0, got {weight}")


def _check_priority(top: int | None, default: int | None = None) -> None:
    for field, value in (("max_priority", top), ("default_priority", default)):
        if value is not None and not -(2**31) <= value < 2**31:
            raise AdminError(field, f"must be a 32-bit integer, got {value}")
    if top is not None and default is not None and default > top:
        raise AdminError(
            "default_priority", f"{default} is above the queue's max priority {top}; lower it"
        )


def _check_tree(
    session: Session, qid: int | None, name: str, parent_id: int | None, tenant_id: int | None,
    guaranteed: int,
) -> None:  # fmt: skip
    """The tree rules around one queue as a change would leave it (`qid` None: a new one)."""
    rows = {r.id: r for r in session.scalars(select(Queue))}
    tenants = {t.id: t.name for t in session.scalars(select(Tenant))}

    def owner(tid: int | None) -> str:
        return "shared" if tid is None else f"of tenant {tenants[tid]!r}"

    cursor, seen = parent_id, set[int]()
    while cursor is not None and cursor not in seen:  # `seen`: a cycle already stored
        if cursor == qid:
            under = rows[parent_id].name if parent_id is not None else ""
            where = "itself" if parent_id == qid else f"{under!r}, under it"
            raise AdminError("parent", f"queue {name!r} cannot go under {where}: a cycle")
        seen.add(cursor)
        cursor = rows[cursor].parent_id
    if parent_id is not None:
        parent = rows[parent_id]
        if parent.tenant_id is not None and parent.tenant_id != tenant_id:
            raise AdminError(
                "tenant",
                f"queue {name!r} would be {owner(tenant_id)} under {parent.name!r} "
                f"{owner(parent.tenant_id)}: give it tenant {tenants[parent.tenant_id]!r}",
            )
        siblings = [r for r in rows.values() if r.parent_id == parent_id and r.id != qid]
        others = sum(r.guaranteed for r in siblings)
        if parent.guaranteed > 0 and others + guaranteed > parent.guaranteed:
            raise AdminError(
                "guaranteed",
                f"children of {parent.name!r} would be guaranteed {others + guaranteed} GPUs, "
                f"more than its {parent.guaranteed}: give {name!r} at most "
                f"{max(parent.guaranteed - others, 0)} or raise the guarantee of "
                f"{parent.name!r} first",
            )
    children = [r for r in rows.values() if qid is not None and r.parent_id == qid]
    total = sum(c.guaranteed for c in children)
    if guaranteed > 0 and total > guaranteed:
        raise AdminError(
            "guaranteed",
            f"children of {name!r} are guaranteed {total} GPUs in all, more than {guaranteed}: "
            "lower theirs first or give at least that",
        )
    strays = sorted(c.name for c in children if c.tenant_id != tenant_id)
    if tenant_id is not None and strays:
        raise AdminError(
            "tenant",
            f"child queues {', '.join(strays)} of {name!r} are not {owner(tenant_id)}: "
            "move them first",
        )


def _queue_infos(session: Session, rows: list[Queue]) -> list[QueueInfo]:
    """What `list_queues` shows of `rows`: names for ids, children, pending/running jobs."""
    all_rows = list(session.execute(select(Queue.id, Queue.name, Queue.parent_id)))
    names = {qid: name for qid, name, _ in all_rows}
    children: dict[int | None, list[str]] = {}
    for _, name, parent in all_rows:
        children.setdefault(parent, []).append(name)
    tenants = {t.id: t.name for t in session.scalars(select(Tenant))}
    counts: Counter[tuple[int, bool]] = Counter()
    by_state = select(Job.queue_id, Job.state, func.count()).group_by(Job.queue_id, Job.state)
    for queue_id, state, count in session.execute(by_state):
        if state == JobState.PENDING or state in HOLDS_DEVICES:
            counts[(queue_id, state == JobState.PENDING)] += count
    held = gpus_held_under(session)
    out = []
    for q in rows:
        kids = tuple(sorted(children.get(q.id, [])))
        where = (names.get(q.parent_id or 0), tenants.get(q.tenant_id or 0))
        jobs = (counts[(q.id, True)], counts[(q.id, False)])
        out.append(
            QueueInfo(
                q.name, *where, q.guaranteed, q.limit, q.weight, kids, *jobs,
                max_priority=q.max_priority,
                default_priority=q.default_priority,
                gpus_held=held.get(q.id, 0),
            )
        )  # fmt: skip
    return out


QUEUE_TREE_LOCK_ID = 0x7472_7175_6575  # PostgreSQL advisory lock of the queue tree


def _lock_tree(session: Session) -> None:
    """Hold the queue tree for this transaction, before anything of it is read."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(select(func.pg_advisory_xact_lock(QUEUE_TREE_LOCK_ID)))
    else:  # SQLite: BEGIN and the write lock, so the reads below see the latest tree
        session.execute(update(Queue).where(Queue.id < 0).values(weight=Queue.weight))


def _resolve(session: Session, name: str | None, field: str, kind: str) -> int | None:
    if name is None:
        return None
    row = _find(session, Queue, name, field) if kind == "queue" else None
    return (row or _find(session, Tenant, name, field)).id


def create_queue(
    session: Session, name: str, *, now: float, parent: str | None = None,
    tenant: str | None = None, guaranteed: int = 0, limit: int | None = None, weight: float = 1.0,
    max_priority: int | None = None, default_priority: int | None = None,
) -> QueueInfo:  # fmt: skip
    """A new queue under `parent` (None: a root), of `tenant` (None: shared by all), whose
    jobs may ask for a priority up to `max_priority` (None: no limit of its own)."""
    check_name("name", name, "queue")
    _lock_tree(session)
    if session.scalar(select(Queue.id).where(Queue.name == name)) is not None:
        raise AdminError("name", f"queue {name!r} already exists; change it with `queue set`")
    parent_id = _resolve(session, parent, "parent", "queue")
    tenant_id = _resolve(session, tenant, "tenant", "tenant")
    _check_numbers(guaranteed, limit, weight)
    _check_tree(session, None, name, parent_id, tenant_id, guaranteed)
    values = {"parent_id": parent_id, "tenant_id": tenant_id, "guaranteed": guaranteed}
    _check_priority(max_priority, default_priority)
    row = Queue(
        name=name, limit=limit, weight=weight, max_priority=max_priority,
        default_priority=default_priority, created_at=now, **values,
    )  # fmt: skip
    session.add(row)
    _flush(session, "name", f"queue {name!r}")
    return _queue_infos(session, [row])[0]


def update_queue(
    session: Session, name: str, *, parent: str | Unset | None = UNSET,
    tenant: str | Unset | None = UNSET, guaranteed: int | None = None,
    limit: int | Unset | None = UNSET, weight: float | None = None,
    max_priority: int | Unset | None = UNSET, default_priority: int | Unset | None = UNSET,
) -> QueueInfo:  # fmt: skip
    """Change what is given (`UNSET`/None: keep); `parent=None` makes a root, `tenant=None`
    makes it shared, `limit=None` removes the limit, `max_priority=None` its priority limit
    (jobs already queued keep their priority)."""
    _lock_tree(session)
    row = _find(session, Queue, name, "queue")
    parent_id = row.parent_id if parent is UNSET else _resolve(session, parent, "parent", "queue")
    tenant_id = row.tenant_id if tenant is UNSET else _resolve(session, tenant, "tenant", "tenant")
    new_guaranteed = row.guaranteed if guaranteed is None else guaranteed
    new_limit = row.limit if limit is UNSET else limit
    new_weight = row.weight if weight is None else weight
    _check_numbers(new_guaranteed, new_limit, new_weight)
    _check_tree(session, row.id, name, parent_id, tenant_id, new_guaranteed)
    if tenant_id is not None and tenant_id != row.tenant_id:
        foreign = session.scalar(
            select(func.count())
            .select_from(Job)
            .where(Job.queue_id == row.id, Job.tenant_id != tenant_id, _live_job())
        )
        if foreign:
            raise AdminError(
                "tenant",
                f"queue {name!r} has {foreign} live job(s) of other tenants; "
                "let them finish before giving it to one tenant",
            )
    row.parent_id, row.tenant_id, row.guaranteed = parent_id, tenant_id, new_guaranteed
    row.limit, row.weight = new_limit, new_weight
    top = row.max_priority if isinstance(max_priority, Unset) else max_priority
    default = row.default_priority if isinstance(default_priority, Unset) else default_priority
    _check_priority(top, default)
    row.max_priority, row.default_priority = top, default
    session.flush()
    return _queue_infos(session, [row])[0]


def list_queues(session: Session, tenant: str | None = None) -> list[QueueInfo]:
    """Queues (those a tenant may use: its own and shared ones, or all), by name."""
    query = select(Queue).order_by(Queue.name)
    if tenant is not None:
        tenant_id = _find(session, Tenant, tenant, "tenant").id
        query = query.where(or_(Queue.tenant_id.is_(None), Queue.tenant_id == tenant_id))
    return _queue_infos(session, list(session.scalars(query)))


def promised_gpus(session: Session) -> int:
    """The GPUs the queue tree promises in all: each root's guarantee, or, for a root that
    guarantees none itself, what its children promise (the same rule down the tree)."""
    children: dict[int | None, list[tuple[int, int]]] = {}
    for qid, parent, guaranteed in session.execute(
        select(Queue.id, Queue.parent_id, Queue.guaranteed)
    ):
        children.setdefault(parent, []).append((qid, guaranteed))
    seen: set[int] = set()

    def promised(qid: int, guaranteed: int) -> int:
        if guaranteed > 0 or qid in seen:  # `seen`: a cycle already stored counts once
            return guaranteed
        seen.add(qid)
        return sum(promised(c, g) for c, g in children.get(qid, []))

    return sum(promised(q, g) for q, g in children.get(None, []))


def schedulable_gpus(session: Session) -> int:
    """The healthy GPUs of the nodes that take work (schedulable, not drained, healthy)."""
    count = (
        select(func.count())
        .select_from(Device)
        .join(Node, Device.node_id == Node.id)
        .where(
            Node.schedulable.is_(True),
            Node.drained_at.is_(None),
            Node.health == Health.HEALTHY,
            Device.health == Health.HEALTHY,
        )
    )
    return int(session.scalar(count) or 0)


def overcommit_warning(session: Session) -> str | None:
    """What to tell an operator when the queues' guarantees add up to more GPUs than the
    cluster has to give (None: they fit, or no node has registered yet). Not refused: nodes
    come and go, and reclaim stays safe (a queue never loses GPUs below its own guarantee),
    but then not every queue can have its guarantee at once."""
    promised, gpus = promised_gpus(session), schedulable_gpus(session)
    if gpus == 0 or promised <= gpus:
        return None
    return (
        f"the queues' guarantees add up to {promised} GPUs but the cluster has {gpus} to "
        "give: not every queue can have its guarantee at once; lower a guarantee "
        "(`admin queue set NAME --guaranteed N`) or add nodes"
    )


def unbacked_warning(session: Session) -> str | None:
    """What to tell an operator when a queue's guarantee is not backed by its ancestors'
    while the tree has another top-level queue (None: every guarantee is backed, or there is
    one tree). A queue takes GPUs back only while every queue on its path stays within its
    own guarantee (`core.queues`), so a team guaranteed 4 under a parent guaranteed 0 is
    reclaimed for from its siblings and its parent's own jobs, never from another top-level
    queue (outside review 14: the documented `--parent default` setup beside a `batch`)."""
    rows = list(session.execute(select(Queue.id, Queue.name, Queue.parent_id, Queue.guaranteed)))
    roots = [name for _qid, name, parent, _g in rows if parent is None]
    if len(roots) < 2:
        return None
    by_id = {qid: (name, parent, g) for qid, name, parent, g in rows}
    for _qid, name, parent, guaranteed in sorted(rows, key=lambda r: r[1]):
        seen: set[int] = set()
        while guaranteed > 0 and parent is not None and parent not in seen:
            seen.add(parent)
            above, grand, backed = by_id[parent]
            if backed < guaranteed:
                root = _root_of(by_id, parent)
                others = ", ".join(r for r in roots if r != root)
                return (
                    f"queue {name} guarantees {guaranteed} GPUs but {above} above it "
                    f"guarantees {backed}: its GPUs are taken back from its siblings and "
                    f"{above}'s own jobs, not from the other top-level queues ({others}); "
                    f"give {above} --guaranteed {guaranteed} or more (`admin queue set "
                    f"{above} --guaranteed N`), or move those queues under {root}"
                )
            parent = grand
    return None


def _root_of(by_id: dict[int, tuple[str, int | None, int]], qid: int) -> str:
    """The name of the top-level queue above `qid`."""
    seen: set[int] = set()
    while qid not in seen:
        seen.add(qid)
        name, parent, _g = by_id[qid]
        if parent is None:
            return name
        qid = parent
    return by_id[qid][0]


def queue_warnings(session: Session) -> str | None:
    """Every warning of the queue tree as it now stands (`overcommit_warning`,
    `unbacked_warning`), in one line, or None."""
    found = [w for w in (overcommit_warning(session), unbacked_warning(session)) if w]
    return "; and ".join(found) if found else None


def _live_job() -> Any:
    """Jobs that are not finished: FAILED ones with restarts left will run again."""
    done = or_(
        Job.state.in_([JobState.SUCCEEDED, JobState.CANCELLED]),
        and_(Job.state == JobState.FAILED, Job.restart_count >= Job.max_restarts),
    )
    return ~done


def delete_queue(session: Session, name: str, *, purge_finished: bool = False) -> int:
    """Delete a queue without child queues and live jobs; its finished jobs (and their events)
    go with it only when `purge_finished`. Returns how many finished jobs were deleted."""
    _lock_tree(session)
    row = _find(session, Queue, name, "queue")
    children = sorted(session.scalars(select(Queue.name).where(Queue.parent_id == row.id)))
    if children:
        raise AdminError(
            "queue",
            f"queue {name!r} has child queues ({', '.join(children)}); "
            "delete them or move them elsewhere (queue set CHILD --parent ...) first",
        )
    live = Counter(
        JobState(state).value
        for state in session.scalars(select(Job.state).where(Job.queue_id == row.id, _live_job()))
    )
    if live:
        detail = ", ".join(f"{n} {state}" for state, n in sorted(live.items()))
        raise AdminError(
            "queue",
            f"queue {name!r} has {sum(live.values())} job(s) not finished ({detail}); "
            "cancel them or wait for them to finish",
        )
    finished = session.scalar(select(func.count()).select_from(Job).where(Job.queue_id == row.id))
    if finished and not purge_finished:
        raise AdminError(
            "queue",
            f"queue {name!r} keeps the history of {finished} finished job(s); "
            "pass --purge-finished to delete them with the queue",
        )
    if finished:  # events and job tokens go with them (ON DELETE CASCADE)
        session.execute(delete(Job).where(Job.queue_id == row.id))
    session.delete(row)
    session.flush()
    return finished or 0
