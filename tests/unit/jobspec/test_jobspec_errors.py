"""Bad job specs (trainyard.jobspec): every error names the field path and says the fix, and
no input escapes as anything but `JobSpecError`."""

from __future__ import annotations

from typing import Any

import pytest

from trainyard.jobspec import JobSpecError, Limits, parse_job_spec

BASE = "name: a\ncommand: [python, train.py]\n"
PLANNED = "name: a\ncommand: x\nmodel: gpt3-125m\ngpu_type: H100\n"


def error(text: Any, **kwargs: Any) -> JobSpecError:
    with pytest.raises(JobSpecError) as exc:
        parse_job_spec(text, **kwargs)
    err = exc.value
    assert str(err) == (f"{err.field}: {err.message}" if err.field else err.message)
    return err


def test_malformed_yaml_has_line_and_column() -> None:
    err = error("name: a\ncommand: [python, train.py\ngpus: 2\n")
    assert err.field == "" and err.line is not None and err.column is not None
    assert "malformed YAML" in err.message and "job.yaml" in err.message
    assert err.to_dict()["line"] == err.line


def test_bad_indentation_points_at_the_line() -> None:
    err = error("name: a\ncommand: x\n  gpus: 2\n", source="spec.yaml")
    assert (err.line, err.source) == (3, "spec.yaml") and "spec.yaml" in err.message


def test_duplicate_keys_are_refused() -> None:
    err = error("name: a\ncommand: x\ngpus: 1\ngpus: 2\n")
    assert err.line == 4 and err.column == 1 and "duplicate key 'gpus'" in err.message


def test_several_documents_are_refused() -> None:
    assert error("name: a\ncommand: x\n---\nname: b\n").line == 3


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("- a\n- b\n", "got a list"),
        ("just text\n", "got a string"),
        ("42\n", "got the number 42"),
        ("", "empty"),
        ("# only a comment\n", "empty"),
    ],
)
def test_the_document_must_be_a_mapping(text: str, words: str) -> None:
    err = error(text)
    assert err.field == "" and words in err.message


def test_bytes_that_are_not_utf8() -> None:
    assert "UTF-8" in error(b"name: \xff\n").message


@pytest.mark.parametrize(
    ("extra", "field", "suggestion"),
    [
        ("gpu: 2", "gpu", "gpus"),
        ("max-restarts: 2", "max-restarts", "max_restarts"),
        ("worker: 2", "worker", "workers"),
        ("memory: 2", "memory", "memory_gb"),
        ("image: ubuntu", "image", None),
        ("resources: {gpu: 1}", "resources.gpu", "gpus"),
        ("resources: {cpu: 1}", "resources.cpu", "cpus"),
        ("model: gpt3-125m\ngpu_type: H100\nplanner: {max_gpu: 8}", "planner.max_gpu", "max_gpus"),
    ],
)
def test_unknown_fields_suggest_the_closest(extra: str, field: str, suggestion: str | None) -> None:
    err = error(BASE + extra + "\n")
    assert err.field == field and "unknown field" in err.message
    if suggestion is None:
        assert "did you mean" not in err.message
    else:
        assert f"did you mean {suggestion!r}" in err.message


def test_a_top_level_field_inside_resources() -> None:
    err = error(BASE + "resources: {workers: 2}\n")
    assert err.field == "resources.workers" and "top level" in err.message


def test_a_resource_given_twice() -> None:
    err = error(BASE + "gpus: 1\nresources: {gpus: 1}\n")
    assert err.field == "resources.gpus" and "keep one" in err.message


