"""Operator administration on the database: tenants, users, roles, API tokens and queues.

Owns the service functions behind `trainyard admin` (run on the server's machine, straight on
the database, like `gitlab-rake` or `airflow users create`). Every function takes a
`Session`, checks all of its input before writing anything, flushes (never commits) and
returns plain dataclasses. Bad input raises `AdminError(field, message)`, the message naming
the fix; the caller then rolls back (`transaction` does both), so an error never changes the
database.

Queue rules, the core's (`trainyard.core.snapshot`) and the tree's: valid unique names;
`guaranteed >= 0`; `limit` None or `>= guaranteed`; `weight > 0`; the parent exists, outside
the queue's subtree (no cycle); under a parent with `guaranteed > 0` the children's guarantees
add up to at most the parent's; a queue under a tenant's queue is that tenant's. A queue is
deleted only without children and live jobs (FAILED with restarts left counts as live); its
finished jobs (history) go with it only when asked (`purge_finished`). A running server's
token cache (`trainyard.server.api.auth`) sees revocations and disabled users within seconds.
"""

from __future__ import annotations

import contextlib
import enum
import math
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import and_, delete, func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from trainyard.errors import FieldError, suggest
from trainyard.server.db import ApiToken, Job, JobState, Queue, Role, Tenant, User
from trainyard.server.db.tokens import issue_token, revoke_token
from trainyard.server.lifecycle import HOLDS_DEVICES

NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
NAME_RULE = "1 to 64 of a-z 0-9 _ . - (starting with a letter or digit)"
TOKEN_NAME_MAX = 64
_Named = TypeVar("_Named", Tenant, User, Queue)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw]?)")
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


class AdminError(FieldError):
    """Bad input to an admin function: `field` is what to change, `message` says how."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(field, message)
        self.args = (f"{field}: {message}",)


class Unset(enum.Enum):
    """The type of `UNSET`."""

    UNSET = "unset"


UNSET = Unset.UNSET
"""`update_queue`'s "leave as it is" (None means "none": no parent, shared, no limit)."""


@dataclass(frozen=True, slots=True)
class TenantInfo:
    name: str
    users: int
    queues: int
    created_at: float


@dataclass(frozen=True, slots=True)
class UserInfo:
    name: str
    tenant: str
    role: str
    disabled: bool
    tokens: int  # live personal tokens (not revoked, not expired)
    created_at: float


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


@dataclass(frozen=True, slots=True)
class IssuedToken:
    user: str
    tenant: str
    role: str
    token_id: str
    name: str
    expires_at: float | None
    token: str  # the only time the text exists outside its owner's hands


@contextlib.contextmanager
def transaction(sessions: sessionmaker[Session]) -> Iterator[Session]:
    """A session whose work is committed if the block succeeds and rolled back otherwise."""
    with sessions() as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise


def check_name(field: str, value: str, what: str) -> str:
    """`value` if it is a valid name of a `what`, else an AdminError."""
    if not isinstance(value, str) or not NAME_PATTERN.fullmatch(value):
        raise AdminError(field, f"invalid {what} name {value!r}: use {NAME_RULE}")
    return value


def _role(value: str | Role) -> Role:
    text = value.value if isinstance(value, Role) else str(value).strip().lower()
    try:
        return Role(text)
    except ValueError:
        known = ", ".join(r.value for r in Role)
        raise AdminError("role", f"unknown role {value!r}; use one of {known}") from None


def parse_duration(text: str, field: str = "expires_in") -> float:
    """Seconds in `30d`, `12h`, `90m`, `3600s`, `2w` or a plain number of seconds (> 0)."""
    match = _DURATION.fullmatch(str(text).strip().lower())
    seconds = float(match.group(1)) * _UNITS[match.group(2)] if match else 0.0
    if not match or seconds <= 0 or not math.isfinite(seconds):
        raise AdminError(field, f"write a positive duration such as 30d, 12h, 90m; got {text!r}")
    return seconds


_LISTS = {Tenant: "tenant", User: "user", Queue: "queue"}


def _find(session: Session, model: type[_Named], name: str, field: str) -> _Named:
    """The tenant, user or queue called `name`, else an AdminError with a did-you-mean."""
    row = session.scalars(select(model).where(model.name == name)).one_or_none()
    if row is None:
        what = _LISTS[model]
        close = suggest(name, session.scalars(select(model.name)))
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise AdminError(field, f"no {what} {name!r}{hint}; see: trainyard admin {what} list")
    return row


def _flush(session: Session, field: str, what: str) -> None:
    """Flush; a unique-name race with another writer becomes an AdminError."""
    try:
        session.flush()
    except IntegrityError:
        raise AdminError(field, f"{what} already exists; choose another name") from None


