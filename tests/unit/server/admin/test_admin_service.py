"""`trainyard.server.services.admin` on SQLite and PostgreSQL: every rule, every error leaving the
database as it was, and queue trees the scheduler accepts."""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable
from typing import Any

import pytest
from admin_state import add_job, db_state
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from trainyard.core.snapshot import validate
from trainyard.server.db import ApiToken, Job, JobEvent, JobState, Queue, Tenant
from trainyard.server.db.tokens import issue_token, verify_token
from trainyard.server.loop.scheduling import load_snapshot
from trainyard.server.services import admin as svc
from trainyard.server.services.admin import AdminError

NOW = 1_000_000.0
S = JobState


@pytest.fixture
def org(session: Session) -> Session:
    """Two tenants, three users, and the tree org(16) > research(8, acme) > vision(4, acme),
    org > sales(4, globex), plus a shared root `scratch`; committed."""
    svc.create_tenant(session, "acme", now=NOW)
    svc.create_tenant(session, "globex", now=NOW)
    svc.create_user(session, "acme", "ada", now=NOW)
    svc.create_user(session, "acme", "root", "admin", now=NOW)
    svc.create_user(session, "globex", "gus", "viewer", now=NOW)
    svc.create_queue(session, "org", now=NOW, guaranteed=16, limit=32)
    svc.create_queue(
        session, "research", now=NOW, parent="org", tenant="acme", guaranteed=8, limit=16,
        weight=2.0,
    )  # fmt: skip
    svc.create_queue(session, "vision", now=NOW, parent="research", tenant="acme", guaranteed=4)
    svc.create_queue(session, "sales", now=NOW, parent="org", tenant="globex", guaranteed=4)
    svc.create_queue(session, "scratch", now=NOW)
    session.commit()
    return session


def expect_error(
    session: Session, field: str, call: Callable[[Session], Any], match: str = ""
) -> AdminError:
    """`call` raises an AdminError naming `field`; after the rollback nothing has changed."""
    before = db_state(session)
    with pytest.raises(AdminError) as info:
        call(session)
    error = info.value
    assert error.field == field, error
    assert str(error).startswith(f"{field}: ") and error.message
    assert re.search(match, error.message), error.message
    session.rollback()
    assert db_state(session) == before
    return error


