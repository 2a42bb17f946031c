"""Job dependencies (`after:`) and job arrays (`array:`) in the scheduling loop, on both
databases, without an executor (services/depends.py, wired in loop/scheduling.py):

- a job waiting on `ok` stays PENDING, with the reason `dependency: waiting for job X to
  succeed (it is STATE)`, until X SUCCEEDED; then it is placed;
- an `ok` dependency that FAILED with no restart left (or was CANCELLED) cancels the waiting
  job in the round, the reason (`dependency failed: X FAILED`) in its event; one FAILED with
  restarts left is waited for (it will run again);
- an `any` dependency is met once the job ended, failed included;
- a dependency on an array id waits for every member;
- an array's `%N` throttle lets at most N members hold devices at once, the others PENDING
  with the reason `array: ...`;
- at submit, a dependency must name a job or array of the submitter's tenant (else 422 on
  `after[i].job`), and a bad `array:` is a 422 naming `array`.
"""

from __future__ import annotations

from typing import Any

import pytest
from api_fixtures import ApiWorld, api
from server_factories import World, mark_running, read_job
from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session, sessionmaker

from trainyard.server.db import Device, Job, JobEvent, JobState, Node, make_session_factory
from trainyard.server.lifecycle import transition
from trainyard.server.loop.scheduling import run_once
from trainyard.server.metrics import platform_metrics

__all__ = ["api"]  # the fixture, imported for its name

S = JobState
NOW = 2000.0


@pytest.fixture
def factory(engine: Engine, session: Session, world: World) -> sessionmaker[Session]:
    """One node of 4 A100s."""
    node = Node(name="n0", cpus=64.0, memory_gb=512.0, registered_at=1000.0)
    node.devices = [
        Device(index=i, gpu_type="A100", memory_gb=80.0, uuid=f"GPU-0-{i}") for i in range(4)
    ]
    session.add(node)
    session.commit()
    return make_session_factory(engine)


def _submit(session: Session, world: World, at: float = 1500.0, **fields: Any) -> str:
    job = world.job(session, now=at, **fields)
    session.commit()
    return job.id


def _after(job: str, condition: str = "ok") -> list[dict[str, str]]:
    return [{"job": job, "condition": condition}]


def _round(factory: sessionmaker[Session], now: float) -> list[str]:
    """One scheduling round; the ids it launched."""
    applied = run_once(factory, now=now, metrics=platform_metrics())
    assert not applied.retry, applied.error
    return [launch.job_id for launch in applied.launch]


def _move(factory: sessionmaker[Session], job_id: str, state: S, now: float, **facts: Any) -> None:
    with factory() as s:
        row = s.get(Job, job_id)
        assert row is not None
        transition(s, row, state, reason=state.value.lower(), now=now, details=facts or None)
        s.commit()


def _run_and_end(
    factory: sessionmaker[Session], job_id: str, end: S, now: float, exit_code: int = 0
) -> None:
    """A placed (STARTING) job starts, then ends in `end`."""
    assert read_job(factory, job_id).state is S.STARTING
    mark_running(factory, job_id, now)
    _move(factory, job_id, end, now + 1, exit_code=exit_code)


def _events(factory: sessionmaker[Session], job_id: str) -> list[tuple[S, str, dict[str, Any]]]:
    with factory() as s:
        rows = s.scalars(select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.id))
        return [(e.to_state, e.reason, dict(e.details or {})) for e in rows]


