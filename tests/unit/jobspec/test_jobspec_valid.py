"""Valid job specs (trainyard.jobspec): every form of the format, defaults, the core Job mapping
and the JSON round trip."""

from __future__ import annotations

import json
from types import MappingProxyType

import pytest

from trainyard.core.types import Job
from trainyard.jobspec import (
    FIELDS,
    JobSpec,
    JobSpecError,
    Limits,
    parse_job_spec,
    spec_from_dict,
    spec_from_json,
)

# Mirrors the draft format of examples/jobs/ddp/job.yaml (name, queue, command list, workers,
# gpus, cpus, memory_gb, max_restarts).
DDP_DRAFT = """\
name: ddp-mnist
queue: default
command:
  - python
  - train.py
  - --epochs
  - 3
  - --checkpoint-every
  - 50
workers: 2
gpus: 0
cpus: 4
memory_gb: 8
max_restarts: 3
"""

FULL = """\
name: llm-finetune-7
queue: research.nlp
command: "python -m train --config 'configs/a b.yaml' --lr 3e-4"
workers: 4
nodes: 2
gpus: 16
gpu_type: H100
gpu_memory_gb: 80
cpus: 64
memory_gb: 512.5
priority: 10
preemptible: false
max_restarts: 0
min_runtime_s: 600
expected_duration_s: 7200
topology: leaf
env:
  OMP_NUM_THREADS: 4
  NCCL_DEBUG: INFO
  _PRIVATE: ""
working_dir: /data/jobs/llm
checkpoint_every: 500
"""


def test_the_ddp_draft_format() -> None:
    spec = parse_job_spec(DDP_DRAFT)
    assert spec.name == "ddp-mnist" and spec.queue == "default"
    assert spec.command == ("python", "train.py", "--epochs", "3", "--checkpoint-every", "50")
    assert (spec.workers, spec.nodes, spec.gpus, spec.ranks) == (2, 1, 0, 2)
    assert (spec.cpus, spec.memory_gb, spec.max_restarts) == (4.0, 8.0, 3)
    assert spec.gpus_per_worker == 0


def test_minimal_spec_takes_the_defaults() -> None:
    spec = parse_job_spec("name: hello\ncommand: echo hi\n")
    assert spec == JobSpec(name="hello", command=("echo", "hi"))
    assert spec.queue == "default"
    assert (spec.workers, spec.nodes, spec.gpus) == (1, 1, 0)
    assert (spec.priority, spec.preemptible, spec.max_restarts) == (0, True, 3)
    assert spec.min_runtime_s == 0.0 and spec.expected_duration_s is None
    assert spec.gpu_type is None and spec.cpus is None and spec.memory_gb is None
    assert dict(spec.env) == {} and spec.model is None and spec.planner is None
    assert not spec.needs_planner


def test_every_field() -> None:
    spec = parse_job_spec(FULL)
    assert spec.command == (
        "python", "-m", "train", "--config", "configs/a b.yaml", "--lr", "3e-4",
    )  # fmt: skip
    assert spec.queue == "research.nlp"
    assert (spec.workers, spec.nodes, spec.gpus, spec.gpus_per_worker) == (4, 2, 16, 2)
    assert spec.gpu_type == "H100" and spec.gpu_memory_gb == 80.0
    assert (spec.cpus, spec.memory_gb) == (64.0, 512.5)
    assert (spec.priority, spec.preemptible, spec.max_restarts) == (10, False, 0)
    assert (spec.min_runtime_s, spec.expected_duration_s) == (600.0, 7200.0)
    assert spec.topology == "leaf"
    assert dict(spec.env) == {"OMP_NUM_THREADS": "4", "NCCL_DEBUG": "INFO", "_PRIVATE": ""}
    assert spec.working_dir == "/data/jobs/llm" and spec.checkpoint_every == 500


def test_resources_section_is_the_same_as_top_level() -> None:
    grouped = parse_job_spec(
        "name: a\ncommand: [x]\nworkers: 2\n"
        "resources: {gpus: 2, gpu_type: A100, gpu_memory_gb: 40, cpus: 8, memory_gb: 64}\n"
    )
    flat = parse_job_spec(
        "name: a\ncommand: [x]\nworkers: 2\n"
        "gpus: 2\ngpu_type: A100\ngpu_memory_gb: 40\ncpus: 8\nmemory_gb: 64\n"
    )
    assert grouped == flat


def test_a_mapping_and_json_text_are_accepted() -> None:
    data = {"name": "a", "command": ["python", "t.py"], "gpus": 1}
    assert parse_job_spec(data) == parse_job_spec(json.dumps(data))
    assert parse_job_spec(json.dumps(data).encode()) == parse_job_spec(data)


