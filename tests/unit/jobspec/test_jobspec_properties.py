"""Properties of the job spec (trainyard.jobspec): valid specs survive the JSON round trip, and
any input at all gives a `JobSpec` or a `JobSpecError`, never another exception."""

from __future__ import annotations

import json
import string
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from trainyard.jobspec import (
    FIELDS,
    RESERVED_ENV,
    RESOURCE_FIELDS,
    JobSpecError,
    Limits,
    parse_job_spec,
    spec_from_json,
)

_LABEL = st.from_regex(r"[a-z]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)
_QUEUE = st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,10}[A-Za-z0-9])?", fullmatch=True)
_ENV_NAME = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True).filter(
    lambda n: n not in RESERVED_ENV and not n.startswith(("TRAINYARD_", "TORCHELASTIC_"))
)
_ARG = st.text(st.characters(exclude_characters="\0", exclude_categories=["Cs"]), max_size=12)
_POSITIVE = st.floats(min_value=0.001, max_value=4096, allow_nan=False)


@st.composite
def valid_specs(draw: st.DrawFn) -> dict[str, Any]:
    """A mapping that is a valid job spec, with a random subset of the optional fields."""
    workers = draw(st.integers(1, 8))
    nodes = draw(st.integers(1, 4))
    data: dict[str, Any] = {
        "name": draw(_LABEL),
        "command": [draw(_ARG.filter(str.strip)), *draw(st.lists(_ARG, max_size=4))],
    }
    gpus = draw(st.sampled_from([0, workers * nodes, 2 * workers * nodes]))
    optional: dict[str, Any] = {
        "queue": draw(_QUEUE),
        "workers": workers,
        "nodes": nodes,
        "gpus": gpus,
        "cpus": draw(_POSITIVE),
        "memory_gb": draw(_POSITIVE),
        "priority": draw(st.integers(-1000, 1000)),
        "preemptible": draw(st.booleans()),
        "max_restarts": draw(st.integers(0, 10)),
        "min_runtime_s": draw(st.floats(0, 1e6)),
        "expected_duration_s": draw(_POSITIVE),
        "topology": draw(st.sampled_from(["leaf", "spine"] + (["node", "island"] * (nodes == 1)))),
        "env": draw(st.dictionaries(_ENV_NAME, _ARG, max_size=4)),
        "working_dir": draw(st.sampled_from(["/work", "runs/a", "."])),
        "checkpoint_every": draw(st.integers(1, 10_000)),
    }
    if gpus:
        optional["gpu_type"] = draw(st.sampled_from(["H100", "A100", "my-gpu"]))
        optional["gpu_memory_gb"] = draw(_POSITIVE)
    keep = draw(st.sets(st.sampled_from(sorted(optional))))
    data.update({k: v for k, v in optional.items() if k in keep})
    if "gpus" in data and data["gpus"] and ("workers" not in data or "nodes" not in data):
        data["workers"], data["nodes"] = workers, nodes
    if "gpus" not in data or data["gpus"] == 0:
        data.pop("gpu_type", None)
        data.pop("gpu_memory_gb", None)
    if data.get("topology") in ("node", "island"):
        data["nodes"] = 1
    if draw(st.booleans()):  # the same resources grouped under resources:
        grouped = {k: data.pop(k) for k in RESOURCE_FIELDS if k in data}
        data["resources"] = grouped
    return data


@given(valid_specs())
def test_valid_specs_round_trip(data: dict[str, Any]) -> None:
    spec = parse_job_spec(data)
    stored = spec.to_dict()
    assert list(stored) == list(FIELDS)
    assert parse_job_spec(stored) == spec
    assert spec_from_json(spec.to_json()) == spec
    assert json.loads(spec.to_json()) == stored


@given(valid_specs())
def test_valid_specs_map_to_the_core(data: dict[str, Any]) -> None:
    spec = parse_job_spec(data)
    job = spec.to_core_job("j", 1.0)
    assert job.gpus == spec.gpus and job.queue == spec.queue and job.name == spec.name
    assert spec.gpus is not None and spec.gpus % spec.ranks == 0
    # `nodes: N` is N machines for a rigid GPU job (one node is the topology "node")
    expect = spec.nodes if spec.nodes > 1 and spec.gpus and spec.elastic is None else 0
    assert job.nodes == expect


@given(valid_specs())
def test_the_yaml_form_of_a_valid_spec_parses_the_same(data: dict[str, Any]) -> None:
    assert parse_job_spec(json.dumps(data)) == parse_job_spec(data)


_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                               max_size=3),
    max_leaves=8,
)  # fmt: skip


@given(valid_specs(), st.sampled_from([*FIELDS, "resources", "extra"]), _JSONISH)
def test_any_value_in_any_field_is_a_spec_or_a_jobspec_error(
    data: dict[str, Any], key: str, value: object
) -> None:
    data[key] = value
    try:
        parse_job_spec(data, limits=Limits(max_gpus_per_job=64))
    except JobSpecError as exc:
        assert str(exc)


@given(st.text(alphabet=string.printable, max_size=80))
def test_any_text_is_a_spec_or_a_jobspec_error(text: str) -> None:
    try:
        parse_job_spec("name: a\ncommand: x\n" + text)
    except JobSpecError as exc:
        assert str(exc)
    try:
        parse_job_spec(text)
    except JobSpecError as exc:
        assert str(exc)
