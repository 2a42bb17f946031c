"""The ``elastic:`` section: a size range and a batch range, checked field by field, carried to
the core's `Job` and through storage unchanged."""

from __future__ import annotations

from typing import Any

import pytest

from trainyard.jobspec import JobSpecError, parse_job_spec, spec_from_json


def spec(**fields: Any) -> dict[str, Any]:
    return {"name": "el", "command": ["python", "train.py"], **fields}


def test_an_elastic_job_carries_its_ranges_to_the_core() -> None:
    s = parse_job_spec(
        spec(
            gpus=2,
            workers=2,
            elastic={"min_gpus": 1, "max_gpus": 8, "batch_size": 256, "max_batch_size": 2048},
        )
    )
    job = s.to_core_job("j1", 0.0)
    assert (job.gpus, job.min_gpus, job.max_gpus) == (2, 1, 8)
    assert job.is_elastic
    assert job.elastic is not None
    assert (job.elastic.batch, job.elastic.max_batch, job.elastic.max_local_batch) == (256, 2048, 0)
    assert spec_from_json(s.to_json()) == s


def test_defaults_min_is_one_rank_and_the_asked_size_is_the_smallest() -> None:
    s = parse_job_spec(spec(elastic={"max_gpus": 4}))
    assert s.gpus == 1 and s.elastic is not None and s.elastic.min_gpus == 1
    s = parse_job_spec(spec(workers=4, elastic={"max_gpus": 8}))
    assert s.gpus == 4  # one GPU per rank at the asked size


def test_a_fixed_global_batch_is_the_default() -> None:
    job = parse_job_spec(spec(gpus=2, elastic={"max_gpus": 4, "batch_size": 128})).to_core_job(
        "j", 0.0
    )
    assert job.elastic is not None and job.elastic.max_batch == job.elastic.batch == 128


def test_an_elastic_jobs_shape_follows_its_size_unless_its_topology_says() -> None:
    """Without `nodes:` an elastic job was held to one node (outside review 10: the shipped
    example, max_gpus 4 on 2-GPU nodes, started at 2 and could never grow); a rigid job of
    one node keeps to one."""
    elastic = parse_job_spec(spec(gpus=4, workers=4, elastic={"min_gpus": 1, "max_gpus": 4}))
    job = elastic.to_core_job("j", 0.0)
    assert (job.topology, job.nodes) == (None, 0)
    pinned = parse_job_spec(
        spec(gpus=4, workers=4, topology="node", elastic={"min_gpus": 1, "max_gpus": 4})
    )
    assert pinned.to_core_job("j", 0.0).topology == "node"
    assert parse_job_spec(spec(gpus=4, workers=4)).to_core_job("j", 0.0).topology == "node"


def test_a_rigid_job_stays_rigid() -> None:
    job = parse_job_spec(spec(gpus=2, workers=2)).to_core_job("j", 0.0)
    assert job.min_gpus is None and job.max_gpus is None and not job.is_elastic
    assert parse_job_spec(spec(gpus=2, workers=2)).to_dict()["elastic"] is None


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"gpus": 2, "elastic": {"min_gpus": 1}}, "elastic.max_gpus", "is required"),
        ({"gpus": 2, "elastic": {"max_gpu": 8}}, "elastic.max_gpu", "did you mean 'max_gpus'"),
        ({"gpus": 2, "elastic": {"max_gpus": 8, "min_gpus": 9}}, "elastic.min_gpus", "above"),
        ({"gpus": 9, "elastic": {"max_gpus": 8}}, "gpus", "above elastic.max_gpus (8)"),
        ({"gpus": 1, "elastic": {"min_gpus": 2, "max_gpus": 8}}, "gpus", "below elastic.min"),
        ({"gpus": 0, "elastic": {"max_gpus": 4}}, "elastic", "GPU jobs"),
        ({"gpus": 2, "elastic": {"max_gpus": 0}}, "elastic.max_gpus", ">= 1"),
        ({"gpus": 2, "elastic": {"max_gpus": "many"}}, "elastic.max_gpus", ""),
        ({"gpus": 2, "elastic": [4]}, "elastic", "mapping"),
        ({"gpus": 2, "elastic": {"max_gpus": 4000}}, "elastic.max_gpus", "max_gpus_per_job"),
        (
            {"gpus": 4, "workers": 2, "elastic": {"min_gpus": 3, "max_gpus": 8}},
            "elastic.min_gpus",
            "multiple of the 2 GPUs",
        ),
        ({"workers": 4, "elastic": {"max_gpus": 2}}, "elastic.max_gpus", "raise it"),
        (
            {"gpus": 2, "elastic": {"max_gpus": 4, "max_batch_size": 64}},
            "elastic.batch_size",
            "required with max_batch_size",
        ),
        (
            {"gpus": 2, "elastic": {"max_gpus": 4, "batch_size": 128, "max_batch_size": 64}},
            "elastic.max_batch_size",
            "below batch_size",
        ),
        (
            {"model": "gpt3-125m", "gpu_type": "H100", "gpus": 8, "elastic": {"max_gpus": 16}},
            "elastic",
            "model:",
        ),
    ],
)
def test_bad_values_name_the_field_and_the_fix(
    fields: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(JobSpecError) as info:
        parse_job_spec(spec(**fields))
    assert info.value.field == field
    assert words in str(info.value)
