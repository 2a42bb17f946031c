"""The scenario loader: what it builds, and an error naming the field for every bad input."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from trainyard.core import Job, Node, Queue
from trainyard.scenario import ScenarioError, decision_to_dict, load_scenario, schedule
from trainyard.scenario import schema as sf

BASE: dict[str, Any] = {
    "now": 100,
    "topology": {"levels": ["spine", "leaf"]},
    "nodes": [{"name": "n{i}", "count": 4, "gpus": 8, "path_every": {"spine": 4, "leaf": 2}}],
    "queues": [{"name": "a", "guaranteed": 8}, {"name": "b"}],
    "running": [{"id": "r0", "queue": "a", "placement": [{"node": "n0", "devices": "0-3"}]}],
    "pending": [{"id": f"p{k}", "queue": "b", "gpus": 2} for k in range(4)],
}


def with_(**changes: Any) -> dict[str, Any]:
    return {**BASE, **changes}


def pending(*extra: dict[str, Any]) -> dict[str, Any]:
    return with_(pending=[*BASE["pending"][:3], *extra])


def node(**kw: Any) -> dict[str, Any]:
    return with_(nodes=[{"name": "n0", "gpus": 8, "path": ["s", "l"], **kw}], running=[])


def run(*placement: dict[str, Any], **job: Any) -> dict[str, Any]:
    entry = {"id": "r0", "queue": "a", "placement": list(placement), **job}
    return with_(running=[entry])


BAD = [
    ("negative-gpus", pending({"id": "x", "queue": "b", "gpus": -1}), "pending[3].gpus", ">= 0"),
    ("unknown-key", pending({"id": "x", "gpu": 2}), "pending[3].gpu", "did you mean 'gpus'"),
    ("string-gpus", pending({"id": "x", "gpus": "two"}), "pending[3].gpus", "a whole number"),
    ("float-gpus", pending({"id": "x", "gpus": 1.5}), "pending[3].gpus", "a whole number"),
    ("bool-gpus", pending({"id": "x", "gpus": True}), "pending[3].gpus", "a boolean"),
    ("bool-field", pending({"id": "x", "preemptible": "yes"}), "pending[3].preemptible", "true"),
    ("nan", with_(now=float("nan")), "now", "finite"),
    ("missing-id", pending({"gpus": 1}), "pending[3].id", "is required"),
    ("unknown-queue", pending({"id": "x", "queue": "c"}), "pending[3].queue", "unknown queue"),
    ("duplicate-job", pending({"id": "p0", "queue": "b"}), "pending[3].id", "duplicate job"),
    (
        "job-level",
        pending({"id": "x", "queue": "b", "topology": "rack"}),
        "pending[3].topology",
        "'leaf'",
    ),
    (
        "min-gpus",
        pending({"id": "x", "queue": "b", "min_gpus": 4}),
        "pending[3].min_gpus",
        "exceed gpus",
    ),
    ("negative-duration", pending({"id": "x", "expected_duration": -1}), "", ">= 0"),
    ("gpu-types-list", pending({"id": "x", "gpu_types": [1]}), "pending[3].gpu_types[0]", ""),
    ("top-level-key", with_(pendng=[]), "pendng", "did you mean 'pending'"),
    ("top-level-list", [], "", "must be a mapping"),
    ("nodes-missing", {"now": 0}, "nodes", "is required"),
    ("nodes-not-list", with_(nodes={"n0": 8}), "nodes", "must be a list"),
    (
        "node-gpus-missing",
        node(gpus=None) | {"nodes": [{"name": "x", "path": ["s", "l"]}]},
        "nodes[0].gpus",
        "is required",
    ),
    ("path-length", node(path=["l"]), "nodes[0].path", "one entry per topology level"),
    ("path-missing", with_(nodes=[{"name": "n0", "gpus": 8}]), "nodes[0].path", "is required"),
    ("too-many-gpus", node(gpus=65), "nodes[0].gpus", "0..64"),
    ("island-size", node(island_size=3), "nodes[0].island_size", "divide"),
    ("unavailable", node(unavailable=[8]), "nodes[0].unavailable", "out of range"),
    ("count-zero", node(count=0), "nodes[0].count", ">= 1"),
    ("duplicate-copy", node(count=2), "nodes[0].name", "in the copy named 'n0'"),
    ("template-field", node(name="n{k}"), "nodes[0].name", "unknown template field {k}"),
    ("template-attr", node(name="n{i.real}"), "nodes[0].name", "unknown template field"),
    ("template-syntax", node(name="n{i"), "nodes[0].name", "bad template"),
    ("path-every-level", node(path_every={"rack": 2}), "nodes[0].path_every.rack", "unknown"),
    (
        "path-every-nesting",
        with_(
            nodes=[{"name": "n{i}", "count": 12, "gpus": 8, "path_every": {"spine": 6, "leaf": 4}}],
            running=[],
        ),
        "nodes[0].path_every.spine",
        "multiple of 4",
    ),
    ("reserved-level", with_(topology={"levels": ["node"]}), "topology.levels[0]", "not one of"),
    (
        "bandwidth-level",
        with_(topology={"levels": ["leaf"], "bandwidth_gbps": {"rack": 1}}),
        "topology.bandwidth_gbps.rack",
        "unknown key",
    ),
    (
        "queue-limit",
        with_(queues=[{"name": "a", "guaranteed": 8, "limit": 4}, {"name": "b"}]),
        "queues[0].limit",
        ">= guaranteed",
    ),
    (
        "queue-weight",
        with_(queues=[{"name": "a", "weight": 0}, {"name": "b"}]),
        "queues[0].weight",
        "> 0",
    ),
    (
        "queue-cycle",
        with_(queues=[{"name": "a", "parent": "b"}, {"name": "b", "parent": "a"}]),
        "queues[0].parent",
        "cycle",
    ),
    ("queue-name", with_(queues=[{"guaranteed": 8}]), "queues[0].name", "is required"),
    (
        "unknown-node",
        run({"node": "zz", "devices": [0]}),
        "running[0].placement[0].node",
        "unknown node",
    ),
    (
        "unknown-node-all",
        run({"node": "zz", "devices": "all"}),
        "running[0].placement[0].node",
        "unknown node",
    ),
    (
        "device-range",
        run({"node": "n0", "devices": "3-1"}),
        "running[0].placement[0].devices",
        "bad device range",
    ),
    (
        "device-out",
        run({"node": "n0", "devices": [8]}),
        "running[0].placement[0].devices",
        "not on 'n0'",
    ),
    (
        "gpus-mismatch",
        run({"node": "n0", "devices": [0, 1]}, gpus=4),
        "running[0].placement",
        "holds 2 devices",
    ),
    (
        "future-start",
        run({"node": "n0", "devices": [0]}, started_at=101),
        "running[0].started_at",
        "<= now",
    ),
    ("no-placement", with_(running=[{"id": "r0"}]), "running[0].placement", "is required"),
    (
        "double-booked",
        with_(
            running=[
                {"id": "r0", "placement": [{"node": "n1", "devices": "0-3"}]},
                {"id": "r1", "placement": [{"node": "n1", "devices": "3-4"}]},
            ],
            queues=[],
        ),
        "running[1].placement[0].devices",
        "already held",
    ),
    (
        "running-copy-job",
        with_(
            running=[
                {
                    "id": "r{i}",
                    "count": 2,
                    "queue": "x",
                    "placement": [{"node": "n{i}", "devices": [0]}],
                }
            ]
        ),
        "running[0].queue",
        "in the copy named 'r0'",
    ),
    ("profile-name", with_(profile="fast"), "profile", "unknown profile 'fast'"),
    ("profile-order", with_(profile={"job_order": "sjff"}), "profile", "did you mean 'sjf'"),
    ("profile-key", with_(profile={"orders": "sjf"}), "profile.orders", "unknown key"),
    ("profile-scorer", with_(profile={"scorers": {"topo": 1}}), "profile", "placement scorer"),
    ("profile-scorers-type", with_(profile={"scorers": 5}), "profile.scorers", "a mapping"),
]


@pytest.mark.parametrize(
    ("data", "field", "fragment"), [b[1:] for b in BAD], ids=[b[0] for b in BAD]
)
def test_bad_input_names_the_field(data: Any, field: str, fragment: str) -> None:
    with pytest.raises(ScenarioError) as err:
        load_scenario(data) if isinstance(data, dict) else _parse(data)
    if field:
        assert err.value.field == field, str(err.value)
    assert fragment in err.value.message, str(err.value)
    assert "\n" not in str(err.value)


def _parse(data: Any) -> None:
    from trainyard.scenario import parse_scenario

    parse_scenario(data)


def test_specs_cover_every_dataclass_field() -> None:
    assert set(sf.JOB) == {f.name for f in fields(Job)}
    assert set(sf.NODE) == {f.name for f in fields(Node)} - {"path"}
    assert set(sf.QUEUE) == {f.name for f in fields(Queue)}


def test_expansion_templates_and_paths() -> None:
    snap = load_scenario(BASE).snapshot
    assert [n.name for n in snap.nodes] == ["n0", "n1", "n2", "n3"]
    assert [n.path for n in snap.nodes] == [
        ("spine0", "leaf0"),
        ("spine0", "leaf0"),
        ("spine0", "leaf1"),
        ("spine0", "leaf1"),
    ]
    assert snap.now == 100.0 and isinstance(snap.now, float)
    (r,) = snap.running
    assert r.job.gpus == 4 and r.placement[0].devices == (0, 1, 2, 3) and r.started_at == 100


def test_count_start_and_placement_copies() -> None:
    data = with_(
        nodes=[{"name": "x{i:02d}", "count": 3, "start": 7, "gpus": 4, "path": ["s", "l{i}"]}],
        running=[
            {
                "id": "gang",
                "placement": [{"node": "x{j:02d}", "count": 2, "start": 8, "devices": "all"}],
            },
            {
                "id": "r{i}",
                "count": 1,
                "start": 7,
                "gpus": 2,
                "placement": [{"node": "x{i:02d}", "devices": "0,2"}],
            },
        ],
        queues=[],
        pending=[{"id": "p{i}", "count": 3, "gpu_types": "H100"}],
    )
    snap = load_scenario(data).snapshot
    assert [(n.name, n.path) for n in snap.nodes] == [
        ("x07", ("s", "l7")),
        ("x08", ("s", "l8")),
        ("x09", ("s", "l9")),
    ]
    gang, r7 = snap.running
    assert gang.job.gpus == 8 and [nd.node for nd in gang.placement] == ["x08", "x09"]
    assert r7.job.id == "r7" and r7.placement[0].devices == (0, 2)
    assert [j.id for j in snap.pending] == ["p0", "p1", "p2"]
    assert snap.pending[0].gpu_types == ("H100",)


def test_profile_by_name_and_by_overrides() -> None:
    assert load_scenario(BASE).profile is None
    assert load_scenario(with_(profile="fifo")).profile_name == "fifo"
    prof = load_scenario(
        with_(
            profile={"base": "las", "name": "sjf", "job_order": "sjf", "scorers": {"topology": 1}}
        )
    ).profile
    assert prof is not None
    assert (prof.name, prof.job_order, prof.actions) == ("sjf", "sjf", ("allocate",))
    assert prof.scorers == (("topology", 1.0),)


def test_files_yaml_and_json_agree(tmp_path: Path) -> None:
    import yaml

    (tmp_path / "s.yaml").write_text(yaml.safe_dump(BASE))
    (tmp_path / "s.json").write_text(json.dumps(BASE))
    assert load_scenario(tmp_path / "s.yaml") == load_scenario(str(tmp_path / "s.json"))


@pytest.mark.parametrize(
    ("name", "text", "fragment"),
    [
        ("missing.yaml", None, "cannot read the file"),
        ("bad.yaml", "nodes: [\n", "not valid YAML"),
        ("bad.json", "{nodes: 1}", "not valid JSON"),
        ("empty.yaml", "", "the scenario must be a mapping"),
        ("field.yaml", "nodes: [{name: a, gpus: -8}]\n", "nodes[0].gpus: must be >= 0"),
        ("bool-key.yaml", "nodes: []\non: 1\n", "quote them"),
        # the one YAML loader (`trainyard.yamlio`), as for job specs: a key given twice is
        # refused, with where, rather than the last one silently kept
        (
            "twice.yaml",
            "nodes: [{name: a, gpus: 8}]\nnodes: [{name: b, gpus: 8}]\n",
            "line 2, column 1: found duplicate key 'nodes'",
        ),
    ],
)
def test_file_errors_name_the_file(tmp_path: Path, name: str, text: str | None, fragment: str):
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert err.value.source == str(path)
    assert str(err.value).startswith(f"{path}: ")
    assert fragment in str(err.value)
    assert "\n" not in str(err.value)


def test_decision_dict_is_deterministic_and_ordered() -> None:
    scenario = load_scenario(BASE)
    first = json.dumps(decision_to_dict(schedule(scenario)))
    again = json.dumps(decision_to_dict(schedule(load_scenario(BASE))))
    assert first == again
    out = json.loads(first)
    assert list(out) == [
        "profile", "now", "placements", "evictions", "reservations", "pending", "resizes",
        "not_grown",
    ]  # fmt: skip
    placement = out["placements"][0]
    assert list(placement) == [
        "job",
        "queue",
        "gpus",
        "gpu_type",
        "action",
        "nodes",
        "after_evictions",
    ]
    assert list(placement["nodes"][0]) == ["node", "devices"]
    assert out["profile"] == "default" and out["now"] == 100.0


def test_schedule_profile_override_and_unknown_name() -> None:
    scenario = load_scenario(with_(profile="fifo"))
    assert schedule(scenario).profile == "fifo"
    assert schedule(scenario, "las").profile == "las"
    with pytest.raises(ScenarioError, match="unknown profile 'nope'"):
        schedule(scenario, "nope")


# The YAML pitfalls docs/scenarios.md says the loader reports, each with its fix.
YAML_PITFALLS = [
    (
        "brace-value",
        "nodes:\n  - name: {i}\n    count: 2\n    gpus: 8\n",
        'quote a value with braces, "n{i}"',
    ),
    (
        "brace-parse",
        "nodes:\n  - name: {i}-x\n    count: 2\n    gpus: 8\n",
        'a value that starts with a brace must be quoted ("{i}-x", "n{i}")',
    ),
    (
        "boolean-id",
        "nodes: [{name: a, gpus: 8}]\npending:\n  - id: on\n    gpus: 1\n",
        "YAML reads unquoted on/off/yes/no/true/false as booleans: quote the value",
    ),
]


@pytest.mark.parametrize(
    ("text", "fragment"), [p[1:] for p in YAML_PITFALLS], ids=[p[0] for p in YAML_PITFALLS]
)
def test_yaml_pitfalls_are_reported_with_the_fix(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "pitfall.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    assert fragment in str(err.value)
    assert "\n" not in str(err.value)


def test_exponent_without_a_dot_is_the_number_it_means(tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text("now: 1e3\nnodes: [{name: a, gpus: 8}]\npending: [{id: p, gpus: 1}]\n")
    assert load_scenario(path).snapshot.now == 1000.0


def test_a_mistake_has_the_same_words_in_a_scenario_and_a_job_spec() -> None:
    from trainyard.jobspec import JobSpecError, parse_job_spec

    with pytest.raises(ScenarioError) as scenario_err:
        load_scenario(pending({"id": "x", "gpus": "two"}))
    with pytest.raises(JobSpecError) as spec_err:
        parse_job_spec({"name": "x", "command": ["true"], "gpus": "two"})
    assert scenario_err.value.message == spec_err.value.message