def test_keys_must_be_strings() -> None:
    assert "quote them" in error(BASE + "on: 1\n").message
    assert error(BASE + "env: {1: x}\n").field == "env"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("command: x\n", "name"),
        ("name: a\n", "command"),
        ("name: a\ncommand: null\n", "command"),
    ],
)
def test_required_fields(text: str, field: str) -> None:
    err = error(text)
    assert err.field == field and "required" in err.message


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [
        ("My_Job", "my-job"),
        ("1job", "job"),
        ("job-", "job"),
        ("a" * 64, "a" * 63),
        ("train job", "train-job"),
        ("", None),
        ("---", None),
    ],
)
def test_job_names_are_dns_labels(name: str, suggestion: str | None) -> None:
    err = error({"name": name, "command": ["x"]})
    assert err.field == "name"
    if suggestion is not None:
        assert f"such as {suggestion!r}" in err.message


@pytest.mark.parametrize(
    ("extra", "field", "words"),
    [
        # wrong types
        ("gpus: two", "gpus", "whole number"),
        ("gpus: '2'", "gpus", "remove the quotes"),
        ("gpus: 1.5", "gpus", "whole number"),
        ("gpus: true", "gpus", "whole number, got a boolean"),
        ("workers: [1]", "workers", "got a list"),
        ("cpus: lots", "cpus", "must be a number"),
        ("memory_gb: 1e3x", "memory_gb", "must be a number"),
        ("cpus: .inf", "cpus", "finite"),
        ("preemptible: maybe", "preemptible", "true or false"),
        ("preemptible: 1", "preemptible", "true or false"),
        ("priority: high", "priority", "whole number"),
        ("queue: 7", "queue", "must be a string"),
        ("queue: 'a/b'", "queue", "not a valid queue name"),
        ("queue: ''", "queue", "must not be empty"),
        ("command: 7", "command", "list of arguments"),
        ("command: []", "command", "must name a program"),
        ("command: ''", "command", "must name a program"),
        ("command: 'python \"x'", "command", "write it as a list"),
        ("command: [python, {a: 1}]", "command[1]", "must be a string"),
        ("command: [python, true]", "command[1]", "quote it"),
        ("command: [python, null]", "command[1]", "got null"),
        ("env: [A]", "env", "mapping"),
        ("env: {A: true}", "env.A", "quote it"),
        ("env: {A: [1]}", "env.A", "got a list"),
        ("env: {A: null}", "env.A", "got null"),
        ("topology: 'no such'", "topology", "island, node"),
        ("working_dir: 3", "working_dir", "must be a string"),
        ("checkpoint_every: 0", "checkpoint_every", ">= 1"),
        ("gpu_type: 100", "gpu_type", "must be a string"),
        ("resources: [1]", "resources", "mapping"),
        # negative, zero and impossible
        ("gpus: -1", "gpus", ">= 0"),
        ("resources: {gpus: -4}", "resources.gpus", ">= 0"),
        ("workers: 0", "workers", ">= 1"),
        ("nodes: -2", "nodes", ">= 1"),
        ("cpus: 0", "cpus", "greater than 0"),
        ("resources: {cpus: -1}", "resources.cpus", "greater than 0"),
        ("memory_gb: -8", "memory_gb", "greater than 0"),
        ("resources: {memory_gb: 0}", "resources.memory_gb", "greater than 0"),
        ("gpus: 1\ngpu_memory_gb: 0", "gpu_memory_gb", "greater than 0"),
        ("max_restarts: -1", "max_restarts", ">= 0"),
        ("min_runtime_s: -5", "min_runtime_s", ">= 0"),
        ("expected_duration_s: 0", "expected_duration_s", "greater than 0"),
        ("expected_duration_s: 1.0e+308", "expected_duration_s", "at most 315360000 s"),
        ("min_runtime_s: 315360001", "min_runtime_s", "ten years"),
        ("workers: 2\ngpus: 3", "gpus", "multiple of 2"),
        ("workers: 4\ngpus: 2", "gpus", "multiple of 4"),
        ("workers: 2\nnodes: 2\nresources: {gpus: 6}", "resources.gpus", "multiple of 4"),
        ("nodes: 2\ntopology: node", "topology", "nodes: 1"),
        ("nodes: 2\ntopology: island", "topology", "nodes: 1"),
        ("gpu_type: H100", "gpu_type", "no GPUs"),
        ("resources: {gpu_memory_gb: 40}", "resources.gpu_memory_gb", "no GPUs"),
    ],
)
def test_field_errors(extra: str, field: str, words: str) -> None:
    base = "name: a\n" if extra.startswith("command:") else BASE
    err = error(base + extra + "\n")
    assert err.field == field
    assert words in err.message