ERRORS: list[tuple[str, str, Callable[[Session], Any], str]] = [
    # tenants
    ("tenant-dup", "name", lambda s: svc.create_tenant(s, "acme", now=NOW), "already exists"),
    ("tenant-upper", "name", lambda s: svc.create_tenant(s, "Acme", now=NOW), "invalid tenant"),
    ("tenant-dash", "name", lambda s: svc.create_tenant(s, "-x", now=NOW), "a-z 0-9"),
    ("tenant-long", "name", lambda s: svc.create_tenant(s, "a" * 65, now=NOW), "1 to 64"),
    ("tenant-empty", "name", lambda s: svc.create_tenant(s, "", now=NOW), "invalid"),
    # users
    ("user-tenant", "tenant", lambda s: svc.create_user(s, "acm", "bob", now=NOW),
     "did you mean 'acme'"),
    ("user-dup", "name", lambda s: svc.create_user(s, "acme", "ada", now=NOW), "already exists"),
    ("user-dup-other-tenant", "name", lambda s: svc.create_user(s, "globex", "ada", now=NOW),
     "unique across tenants"),
    ("user-name", "name", lambda s: svc.create_user(s, "acme", "Bob!", now=NOW), "invalid user"),
    ("user-role", "role", lambda s: svc.create_user(s, "acme", "bob", "owner", now=NOW),
     "admin, member, viewer"),
    ("role-user", "user", lambda s: svc.set_role(s, "adaa", "viewer", now=NOW),
     "did you mean 'ada'"),
    ("role-value", "role", lambda s: svc.set_role(s, "ada", "root", now=NOW), "unknown role"),
    ("disable-user", "user", lambda s: svc.disable_user(s, "nobody", now=NOW), "no user"),
    ("enable-user", "user", lambda s: svc.enable_user(s, "nobody", now=NOW), "no user"),
    # tokens
    ("token-user", "user", lambda s: svc.issue_user_token(s, "nobody", now=NOW), "no user"),
    ("token-expiry-0", "expires_in",
     lambda s: svc.issue_user_token(s, "ada", now=NOW, expires_in_s=0), "positive"),
    ("token-expiry-neg", "expires_in",
     lambda s: svc.issue_user_token(s, "ada", now=NOW, expires_in_s=-5), "positive"),
    ("token-name", "name", lambda s: svc.issue_user_token(s, "ada", now=NOW, name="x" * 65),
     "at most 64"),
    ("revoke-id", "token_id",
     lambda s: svc.revoke_user_tokens(s, "ada", now=NOW, token_id="000000000000"), "no live"),
    ("revoke-user", "user", lambda s: svc.revoke_user_tokens(s, "nobody", now=NOW), "no user"),
    # queues: creation
    ("queue-dup", "name", lambda s: svc.create_queue(s, "org", now=NOW), "already exists"),
    ("queue-name", "name", lambda s: svc.create_queue(s, "Big Queue", now=NOW), "invalid queue"),
    ("queue-parent", "parent", lambda s: svc.create_queue(s, "x", now=NOW, parent="reserch"),
     "did you mean 'research'"),
    ("queue-tenant", "tenant", lambda s: svc.create_queue(s, "x", now=NOW, tenant="acem"),
     "did you mean 'acme'"),
    ("queue-guaranteed", "guaranteed",
     lambda s: svc.create_queue(s, "x", now=NOW, guaranteed=-1), "0 to 2147483647"),
    ("queue-limit", "limit",
     lambda s: svc.create_queue(s, "x", now=NOW, limit=-1), "0 to 2147483647"),
    ("queue-limit-below", "limit",
     lambda s: svc.create_queue(s, "x", now=NOW, guaranteed=4, limit=2), "below guaranteed 4"),
    ("queue-weight-0", "weight", lambda s: svc.create_queue(s, "x", now=NOW, weight=0), "> 0"),
    ("queue-weight-neg", "weight", lambda s: svc.create_queue(s, "x", now=NOW, weight=-1), "> 0"),
    ("queue-weight-nan", "weight",
     lambda s: svc.create_queue(s, "x", now=NOW, weight=math.nan), "> 0"),
    ("queue-child-sum", "guaranteed",
     lambda s: svc.create_queue(s, "x", now=NOW, parent="org", guaranteed=5), "at most 4"),
    ("queue-shared-under-tenant", "tenant",
     lambda s: svc.create_queue(s, "x", now=NOW, parent="research"), "give it tenant 'acme'"),
    ("queue-other-tenant", "tenant",
     lambda s: svc.create_queue(s, "x", now=NOW, parent="research", tenant="globex"),
     "tenant 'acme'"),
    # queues: changes
    ("set-unknown", "queue", lambda s: svc.update_queue(s, "nope", weight=2.0), "no queue"),
    ("set-self-parent", "parent", lambda s: svc.update_queue(s, "org", parent="org"), "itself"),
    ("set-cycle", "parent", lambda s: svc.update_queue(s, "org", parent="vision"), "cycle"),
    ("set-cycle-child", "parent", lambda s: svc.update_queue(s, "research", parent="vision"),
     "cycle"),
    ("set-parent-unknown", "parent", lambda s: svc.update_queue(s, "org", parent="nope"),
     "no queue"),
    ("set-below-children", "guaranteed", lambda s: svc.update_queue(s, "org", guaranteed=10),
     "children of 'org' are guaranteed 12"),
    ("set-child-over-parent", "guaranteed",
     lambda s: svc.update_queue(s, "vision", guaranteed=9), "at most 8"),
    ("set-sibling-sum", "guaranteed", lambda s: svc.update_queue(s, "sales", guaranteed=9),
     "at most 8"),
    ("set-move-into-full", "guaranteed",
     lambda s: svc.update_queue(s, "scratch", parent="org", guaranteed=5), "at most 4"),
    ("set-limit-below", "limit", lambda s: svc.update_queue(s, "research", limit=4),
     "below guaranteed 8"),
    ("set-guaranteed-neg", "guaranteed",
     lambda s: svc.update_queue(s, "research", guaranteed=-2), "0 to 2147483647"),
    ("set-weight", "weight", lambda s: svc.update_queue(s, "research", weight=0.0), "> 0"),
    ("set-shared-under-tenant", "tenant", lambda s: svc.update_queue(s, "vision", tenant=None),
     "tenant 'acme'"),
    ("set-stray-children", "tenant", lambda s: svc.update_queue(s, "research", tenant="globex"),
     "vision"),
    ("set-move-under-tenant", "tenant",
     lambda s: svc.update_queue(s, "scratch", parent="research"), "tenant 'acme'"),
    # queues: deletion
    ("rm-children", "queue", lambda s: svc.delete_queue(s, "org"), "child queues"),
    ("rm-unknown", "queue", lambda s: svc.delete_queue(s, "scrach"), "did you mean 'scratch'"),
]  # fmt: skip


