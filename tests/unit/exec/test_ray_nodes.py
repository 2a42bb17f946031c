"""`exec/ray/nodes.py` on `ray.nodes()` records as Ray 2.60 gives them (pure: no cluster):
names, GPUs, types and racks from labels and resources, the GPU-less head left out, a
restarted node over its dead record, and two live nodes claiming one name (outside review
6, M4): never merged, the same one kept on every call, the clash listed."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from trainyard.exec.ray.nodes import duplicates, from_ray, report_clashes


def _rec(node_id: str, name: str | None, *, alive: bool = True, gpus: float = 4.0,
         addr: str = "10.0.0.1", **labels: str) -> dict[str, Any]:  # fmt: skip
    tags = {f"trainyard.io/{k.replace('_', '-')}": v for k, v in labels.items()}
    if name is not None:
        tags["trainyard.io/node"] = name
    return {
        "NodeID": node_id, "Alive": alive, "NodeManagerAddress": addr, "Labels": tags,
        "Resources": {"CPU": 16.0, "GPU": gpus, "memory": 64e9},
    }  # fmt: skip


def test_labels_and_resources_make_the_node() -> None:
    head = {"NodeID": "h" * 28, "Alive": True, "Labels": {},
            "Resources": {"CPU": 4.0, "node:__internal_head__": 1.0}}  # fmt: skip
    records = [head, _rec("a" * 28, "gpu-01", rack="r1", leaf="l2", gpu_type="H100"),
               _rec("b" * 28, None, gpus=2.7)]  # fmt: skip
    nodes = {n.name: n for n in from_ray(records)}
    assert sorted(nodes) == ["gpu-01", "ray-bbbbbbbbbbbb"]  # the head offers no GPU
    one = nodes["gpu-01"]
    assert (one.gpus, one.gpu_type, one.topology, one.cpus) == (4, "H100", ("r1", "l2"), 16.0)
    assert nodes["ray-bbbbbbbbbbbb"].gpus == 2  # whole GPUs only


def test_a_restarted_node_is_the_live_record_of_its_name() -> None:
    records = [_rec("a" * 28, "gpu-01", alive=False), _rec("c" * 28, "gpu-01")]
    (node,) = from_ray(records)
    assert node.alive and node.engine_id == "c" * 28
    (node,) = from_ray(list(reversed(records)))
    assert node.alive and node.engine_id == "c" * 28
    assert duplicates(records) == {}  # a dead record does not claim its name


def test_two_live_nodes_claiming_one_name_are_not_merged_and_the_clash_is_listed() -> None:
    real = _rec("b" * 28, "gpu-03", addr="10.0.0.3")
    newcomer = _rec("a" * 28, "gpu-03", gpus=2.0, addr="10.0.0.9", rack="r9")
    # the node known under the name keeps it, whichever record Ray lists first
    for records in ([real, newcomer], [newcomer, real]):
        (node,) = from_ray(records, prefer={"gpu-03": "b" * 28})
        assert (node.engine_id, node.gpus, node.address) == ("b" * 28, 4, "10.0.0.3")
    # nothing known (a server starting): the same one on every call, in any order
    chosen = {from_ray(r)[0].engine_id for r in ([real, newcomer], [newcomer, real])}
    assert chosen == {"a" * 28}
    assert duplicates([real, newcomer]) == {
        "gpu-03": ["aaaaaaaaaaaa at 10.0.0.9", "bbbbbbbbbbbb at 10.0.0.3"]
    }


def test_a_clash_is_logged_once_as_an_error_naming_the_node_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    records = [_rec("b" * 28, "gpu-03"), _rec("a" * 28, "gpu-03", addr="10.0.0.9")]
    found = from_ray(records, prefer={"gpu-03": "b" * 28})
    with caplog.at_level(logging.ERROR, logger="trainyard.exec.ray.nodes"):
        logged = report_clashes(duplicates(records), found, {})
        logged = report_clashes(duplicates(records), found, logged)
    (line,) = [r.getMessage() for r in caplog.records]
    assert "two live Ray nodes claim the name gpu-03" in line
    assert "jobs go to bbbbbbbbbbbb only" in line and "10.0.0.9" in line