def create_tenant(session: Session, name: str, *, now: float) -> TenantInfo:
    """A new tenant (no users, no queues yet)."""
    check_name("name", name, "tenant")
    if session.scalar(select(Tenant.id).where(Tenant.name == name)) is not None:
        raise AdminError("name", f"tenant {name!r} already exists; choose another name")
    session.add(Tenant(name=name, created_at=now))
    _flush(session, "name", f"tenant {name!r}")
    return TenantInfo(name=name, users=0, queues=0, created_at=now)


def list_tenants(session: Session) -> list[TenantInfo]:
    """Every tenant with its numbers of users and own queues, by name."""
    counts: Counter[tuple[str, int | None]] = Counter()
    for kind, column in (("users", User.tenant_id), ("queues", Queue.tenant_id)):
        for tenant_id, count in session.execute(select(column, func.count()).group_by(column)):
            counts[(kind, tenant_id)] = count
    return [
        TenantInfo(t.name, counts[("users", t.id)], counts[("queues", t.id)], t.created_at)
        for t in session.scalars(select(Tenant).order_by(Tenant.name))
    ]


def _live_tokens(session: Session, now: float) -> dict[int, int]:
    unexpired = or_(ApiToken.expires_at.is_(None), ApiToken.expires_at > now)
    live = (ApiToken.job_id.is_(None), ApiToken.revoked_at.is_(None), unexpired)
    query = select(ApiToken.user_id, func.count()).where(*live).group_by(ApiToken.user_id)
    return {user_id: count for user_id, count in session.execute(query)}


def _user_info(user: User, tokens: int) -> UserInfo:
    role = Role(user.role).value
    return UserInfo(user.name, user.tenant.name, role, user.disabled, tokens, user.created_at)


def create_user(
    session: Session, tenant: str, name: str, role: str | Role = Role.MEMBER, *, now: float
) -> UserInfo:
    """A new user of `tenant` with `role` (admin, member or viewer); user names are global."""
    check_name("name", name, "user")
    owner = _find(session, Tenant, tenant, "tenant")
    granted = _role(role)
    existing = session.scalars(select(User).where(User.name == name)).one_or_none()
    if existing is not None:
        raise AdminError(
            "name",
            f"user {name!r} already exists (tenant {existing.tenant.name!r}); user names are "
            "unique across tenants: choose another",
        )
    user = User(tenant=owner, name=name, role=granted, created_at=now)
    session.add(user)
    _flush(session, "name", f"user {name!r}")
    return _user_info(user, 0)


def list_users(session: Session, tenant: str | None = None, *, now: float) -> list[UserInfo]:
    """Users (of one tenant, or all), by tenant then name, with their live token counts."""
    query = select(User).join(Tenant, User.tenant_id == Tenant.id)
    if tenant is not None:
        query = query.where(User.tenant_id == _find(session, Tenant, tenant, "tenant").id)
    tokens = _live_tokens(session, now)
    rows = session.scalars(query.order_by(Tenant.name, User.name))
    return [_user_info(u, tokens.get(u.id, 0)) for u in rows]


def set_role(session: Session, user: str, role: str | Role, *, now: float) -> UserInfo:
    """Give `user` another role inside their tenant."""
    row = _find(session, User, user, "user")
    row.role = _role(role)
    session.flush()
    return _user_info(row, _live_tokens(session, now).get(row.id, 0))


def _set_disabled(session: Session, user: str, disabled: bool, now: float) -> UserInfo:
    row = _find(session, User, user, "user")
    row.disabled = disabled
    session.flush()
    return _user_info(row, _live_tokens(session, now).get(row.id, 0))


def disable_user(session: Session, user: str, *, now: float) -> UserInfo:
    """Lock `user` out: none of their tokens (job tokens included) authenticates any more."""
    return _set_disabled(session, user, True, now)


def enable_user(session: Session, user: str, *, now: float) -> UserInfo:
    """Let a disabled user in again (their unrevoked, unexpired tokens work again)."""
    return _set_disabled(session, user, False, now)


def issue_user_token(
    session: Session, user: str, *, now: float, name: str = "", expires_in_s: float | None = None
) -> IssuedToken:
    """A new personal API token of `user`; the text is in the result, and nowhere else."""
    row = _find(session, User, user, "user")
    if row.disabled:
        raise AdminError(
            "user",
            f"user {user!r} is disabled, so a token would not work; "
            f"enable it first: trainyard admin user enable {user}",
        )
    if len(name) > TOKEN_NAME_MAX:
        raise AdminError("name", f"a token name has at most {TOKEN_NAME_MAX} characters")
    if expires_in_s is not None and not (expires_in_s > 0 and math.isfinite(expires_in_s)):
        raise AdminError("expires_in", f"must be a positive number of seconds, got {expires_in_s}")
    expires_at = now + expires_in_s if expires_in_s is not None else None
    token_row, token = issue_token(session, row, now=now, name=name, expires_at=expires_at)
    role = Role(row.role).value
    return IssuedToken(row.name, row.tenant.name, role, token_row.token_id, name, expires_at, token)