def test_ok_dependency_holds_until_it_succeeded(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    first = _submit(session, world, gpus=1)
    second = _submit(session, world, gpus=1, after=_after(first))
    assert _round(factory, NOW) == [first]
    held = read_job(factory, second)
    assert held.state is S.PENDING
    # the reason tells the dependency's state as the round read it, before placing it
    assert held.pending_reason == f"dependency: waiting for job {first} to succeed (it is PENDING)"
    mark_running(factory, first, NOW + 1)
    assert _round(factory, NOW + 2) == []
    assert read_job(factory, second).pending_reason == (
        f"dependency: waiting for job {first} to succeed (it is RUNNING)"
    )
    _move(factory, first, S.SUCCEEDED, NOW + 3, exit_code=0)
    assert _round(factory, NOW + 4) == [second]
    assert read_job(factory, second).state is S.STARTING


def test_failed_ok_dependency_cancels_the_dependent(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    first = _submit(session, world, gpus=1, max_restarts=0)  # its failure is final
    second = _submit(session, world, gpus=1, after=_after(first, "ok"))
    third = _submit(session, world, gpus=1, after=_after(second))  # a chain: cancelled too
    assert _round(factory, NOW) == [first]
    _run_and_end(factory, first, S.FAILED, NOW + 1, exit_code=3)
    assert _round(factory, NOW + 5) == []
    job = read_job(factory, second)
    assert job.state is S.CANCELLED and job.placement is None
    state, reason, details = _events(factory, second)[-1]
    assert state is S.CANCELLED
    assert reason == f"dependency failed: {first} FAILED"
    assert details["message"] == f"dependency failed: {first} FAILED"
    assert _round(factory, NOW + 6) == []
    assert read_job(factory, third).state is S.CANCELLED
    assert _events(factory, third)[-1][1] == f"dependency failed: {second} CANCELLED"


def test_any_dependency_starts_after_a_failure(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    first = _submit(session, world, gpus=1, max_restarts=0)
    second = _submit(session, world, gpus=1, after=_after(first, "any"))
    assert _round(factory, NOW) == [first]
    assert read_job(factory, second).pending_reason == (
        f"dependency: waiting for job {first} to end (it is PENDING)"
    )
    _run_and_end(factory, first, S.FAILED, NOW + 1, exit_code=1)
    assert _round(factory, NOW + 5) == [second]


def test_a_failure_with_restarts_left_is_waited_for_not_a_failed_dependency(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    """Found by an outside review: a job FAILED with restarts left waits out its back-off and
    runs again, but its `ok` dependent was cancelled as if it had failed for good, and an
    `any` dependent started before it had ended."""
    first = _submit(session, world, gpus=1, max_restarts=1)
    needs_ok = _submit(session, world, gpus=1, after=_after(first, "ok"))
    needs_end = _submit(session, world, gpus=1, after=_after(first, "any"))
    assert _round(factory, NOW) == [first]
    _run_and_end(factory, first, S.FAILED, NOW + 1, exit_code=1)  # 1 restart left
    assert _round(factory, NOW + 5) == []
    for job in (needs_ok, needs_end):
        held = read_job(factory, job)
        assert held.state is S.PENDING, held.state
        assert (held.pending_reason or "").endswith("(it is FAILED, to be restarted)")
    _move(factory, first, S.PENDING, NOW + 6)  # the restart
    assert _round(factory, NOW + 7) == [first]
    _run_and_end(factory, first, S.SUCCEEDED, NOW + 8)
    assert sorted(_round(factory, NOW + 10)) == sorted([needs_ok, needs_end])


def test_a_dependency_on_an_array_waits_for_every_member(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    members = [
        _submit(session, world, at=1500.0 + k, gpus=1, array_id="a-test1", array_index=k)
        for k in range(3)
    ]
    after = _submit(session, world, at=1600.0, gpus=1, after=_after("a-test1"))
    assert sorted(_round(factory, NOW)) == sorted(members)
    reason = read_job(factory, after).pending_reason or ""
    assert reason.startswith("dependency: waiting for array a-test1 (job j-"), reason
    assert reason.endswith("to succeed (it is PENDING)"), reason
    for k, member in enumerate(members[:2]):
        _run_and_end(factory, member, S.SUCCEEDED, NOW + 1 + k)
    assert _round(factory, NOW + 10) == []
    assert read_job(factory, after).pending_reason == (
        f"dependency: waiting for array a-test1 (job {members[2]}) to succeed (it is STARTING)"
    )
    _run_and_end(factory, members[2], S.SUCCEEDED, NOW + 11)
    assert _round(factory, NOW + 20) == [after]


def test_a_failed_array_member_cancels_an_ok_dependent(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    members = [
        _submit(
            session, world, at=1500.0 + k, gpus=1, array_id="a-test2", array_index=k, max_restarts=0
        )
        for k in range(2)
    ]
    after = _submit(session, world, at=1600.0, gpus=1, after=_after("a-test2"))
    _round(factory, NOW)
    _run_and_end(factory, members[0], S.FAILED, NOW + 1, exit_code=2)
    _round(factory, NOW + 5)
    assert read_job(factory, after).state is S.CANCELLED
    assert _events(factory, after)[-1][1] == f"dependency failed: {members[0]} FAILED"


def test_array_throttle_lets_at_most_n_hold_devices(
    factory: sessionmaker[Session], session: Session, world: World
) -> None:
    same: dict[str, Any] = {"gpus": 1, "array_id": "a-test3", "array_limit": 2}
    members = [_submit(session, world, at=1500.0 + k, array_index=k, **same) for k in range(4)]
    assert _round(factory, NOW) == members[:2]  # 4 GPUs free, but %2: the lowest indexes
    for member in members[2:]:
        job = read_job(factory, member)
        assert job.state is S.PENDING
        assert job.pending_reason is not None and job.pending_reason.startswith("array: ")
        assert "a-test3" in job.pending_reason and "at most 2 at once" in job.pending_reason
    mark_running(factory, members[0], NOW + 1)
    assert _round(factory, NOW + 2) == []  # still 2 hold devices
    _move(factory, members[0], S.SUCCEEDED, NOW + 3, exit_code=0)
    assert _round(factory, NOW + 4) == [members[2]]
    assert (read_job(factory, members[3]).pending_reason or "").startswith("array: ")
    with factory() as s:
        holding = s.scalars(
            select(Job.id).where(Job.array_id == "a-test3", Job.state.in_([S.STARTING, S.RUNNING]))
        ).all()
    assert sorted(holding) == sorted([members[1], members[2]])
    _run_and_end(factory, members[1], S.FAILED, NOW + 5, exit_code=1)  # ended either way
    assert _round(factory, NOW + 10) == [members[3]]


# -- submit-time validation, through the API ---------------------------------------------

SPEC = {"name": "dep", "queue": "research", "command": ["true"], "gpus": 1}


def _post(api: ApiWorld, user: str, **fields: Any) -> Any:
    return api.client.post("/v1/jobs", json={**SPEC, **fields}, headers=api.auth(user))


def test_submit_refuses_unknown_or_foreign_dependencies(api: ApiWorld) -> None:
    mine = _post(api, "ada")
    assert mine.status_code == 201, mine.text
    theirs = _post(api, "gus", queue="sales")
    assert theirs.status_code == 201, theirs.text
    for missing in ("j-nosuch", theirs.json()["id"], "a-nosuch"):
        answer = _post(api, "ada", after=[missing])
        assert answer.status_code == 422, answer.text
        error = answer.json()["error"]
        assert error["field"] == "after[0].job", error
        assert missing in error["message"]
    second = _post(api, "ada", after=[{"job": mine.json()["id"], "condition": "any"}, "j-gone"])
    assert second.status_code == 422 and second.json()["error"]["field"] == "after[1].job"
    ok = _post(api, "ada", after=[f"{mine.json()['id']}:ok"])
    assert ok.status_code == 201, ok.text
    detail = api.client.get(f"/v1/jobs/{ok.json()['id']}", headers=api.auth("ada")).json()
    assert detail["after"] == [{"job": mine.json()["id"], "condition": "ok"}]
    array = _post(api, "ada", array="0-2")
    assert array.status_code == 201, array.text
    assert array.json()["id"].startswith("a-") and len(array.json()["array_ids"]) == 3
    on_array = _post(api, "ada", after=[array.json()["id"]])
    assert on_array.status_code == 201, on_array.text
    foreign = _post(api, "gus", queue="sales", after=[array.json()["id"]])
    assert foreign.status_code == 422 and foreign.json()["error"]["field"] == "after[0].job"


def test_a_job_without_dependencies_stores_sql_null(api: ApiWorld) -> None:
    """The loop reads only the pending jobs with dependencies (`after IS NOT NULL`): a job
    without any must store SQL NULL, not the JSON document `null`."""
    plain = _post(api, "ada").json()["id"]
    waiting = _post(api, "ada", after=[plain]).json()["id"]
    with make_session_factory(api.engine)() as s:
        rows = s.execute(select(Job.id).where(Job.after.is_not(None))).scalars().all()
        stored = s.execute(text("SELECT id FROM jobs WHERE after IS NULL")).scalars().all()
    assert rows == [waiting]
    assert stored == [plain]


@pytest.mark.parametrize("bad", ["9-0", "x", "0-3%0", "0-3%", "1,,2", "0-99:0", "", True])
def test_submit_refuses_a_bad_array(api: ApiWorld, bad: object) -> None:
    answer = _post(api, "ada", array=bad)
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["field"] == "array", error
    assert error["message"]


def test_array_errors_say_what_is_wrong() -> None:
    """Outside review 7: `0-9:0` was told it "must count up"; a too large count named the
    database's lowest integer as its bound where the field's is 0."""
    from trainyard.jobspec import JobSpecError, parse_job_spec

    with pytest.raises(JobSpecError) as step:
        parse_job_spec({"name": "t", "command": ["x"], "array": "0-9:0"})
    assert "steps by 0" in step.value.message
    with pytest.raises(JobSpecError) as down:  # outside review 12: the value said once
        parse_job_spec({"name": "t", "command": ["x"], "array": "5-1"})
    assert down.value.message == "'5-1' must count up (e.g. 0-9)"
    with pytest.raises(JobSpecError) as part:
        parse_job_spec({"name": "t", "command": ["x"], "array": "1,5-1"})
    assert part.value.message == "'1,5-1': '5-1' must count up (e.g. 0-9)"
    with pytest.raises(JobSpecError) as big:
        parse_job_spec({"name": "t", "command": ["x"], "max_restarts": 10**12})
    assert big.value.field == "max_restarts" and "between 0 and 2147483647" in big.value.message


def test_submit_refuses_a_bad_dependency_condition(api: ApiWorld) -> None:
    answer = _post(api, "ada", after=[{"job": "j-abc", "condition": "maybe"}])
    assert answer.status_code == 422
    assert answer.json()["error"]["field"] == "after[0].condition"


def test_submit_refuses_an_ok_dependency_that_can_never_be_met(api: ApiWorld) -> None:
    """Outside review 7: `--after J:ok` on a job that had already failed for good was
    accepted, then cancelled in the next round; a script learnt of it only later. A job
    FAILED with restarts left may still succeed, and `:any` is always accepted."""
    jobs = [_post(api, "ada").json()["id"] for _ in range(3)]
    with make_session_factory(api.engine)() as s:
        for job_id, restarts, end in ((jobs[0], 0, S.FAILED), (jobs[1], 2, S.FAILED),
                                      (jobs[2], 0, S.CANCELLED)):  # fmt: skip
            row = s.get(Job, job_id)
            assert row is not None
            row.max_restarts = restarts
            if end is S.FAILED:
                row.placement = [{"node": "n0", "devices": [0]}]
                transition(s, row, S.STARTING, reason="scheduled", now=NOW)
                transition(s, row, S.FAILED, reason="exited", now=NOW + 1)
            else:
                transition(s, row, S.CANCELLED, reason="cancelled", now=NOW)
        s.commit()
    for dead, word in ((jobs[0], "FAILED"), (jobs[2], "CANCELLED")):
        answer = _post(api, "ada", after=[f"{dead}:ok"])
        assert answer.status_code == 422, answer.text
        error = answer.json()["error"]
        assert error["field"] == "after[0].job" and f"already ended {word}" in error["message"]
        assert f"{dead}:any" in error["message"]
        assert _post(api, "ada", after=[f"{dead}:any"]).status_code == 201
    assert _post(api, "ada", after=[f"{jobs[1]}:ok"]).status_code == 201  # it will restart


def test_resume_from_takes_an_ended_job_of_the_callers_own(api: ApiWorld) -> None:
    # `resume_from` copies a job's checkpoints into the new one's (outside review 12, F2):
    # only from a job of the same user (another member's checkpoints are not yours to read,
    # as no API serves them) that has ended (they would change under the copy).
    from sqlalchemy import update

    from trainyard.server.db import Job, make_session_factory

    def submit(user: str, **fields: Any) -> Any:
        spec = {"name": "r", "queue": "research", "command": ["true"], "gpus": 1, **fields}
        return api.client.post("/v1/jobs", json=spec, headers=api.auth(user))

    mine = submit("ada").json()["id"]
    answer = submit("ada", resume_from=mine)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == "resume_from"
    assert "is PENDING" in answer.json()["error"]["message"]
    with make_session_factory(api.engine)() as s:
        s.execute(update(Job).where(Job.id == mine).values(state="CANCELLED"))
        s.commit()
    assert submit("ada", resume_from=mine).status_code == 201
    for user, job in (("vic", mine), ("gus", mine), ("ada", "j-nosuchjob")):
        queue = "sales" if user == "gus" else "research"  # (gus is of another tenant)
        answer = submit(user, resume_from=job, queue=queue)
        assert answer.status_code in (403, 422), (user, answer.text)
        if answer.status_code == 422:
            assert answer.json()["error"]["field"] == "resume_from", answer.text
    bad = submit("ada", resume_from="../../etc")
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "resume_from"


def test_resume_from_is_refused_on_ray_saying_what_to_do(engine: Engine) -> None:
    from api_fixtures import seed
    from fastapi.testclient import TestClient

    from trainyard.server.api.app import create_app

    with make_session_factory(engine)() as session:
        tokens = seed(session)
    spec = {"name": "r", "queue": "research", "command": ["true"], "gpus": 1,
            "resume_from": "j-earlier"}  # fmt: skip
    with TestClient(create_app(engine, on_ray=True), raise_server_exceptions=False) as client:
        answer = client.post("/v1/jobs", json=spec,
                             headers={"Authorization": f"Bearer {tokens['ada']}"})  # fmt: skip
    assert answer.status_code == 422 and answer.json()["error"]["field"] == "resume_from"
    assert "Ray" in answer.json()["error"]["message"]