def test_bad_input_names_the_field_and_changes_nothing(org: Session) -> None:
    for case, field, call, match in ERRORS:  # one fixture for all: each case is rolled back
        try:
            expect_error(org, field, call, match)
        except BaseException as failure:
            raise AssertionError(f"case {case}: {failure}") from failure


def test_tenants_and_users(org: Session) -> None:
    tenants = {t.name: t for t in svc.list_tenants(org)}
    assert set(tenants) == {"acme", "globex"}
    assert (tenants["acme"].users, tenants["acme"].queues) == (2, 2)
    assert (tenants["globex"].users, tenants["globex"].queues) == (1, 1)
    users = svc.list_users(org, now=NOW)
    assert [(u.tenant, u.name, u.role) for u in users] == [
        ("acme", "ada", "member"), ("acme", "root", "admin"), ("globex", "gus", "viewer"),
    ]  # fmt: skip
    assert [u.name for u in svc.list_users(org, "globex", now=NOW)] == ["gus"]
    assert svc.set_role(org, "ada", "ADMIN", now=NOW).role == "admin"
    assert svc.disable_user(org, "gus", now=NOW).disabled
    org.commit()
    assert {u.name: (u.role, u.disabled) for u in svc.list_users(org, now=NOW)} == {
        "ada": ("admin", False), "root": ("admin", False), "gus": ("viewer", True),
    }  # fmt: skip
    assert not svc.enable_user(org, "gus", now=NOW).disabled