RESERVED = [
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "CUDA_VISIBLE_DEVICES",
    "TRAINYARD_JOB_ID",
    "TRAINYARD_CHECKPOINT_DIR",
    "TRAINYARD_API_URL",
    "TRAINYARD_PLAN_TP",
    "TORCHELASTIC_RUN_ID",
]


@pytest.mark.parametrize("name", RESERVED)
def test_reserved_environment_names(name: str) -> None:
    err = error(BASE + f"env: {{{name}: '1'}}\n")
    assert err.field == f"env.{name}" and "remove it" in err.message


@pytest.mark.parametrize("name", ["1ABC", "A-B", "A B", "A.B", "É"])
def test_invalid_environment_names(name: str) -> None:
    err = error({"name": "a", "command": ["x"], "env": {name: "v"}})
    assert err.field == f"env.{name}" and "environment variable name" in err.message


def test_unknown_queue_suggests_the_closest() -> None:
    err = error(BASE + "queue: reserch\n", queues=["research", "prod"])
    assert err.field == "queue"
    assert "unknown queue 'reserch'" in err.message and "did you mean 'research'" in err.message


def test_default_queue_must_exist_when_queues_are_known() -> None:
    err = error(BASE, queues=["research"])
    assert err.field == "queue" and "research" in err.message


@pytest.mark.parametrize(
    ("extra", "limits", "field", "limit_name"),
    [
        ("gpus: 16", Limits(max_gpus_per_job=8), "gpus", "max_gpus_per_job"),
        ("resources: {gpus: 16}", Limits(max_gpus_per_job=8), "resources.gpus",
         "max_gpus_per_job"),
        ("gpus: 16\nnodes: 1", Limits(max_gpus_per_node=8), "gpus", "max_gpus_per_node"),
        ("cpus: 128", Limits(max_cpus=64), "cpus", "max_cpus"),
        ("resources: {cpus: 128}", Limits(max_cpus=64), "resources.cpus", "max_cpus"),
        ("memory_gb: 2048", Limits(max_memory_gb=1024), "memory_gb", "max_memory_gb"),
        ("workers: 9", Limits(max_workers=8), "workers", "max_workers"),
        ("nodes: 3", Limits(max_nodes=2), "nodes", "max_nodes"),
        ("max_restarts: 50", Limits(max_restarts=10), "max_restarts", "max_restarts"),
        ("env: {A: '1', B: '2', C: '3'}", Limits(max_env_entries=2), "env", "max_env_entries"),
        ("model: gpt3-125m\ngpu_type: H100\nplanner: {max_gpus: 64}",
         Limits(max_gpus_per_job=8), "planner.max_gpus", "max_gpus_per_job"),
    ],
)  # fmt: skip
def test_oversized_requests(extra: str, limits: Limits, field: str, limit_name: str) -> None:
    err = error(BASE + extra + "\n", limits=limits)
    assert err.field == field
    assert f"limit {limit_name}" in err.message and "at most" in err.message


def test_default_limits_catch_absurd_requests() -> None:
    assert error(BASE + "gpus: 1000000\n").field == "gpus"
    assert error(BASE + "memory_gb: 1.0e+12\n").field == "memory_gb"


def test_a_request_at_the_limit_is_fine() -> None:
    limits = Limits(max_gpus_per_job=8, max_cpus=64, max_env_entries=1, max_command_length=8)
    spec = parse_job_spec(
        "name: a\ncommand: [abc, def]\ngpus: 8\ncpus: 64\nenv: {A: '1'}\n", limits=limits
    )
    assert spec.gpus == 8