def revoke_user_tokens(
    session: Session, user: str, *, now: float, token_id: str | None = None
) -> list[str]:
    """Revoke `user`'s live personal tokens (or only `token_id`); returns the ids revoked.
    Job-scoped tokens are left to their jobs (disable the user to stop those too)."""
    row = _find(session, User, user, "user")
    query = select(ApiToken).where(
        ApiToken.user_id == row.id, ApiToken.job_id.is_(None), ApiToken.revoked_at.is_(None)
    )
    if token_id is not None:
        query = query.where(ApiToken.token_id == token_id)
        if session.scalars(query).first() is None:
            raise AdminError("token_id", f"user {user!r} has no live token {token_id!r}")
    revoked = []
    for token in session.scalars(query.order_by(ApiToken.id)):
        revoke_token(session, token, now=now)
        revoked.append(token.token_id)
    return revoked


def _check_numbers(guaranteed: int, limit: int | None, weight: float) -> None:
    if guaranteed < 0:
        raise AdminError("guaranteed", f"must be >= 0 GPUs, got {guaranteed}")
    if limit is not None and limit < 0:
        raise AdminError("limit", f"must be >= 0 GPUs (or no limit), got {limit}")
    if limit is not None and limit < guaranteed:
        raise AdminError(
            "limit",
            f"{limit} is below guaranteed {guaranteed}; raise the limit or lower the guarantee",
        )
    if not (weight > 0 and math.isfinite(weight)):
        raise AdminError("weight", f"must be a number > 0, got {weight}")


def _check_priority(value: int | None) -> None:
    if value is not None and not -(2**31) <= value < 2**31:
        raise AdminError("max_priority", f"must be a 32-bit integer, got {value}")


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
    out = []
    for q in rows:
        kids = tuple(sorted(children.get(q.id, [])))
        where = (names.get(q.parent_id or 0), tenants.get(q.tenant_id or 0))
        jobs = (counts[(q.id, True)], counts[(q.id, False)])
        out.append(
            QueueInfo(
                q.name, *where, q.guaranteed, q.limit, q.weight, kids, *jobs,
                max_priority=q.max_priority,
            )
        )  # fmt: skip
    return out


def _resolve(session: Session, name: str | None, field: str, kind: str) -> int | None:
    if name is None:
        return None
    row = _find(session, Queue, name, field) if kind == "queue" else None
    return (row or _find(session, Tenant, name, field)).id


def create_queue(
    session: Session, name: str, *, now: float, parent: str | None = None,
    tenant: str | None = None, guaranteed: int = 0, limit: int | None = None, weight: float = 1.0,
    max_priority: int | None = None,
) -> QueueInfo:  # fmt: skip
    """A new queue under `parent` (None: a root), of `tenant` (None: shared by all), whose
    jobs may ask for a priority up to `max_priority` (None: no limit of its own)."""
    check_name("name", name, "queue")
    if session.scalar(select(Queue.id).where(Queue.name == name)) is not None:
        raise AdminError("name", f"queue {name!r} already exists; change it with `queue set`")
    parent_id = _resolve(session, parent, "parent", "queue")
    tenant_id = _resolve(session, tenant, "tenant", "tenant")
    _check_numbers(guaranteed, limit, weight)
    _check_tree(session, None, name, parent_id, tenant_id, guaranteed)
    values = {"parent_id": parent_id, "tenant_id": tenant_id, "guaranteed": guaranteed}
    _check_priority(max_priority)
    row = Queue(
        name=name, limit=limit, weight=weight, max_priority=max_priority, created_at=now, **values
    )
    session.add(row)
    _flush(session, "name", f"queue {name!r}")
    return _queue_infos(session, [row])[0]


def update_queue(
    session: Session, name: str, *, parent: str | Unset | None = UNSET,
    tenant: str | Unset | None = UNSET, guaranteed: int | None = None,
    limit: int | Unset | None = UNSET, weight: float | None = None,
    max_priority: int | Unset | None = UNSET,
) -> QueueInfo:  # fmt: skip
    """Change what is given (`UNSET`/None: keep); `parent=None` makes a root, `tenant=None`
    makes it shared, `limit=None` removes the limit, `max_priority=None` its priority limit
    (jobs already queued keep their priority)."""
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
    if not isinstance(max_priority, Unset):
        _check_priority(max_priority)
        row.max_priority = max_priority
    session.flush()
    return _queue_infos(session, [row])[0]


def list_queues(session: Session, tenant: str | None = None) -> list[QueueInfo]:
    """Queues (those a tenant may use: its own and shared ones, or all), by name."""
    query = select(Queue).order_by(Queue.name)
    if tenant is not None:
        tenant_id = _find(session, Tenant, tenant, "tenant").id
        query = query.where(or_(Queue.tenant_id.is_(None), Queue.tenant_id == tenant_id))
    return _queue_infos(session, list(session.scalars(query)))


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