def test_tokens_issue_expire_revoke(org: Session) -> None:
    issued = svc.issue_user_token(org, "ada", now=NOW, name="laptop", expires_in_s=3600)
    assert (issued.user, issued.tenant, issued.role) == ("ada", "acme", "member")
    assert issued.expires_at == NOW + 3600 and issued.token.startswith(f"ty_{issued.token_id}_")
    other = svc.issue_user_token(org, "ada", now=NOW)
    org.commit()
    stored = org.scalars(select(ApiToken).where(ApiToken.token_id == issued.token_id)).one()
    assert stored.name == "laptop" and issued.token not in stored.secret_hash
    assert verify_token(org, issued.token, now=NOW + 10) is not None
    assert verify_token(org, issued.token, now=NOW + 3600) is None  # expired
    assert svc.list_users(org, "acme", now=NOW)[0].tokens == 2

    svc.disable_user(org, "ada", now=NOW)
    assert verify_token(org, other.token, now=NOW) is None
    org.commit()
    expect_error(org, "user", lambda s: svc.issue_user_token(s, "ada", now=NOW), "enable it")
    svc.enable_user(org, "ada", now=NOW)
    assert verify_token(org, other.token, now=NOW) is not None

    ada = stored.user
    job = add_job(org, "research", "ada", S.RUNNING)
    _row, job_token = issue_token(org, ada, now=NOW, job_id=job.id)
    assert svc.revoke_user_tokens(org, "ada", now=NOW, token_id=other.token_id) == [other.token_id]
    assert verify_token(org, other.token, now=NOW) is None
    assert svc.revoke_user_tokens(org, "ada", now=NOW) == [issued.token_id]
    assert svc.revoke_user_tokens(org, "ada", now=NOW) == []
    assert verify_token(org, job_token, now=NOW) is not None  # the job's token is left alone
    org.commit()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30d", 30 * 86400), ("12h", 43200), ("90m", 5400), ("45s", 45), ("2w", 1209600),
     ("3600", 3600), (" 1.5h ", 5400)],
)  # fmt: skip
def test_parse_duration(text: str, seconds: float) -> None:
    assert svc.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "0d", "-1d", "30x", "d", "1e400", "inf"])
def test_parse_duration_errors(text: str) -> None:
    with pytest.raises(AdminError) as info:
        svc.parse_duration(text, "--expires-in")
    assert info.value.field == "--expires-in"


def test_queue_tree_is_what_the_scheduler_reads(org: Session) -> None:
    snapshot = load_snapshot(org, NOW)
    validate(snapshot)
    got = {q.name: (q.parent, q.guaranteed, q.limit, q.weight) for q in snapshot.queues}
    assert got == {
        "org": (None, 16, 32, 1.0), "research": ("org", 8, 16, 2.0),
        "vision": ("research", 4, None, 1.0), "sales": ("org", 4, None, 1.0),
        "scratch": (None, 0, None, 1.0),
    }  # fmt: skip
    listed = {q.name: q for q in svc.list_queues(org)}
    assert listed["org"].children == ("research", "sales")
    assert listed["research"].tenant == "acme" and listed["scratch"].tenant is None
    assert {q.name for q in svc.list_queues(org, "globex")} >= {"org", "sales", "scratch"}
    assert "research" not in {q.name for q in svc.list_queues(org, "globex")}


def test_update_queue_moves_and_clears(org: Session) -> None:
    moved = svc.update_queue(org, "vision", parent="org", guaranteed=4, limit=6, weight=3.0)
    assert (moved.parent, moved.tenant, moved.limit, moved.weight) == ("org", "acme", 6, 3.0)
    org.commit()
    cleared = svc.update_queue(org, "vision", parent=None, tenant=None, limit=None)
    assert (cleared.parent, cleared.tenant, cleared.limit) == (None, None, None)
    assert cleared.guaranteed == 4 and cleared.weight == 3.0  # untouched
    # with research's guarantee at 0 its children may hold any guarantee (none to split)
    svc.update_queue(org, "research", guaranteed=0, limit=None)
    svc.create_queue(org, "nlp", now=NOW, parent="research", tenant="acme", guaranteed=50)
    org.commit()
    validate(load_snapshot(org, NOW))
    row = org.scalars(select(Queue).where(Queue.name == "vision")).one()
    assert (row.parent_id, row.tenant_id, row.limit) == (None, None, None)


def test_queue_to_one_tenant_refused_while_others_use_it(org: Session) -> None:
    add_job(org, "scratch", "gus", S.PENDING)
    org.commit()
    expect_error(
        org, "tenant", lambda s: svc.update_queue(s, "scratch", tenant="acme"), "gus|1 live"
    )
    svc.update_queue(org, "scratch", tenant="globex")  # its own jobs are fine
    org.commit()


