"""Unit tests of snapshot.validate: a consistent snapshot passes; each inconsistency is
rejected, by `validate` and by `run_cycle`, with an error naming the offending field."""

from __future__ import annotations

import pytest
from state_fixtures import STATE_NODES, STATE_QUEUES, STATE_RUNNING, TWO_LEVELS

from trainyard.core import (
    Job,
    Node,
    NodeDevices,
    Queue,
    RunningJob,
    Snapshot,
    SnapshotError,
    run_cycle,
    validate,
)

# -- snapshot.validate --------------------------------------------------------------------


def snapshot_error(snap: Snapshot) -> SnapshotError:
    with pytest.raises(SnapshotError) as err:
        validate(snap)
    return err.value


def expect_error(snap: Snapshot, field: str, *words: str) -> None:
    """`validate` and `run_cycle` both reject `snap`, naming `field` and saying `words`."""
    for check in (validate, lambda s: run_cycle(s, "default")):
        with pytest.raises(SnapshotError) as err:
            check(snap)
        assert err.value.field == field, str(err.value)
        assert str(err.value).startswith(f"{field}: ")
        for word in words:
            assert word in err.value.message, err.value.message


def test_validate_accepts_a_consistent_snapshot() -> None:
    validate(Snapshot(0.0, STATE_NODES, TWO_LEVELS, STATE_QUEUES, STATE_RUNNING))


def test_validate_names_a_duplicate_node() -> None:
    expect_error(Snapshot(0.0, (Node("a", 1), Node("a", 2))), "nodes[1].name", "duplicate", "a")


def test_validate_names_a_path_of_the_wrong_length() -> None:
    snap = Snapshot(0.0, (Node("a", 1, path=("s0",)),), TWO_LEVELS)
    expect_error(snap, "nodes[0].path", "spine", "leaf")
    expect_error(Snapshot(0.0, (Node("a", 1, path=("x",)),)), "nodes[0].path")


def test_validate_names_bad_node_fields() -> None:
    expect_error(Snapshot(0.0, (Node("a", 65),)), "nodes[0].gpus")
    expect_error(Snapshot(0.0, (Node("a", 6, island_size=4),)), "nodes[0].island_size")
    expect_error(Snapshot(0.0, (Node("a", 4, unavailable=(4,)),)), "nodes[0].unavailable")


def test_validate_names_double_booked_running_devices() -> None:
    running = (
        RunningJob(Job("r0", gpus=2), (NodeDevices("a", (0, 1)),)),
        RunningJob(Job("r1", gpus=2), (NodeDevices("b", (0,)), NodeDevices("a", (1,)))),
    )
    snap = Snapshot(0.0, (Node("a", 4), Node("b", 4)), running=running)
    expect_error(snap, "running[1].placement[1].devices", "a:1", "already held")


def test_validate_names_bad_running_placements() -> None:
    nodes = (Node("a", 4),)
    wrong_count = (RunningJob(Job("r", gpus=2), (NodeDevices("a", (0,)),)),)
    expect_error(Snapshot(0.0, nodes, running=wrong_count), "running[0].placement", "1", "2")
    off_node = (RunningJob(Job("r", gpus=1), (NodeDevices("a", (4,)),)),)
    expect_error(Snapshot(0.0, nodes, running=off_node), "running[0].placement[0].devices")
    unknown = (RunningJob(Job("r", gpus=1), (NodeDevices("z", (0,)),)),)
    expect_error(Snapshot(0.0, nodes, running=unknown), "running[0].placement[0].node", "z")


def test_validate_names_an_unknown_queue() -> None:
    queues = (Queue("research"), Queue("prod"))
    snap = Snapshot(0.0, (Node("a", 4),), queues=queues, pending=(Job("j", queue="resarch"),))
    expect_error(snap, "pending[0].queue", "resarch", "prod, research")
    running = (RunningJob(Job("r", queue="nope"), (NodeDevices("a", (0,)),)),)
    snap = Snapshot(0.0, (Node("a", 4),), queues=queues, running=running)
    expect_error(snap, "running[0].job.queue", "nope")
    # without queues, only the implicit `default` exists
    expect_error(Snapshot(0.0, (Node("a", 4),), pending=(Job("j", queue="x"),)), "pending[0].queue")


def test_validate_names_a_queue_cycle_and_an_unknown_parent() -> None:
    cycle = (Queue("a", parent="c"), Queue("b", parent="a"), Queue("c", parent="b"))
    expect_error(Snapshot(0.0, (Node("n", 1),), queues=cycle), "queues[0].parent", "cycle")
    selfish = (Queue("a", parent="a"),)
    expect_error(Snapshot(0.0, (Node("n", 1),), queues=selfish), "queues[0].parent", "cycle")
    orphan = (Queue("a"), Queue("b", parent="x"))
    expect_error(Snapshot(0.0, (Node("n", 1),), queues=orphan), "queues[1].parent", "'x'")


def test_validate_names_bad_queue_fields() -> None:
    def queues(*qs: Queue) -> Snapshot:
        return Snapshot(0.0, (Node("n", 1),), queues=qs)

    expect_error(queues(Queue("a"), Queue("a")), "queues[1].name", "duplicate")
    expect_error(queues(Queue("a", guaranteed=4, limit=2)), "queues[0].limit")
    expect_error(queues(Queue("a", weight=0.0)), "queues[0].weight")
    expect_error(queues(Queue("a", guaranteed=-1)), "queues[0].guaranteed")


def test_validate_names_a_bad_topology_level() -> None:
    snap = Snapshot(
        0.0, (Node("a", 4, path=("s", "l")),), TWO_LEVELS, pending=(Job("j", topology="rack"),)
    )
    expect_error(snap, "pending[0].topology", "rack", "spine", "leaf", "island", "cluster")
    for level in ("island", "node", "spine", "leaf", "cluster"):
        validate(replace_pending(snap, Job("j", topology=level)))


def replace_pending(snap: Snapshot, *jobs: Job) -> Snapshot:
    return Snapshot(snap.now, snap.nodes, snap.topology, snap.queues, snap.running, jobs)


def test_validate_names_bad_job_fields() -> None:
    nodes = (Node("a", 4),)
    expect_error(Snapshot(0.0, nodes, pending=(Job("j", gpus=-1),)), "pending[0].gpus")
    expect_error(Snapshot(0.0, nodes, pending=(Job(""),)), "pending[0].id")
    expect_error(Snapshot(0.0, nodes, pending=(Job("j", cpus=-1.0),)), "pending[0].cpus")
    running = (RunningJob(Job("j"), (NodeDevices("a", (0,)),)),)
    expect_error(
        Snapshot(0.0, nodes, running=running, pending=(Job("j"),)), "pending[0].id", "duplicate"
    )