def test_command_length_limit() -> None:
    err = error({"name": "a", "command": ["x" * 10, "y"]}, limits=Limits(max_command_length=11))
    assert err.field == "command" and "limit max_command_length" in err.message


def test_spec_size_limit() -> None:
    err = error(BASE + "# " + "x" * 200 + "\n", limits=Limits(max_spec_bytes=100))
    assert err.field == "" and "max_spec_bytes" in err.message


def test_no_limits() -> None:
    spec = parse_job_spec(BASE + "gpus: 100000\n", limits=Limits.none())
    assert spec.gpus == 100000


@pytest.mark.parametrize(
    "text",
    [
        "{",
        "[",
        "a: b: c",
        "\t- x",
        "name: &a [*a]",
        "!!python/object:os.system {}",
        "name: !!binary aGk=\ncommand: x",
        "? [a, b]\n: 1",
        "name: a\ncommand: x\nenv: {A: !!set {b}}",
        "name: a\ncommand: x\nmodel: {preset: [gpt3-125m]}\ngpu_type: H100\ngpus: 1",
        '{"name": "a", "command": "x \\ud800"}',
        '{"name": "a", "command": ["x"], "env": {"A": "\\udc00"}}',
        '{"name": "a", "command": ["x"], "\\ud800": 1}',
        "name: a\ncommand: x\nmodel: 7\ngpu_type: H100\ngpus: 1",
        "name: a\ncommand: x\nplanner: 7",
        "name: a\ncommand: x\nmodel: gpt3-125m\ngpu_type: H100\nplanner: [1]",
        PLANNED + "planner: {max_gpus: x}",
        PLANNED + "planner: {max_gpus: 8, tokens: x}",
        PLANNED + "planner: {max_gpus: 8, objective: 1}",
        PLANNED + "planner: {max_gpus: 8, nodes_of: 0}",
        PLANNED + "planner: {max_gpus: 8, tokens: .nan}",
    ],
)
def test_odd_input_is_a_jobspec_error(text: str) -> None:
    error(text)


def test_split_surrogate_pairs_from_json_escapes_are_joined() -> None:
    spec = parse_job_spec('{"name": "a", "command": ["echo", "\\ud83d\\ude00"]}')
    assert spec.command == ("echo", "\U0001f600")


def test_error_text_is_always_encodable() -> None:
    err = error('{"name": "a", "command": ["x"], "\\ud800x": 1}')
    (str(err) + err.field).encode("utf-8")
    assert err.field == "\\ud800x"


@pytest.mark.parametrize("field", ["gpus", "workers", "priority", "max_restarts", "nodes"])
def test_integers_out_of_range(field: str) -> None:
    err = error(BASE + f"{field}: {'9' * 400}\n", limits=Limits.none())
    assert err.field == field and "out of range" in err.message


def test_limit_messages_show_whole_numbers() -> None:
    err = error(BASE + "gpus: 2000000000\n")
    assert "asks for 2000000000 GPUs; at most 1024 allowed" in err.message


@pytest.mark.parametrize("text", ["[" * 5000, BASE + "env: " + "{a: " * 3000])
def test_deep_nesting_is_refused(text: str) -> None:
    assert "nested too deeply" in error(text).message


def test_long_strings_are_refused() -> None:
    assert error(BASE + f"working_dir: /{'d' * 5000}\n").field == "working_dir"
    assert error(BASE + f"resources: {{gpus: 1, gpu_type: {'G' * 200}}}\n").field == (
        "resources.gpu_type"
    )


def test_unknown_queue_lists_at_most_twenty() -> None:
    err = error(BASE + "queue: zzz\n", queues=[f"q{i:02d}" for i in range(30)])
    assert "and 10 more" in err.message and "did you mean" not in err.message