def test_delete_queue(org: Session) -> None:
    svc.create_queue(org, "tmp", now=NOW, tenant="acme")
    for state, restarts in [(S.PENDING, 0), (S.RUNNING, 0), (S.PREEMPTED, 0), (S.FAILED, 1)]:
        job = add_job(org, "tmp", "ada", state, max_restarts=restarts)
        org.commit()
        expect_error(org, "queue", lambda s: svc.delete_queue(s, "tmp"), f"1 {state.value}")
        job.state = S.CANCELLED if state != S.FAILED else S.FAILED
        job.restart_count = job.max_restarts
        org.commit()
    error = expect_error(org, "queue", lambda s: svc.delete_queue(s, "tmp"), "--purge-finished")
    assert "4 finished" in error.message
    assert svc.delete_queue(org, "tmp", purge_finished=True) == 4
    org.commit()
    assert org.scalar(select(func.count()).select_from(Job)) == 0
    assert org.scalar(select(func.count()).select_from(JobEvent)) == 0
    assert svc.delete_queue(org, "scratch") == 0
    org.commit()
    assert {q.name for q in svc.list_queues(org)} == {"org", "research", "vision", "sales"}


def test_transaction_commits_or_rolls_back(org: Session) -> None:
    from sqlalchemy.orm import sessionmaker

    sessions = sessionmaker(bind=org.get_bind(), expire_on_commit=False)
    org.close()
    with pytest.raises(AdminError), svc.transaction(sessions) as s:
        svc.create_tenant(s, "initech", now=NOW)
        svc.create_user(s, "initech", "ada", now=NOW)  # taken: the tenant goes too
    with sessions() as s:
        assert s.scalar(select(Tenant).where(Tenant.name == "initech")) is None
    with svc.transaction(sessions) as s:
        svc.create_tenant(s, "initech", now=NOW)
    with sessions() as s:
        assert s.scalar(select(Tenant).where(Tenant.name == "initech")) is not None


def _tree_invariants(session: Session) -> None:
    rows = list(session.scalars(select(Queue)))
    by_id = {q.id: q for q in rows}
    for q in rows:
        kids = [c for c in rows if c.parent_id == q.id]
        if q.guaranteed > 0:
            assert sum(c.guaranteed for c in kids) <= q.guaranteed
        if q.tenant_id is not None:
            assert all(c.tenant_id == q.tenant_id for c in kids)
        assert q.limit is None or q.limit >= q.guaranteed
        assert q.parent_id is None or q.parent_id in by_id


def test_random_changes_keep_a_tree_the_scheduler_accepts(org: Session) -> None:
    rng = random.Random(7)
    names = ["org", "research", "vision", "sales", "scratch", "q1", "q2", "q3"]
    failures = successes = 0
    for _ in range(150):
        name = rng.choice(names)
        args: dict[str, Any] = {
            "parent": rng.choice([None, *names]),
            "tenant": rng.choice([None, "acme", "globex"]),
            "guaranteed": rng.choice([-1, 0, 0, 1, 2, 4, 8, 20]),
            "limit": rng.choice([None, None, -1, 2, 8, 40]),
            "weight": rng.choice([0.0, 0.5, 1.0, 2.0]),
        }
        kind = rng.choice(["create", "update", "update", "delete"])
        before = db_state(org)
        try:
            if kind == "create":
                svc.create_queue(org, name, now=NOW, **args)
            elif kind == "update":
                keep = rng.sample(sorted(args), rng.randint(1, len(args)))
                svc.update_queue(org, name, **{k: args[k] for k in keep})
            else:
                svc.delete_queue(org, name)
        except AdminError as error:
            assert error.field in {"name", "parent", "tenant", "guaranteed", "limit", "weight",
                                   "queue"}  # fmt: skip
            org.rollback()
            assert db_state(org) == before
            failures += 1
            continue
        org.commit()
        successes += 1
        _tree_invariants(org)
        validate(load_snapshot(org, NOW))
    assert failures > 20 and successes > 20
