"""`trainyard admin node list|cordon|drain|undrain` on SQLite and PostgreSQL: a cordoned node
gets no new job from a real scheduling round, jobs running there are untouched, undrain
brings it back; drain marks the node for eviction (the platform's part is tested in
test_platform.py); an unknown node is one error line that changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

from admin_state import row_counts
from server_factories import World
from sqlalchemy import Engine
from sqlalchemy.orm import Session
from typer.testing import CliRunner, Result

from trainyard.cli.main import app
from trainyard.server.db import Device, Job, JobState, Node, make_session_factory
from trainyard.server.lifecycle import transition
from trainyard.server.loop.scheduling import run_once
from trainyard.server.metrics import platform_metrics


def _admin(db_url: str, home: Path, *args: str) -> Result:
    return CliRunner().invoke(app, ["admin", "node", *args, "--db", db_url, "--home", str(home)])


def _node(session: Session, name: str) -> None:
    node = Node(name=name, cpus=8.0, memory_gb=64.0, registered_at=1000.0, virtual=True)
    node.devices = [
        Device(index=i, gpu_type="H100", memory_gb=80.0, uuid=f"{name}-{i}", virtual=True)
        for i in range(2)
    ]
    session.add(node)
    session.commit()


def test_cordon_keeps_new_jobs_off_and_undrain_brings_them(
    engine: Engine, session: Session, world: World, tmp_path: Path
) -> None:
    url = engine.url.render_as_string(hide_password=False)
    _node(session, "n0")
    running = world.job(session, now=1000.0, gpus=1)
    session.commit()
    factory = make_session_factory(engine)
    assert run_once(factory, now=1001.0, metrics=platform_metrics()).launch  # placed on n0
    with factory() as s:
        job = s.get(Job, running.id)
        assert job is not None
        transition(s, job, JobState.RUNNING, reason="started", now=1002.0)
        s.commit()

    drained = _admin(url, tmp_path, "cordon", "n0")
    assert drained.exit_code == 0, drained.output
    assert "cordoned; 1 job(s) still run there" in drained.stdout
    listed = json.loads(_admin(url, tmp_path, "list", "--json").stdout)
    assert [(n["name"], n["schedulable"], n["jobs"], n["virtual"]) for n in listed] == [
        ("n0", False, 1, True)
    ]

    waiting = world.job(session, now=1003.0, gpus=1)
    session.commit()
    applied = run_once(factory, now=1004.0, metrics=platform_metrics())
    assert not applied.launch and not applied.stop  # nothing placed, nothing evicted
    with factory() as s:
        still = s.get(Job, running.id)
        pending = s.get(Job, waiting.id)
        assert still is not None and still.state == JobState.RUNNING
        assert pending is not None and pending.state == JobState.PENDING
        assert pending.pending_reason

    back = _admin(url, tmp_path, "undrain", "n0")
    assert back.exit_code == 0 and "n0: schedulable" in back.stdout
    applied = run_once(factory, now=1005.0, metrics=platform_metrics())
    assert [launch.job_id for launch in applied.launch] == [waiting.id]

    draining = _admin(url, tmp_path, "drain", "n0", "--reason", "fan replacement")
    assert draining.exit_code == 0, draining.output
    assert "draining; 2 job(s) there are evicted and requeued" in draining.stdout
    (node,) = json.loads(_admin(url, tmp_path, "list", "--json").stdout)
    assert node["state"] == "draining" and node["drained_at"] is not None
    assert node["drain_reason"] == "fan replacement"
    listed = _admin(url, tmp_path, "list").stdout
    assert "drain" in listed and "replacement" in listed  # (the table wraps at 80 columns)
    back = _admin(url, tmp_path, "undrain", "n0")
    (node,) = json.loads(_admin(url, tmp_path, "list", "--json").stdout)
    assert node["drain_reason"] is None and node["state"] == "schedulable"


def test_unknown_node_is_one_line_and_changes_nothing(
    engine: Engine, session: Session, world: World, tmp_path: Path
) -> None:
    url = engine.url.render_as_string(hide_password=False)
    _node(session, "gpu-a")
    before = row_counts(engine)
    result = _admin(url, tmp_path, "drain", "gpu-b")
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        "error: node: no node named 'gpu-b'; did you mean 'gpu-a'?"
    )
    assert row_counts(engine) == before
    too_long = _admin(url, tmp_path, "drain", "gpu-a", "--reason", "x" * 300)
    assert too_long.exit_code == 2
    assert too_long.output.strip().splitlines()[-1] == (
        "error: reason: at most 255 characters (got 300)"
    )
    assert row_counts(engine) == before
    with make_session_factory(engine)() as s:
        node = s.query(Node).one()
        assert node.schedulable


def test_remove_forgets_a_lost_node_no_job_holds_and_nothing_else(
    engine: Engine, session: Session, world: World, tmp_path: Path
) -> None:
    """A node that left for good (a Ray worker gone, this machine's node after the server
    moved to Ray) stayed in the table with no way to remove it but SQL (outside review 10)."""
    from trainyard.server.db import Health

    url = engine.url.render_as_string(hide_password=False)
    _node(session, "live")
    _node(session, "gone")
    _node(session, "busy")
    job = world.job(session, now=1000.0, gpus=1)
    session.commit()
    factory = make_session_factory(engine)
    with factory() as s:
        for name in ("gone", "busy"):
            s.query(Node).filter(Node.name == name).one().health = Health.LOST
        row = s.get(Job, job.id)
        assert row is not None
        row.placement = [{"node": "busy", "devices": [0]}]
        transition(s, row, JobState.STARTING, reason="placed", now=1001.0)
        s.commit()
    before = row_counts(engine)
    live = _admin(url, tmp_path, "remove", "live")
    assert live.exit_code == 2 and "is healthy, not lost" in live.output
    busy = _admin(url, tmp_path, "remove", "busy")
    assert busy.exit_code == 2 and "1 job(s) still hold devices on node 'busy'" in busy.output
    assert row_counts(engine) == before
    gone = _admin(url, tmp_path, "remove", "gone")
    assert gone.exit_code == 0 and "node gone: removed (2 x H100)" in gone.stdout
    names = [n["name"] for n in json.loads(_admin(url, tmp_path, "list", "--json").stdout)]
    assert names == ["busy", "live"]
    with factory() as s:  # its devices went with it
        assert s.query(Device).filter(Device.uuid.like("gone-%")).count() == 0
    again = _admin(url, tmp_path, "uncordon", "live")  # undrain's other name
    assert again.exit_code == 0 and "live: schedulable" in again.stdout