def test_null_means_absent() -> None:
    spec = parse_job_spec("name: a\ncommand: x\nqueue: null\ngpus: ~\nenv: null\n")
    assert spec == parse_job_spec("name: a\ncommand: x\n")


def test_whole_floats_are_whole_numbers() -> None:
    spec = parse_job_spec({"name": "a", "command": ["x"], "gpus": 4.0, "workers": 2.0})
    assert (spec.gpus, spec.workers) == (4, 2)
    assert isinstance(spec.gpus, int)


def test_the_spec_is_immutable() -> None:
    spec = parse_job_spec(FULL)
    with pytest.raises(AttributeError):
        spec.gpus = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.env["X"] = "1"  # type: ignore[index]
    assert isinstance(spec.env, MappingProxyType)


def test_to_core_job() -> None:
    spec = parse_job_spec(FULL)
    job = spec.to_core_job("job-42", submit_time=100.0, attained_service=30.0)
    assert job == Job(
        id="job-42",
        name="llm-finetune-7",
        queue="research.nlp",
        gpus=16,
        priority=10,
        submit_time=100.0,
        gpu_types=("H100",),
        gpu_memory_gb=80.0,
        cpus=64.0,
        memory_gb=512.5,
        preemptible=False,
        min_runtime=600.0,
        expected_duration=7200.0,
        attained_service=30.0,
        topology="leaf",
        nodes=2,  # exactly two machines, 8 GPUs on each
    )


def test_to_core_job_of_a_minimal_spec() -> None:
    job = parse_job_spec(DDP_DRAFT).to_core_job("j", 0.0)
    assert (job.gpus, job.gpu_types, job.cpus, job.memory_gb) == (0, (), 4.0, 8.0)
    assert job.expected_duration is None and job.topology is None and job.preemptible


@pytest.mark.parametrize("text", [DDP_DRAFT, FULL, "name: a\ncommand: x\n"])
def test_json_round_trip(text: str) -> None:
    spec = parse_job_spec(text)
    data = spec.to_dict()
    assert list(data) == list(FIELDS)
    assert json.loads(json.dumps(data)) == data
    assert spec_from_dict(data) == spec
    assert spec_from_json(spec.to_json()) == spec
    assert parse_job_spec(data) == spec


def test_from_dict_ignores_limits_that_changed_since() -> None:
    spec = parse_job_spec("name: a\ncommand: x\ngpus: 64\n")
    with pytest.raises(JobSpecError):
        parse_job_spec(spec.to_dict(), limits=Limits(max_gpus_per_job=8))
    assert spec_from_dict(spec.to_dict()) == spec


def test_from_json_reports_bad_json() -> None:
    with pytest.raises(JobSpecError) as exc:
        spec_from_json('{"name": ')
    assert exc.value.field == "" and exc.value.line == 1


def test_known_queues_accept_a_listed_queue() -> None:
    spec = parse_job_spec("name: a\ncommand: x\nqueue: research\n", queues={"research"})
    assert spec.queue == "research"


@pytest.mark.parametrize("topology", ["island", "node", "leaf", "spine"])
def test_topology_levels(topology: str) -> None:
    assert parse_job_spec(f"name: a\ncommand: x\ntopology: {topology}\n").topology == topology


def test_reserved_prefix_lookalikes_are_allowed() -> None:
    spec = parse_job_spec("name: a\ncommand: x\nenv: {MY_RANK: '0', TRAINYARDX: '1'}\n")
    assert dict(spec.env) == {"MY_RANK": "0", "TRAINYARDX": "1"}


def test_exponent_numbers_that_yaml_reads_as_strings() -> None:
    spec = parse_job_spec("name: a\ncommand: x\nmemory_gb: 1e3\ncpus: '2.5E1'\n")
    assert (spec.memory_gb, spec.cpus) == (1000.0, 25.0)
    assert parse_job_spec("name: a\ncommand: x\ngpus: 1e1\nmax_restarts: 1E0\n").gpus == 10
    assert parse_job_spec('{"name": "a", "command": ["x"], "min_runtime_s": 5e-324}').min_runtime_s


def test_the_shipped_example_jobs_parse() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[3] / "examples" / "jobs"
    files = sorted(root.glob("*/job.yaml"))
    if not files:
        pytest.skip("no examples/jobs/*/job.yaml in this checkout")
    for path in files:
        spec = parse_job_spec(path.read_text(), source=str(path))
        assert spec.to_core_job("j", 0.0).name == spec.name
