"""One input-error type (`trainyard.errors.FieldError`) and one "did you mean" (`suggest`)."""

from __future__ import annotations

import pickle
from concurrent.futures import ProcessPoolExecutor

import pytest

from trainyard.core.errors import SnapshotError
from trainyard.errors import FieldError, suggest
from trainyard.jobspec import JobSpecError
from trainyard.planner.errors import PlannerError
from trainyard.scenario.schema import ScenarioError
from trainyard.server.services.admin import AdminError
from trainyard.sim.workload import WorkloadError

KINDS = (SnapshotError, JobSpecError, ScenarioError, PlannerError, AdminError, WorkloadError)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_every_input_error_is_a_field_error(kind: type[FieldError]) -> None:
    error = kind("pending[3].gpus", "must be >= 0")
    assert isinstance(error, FieldError) and isinstance(error, ValueError)
    assert (error.field, error.message) == ("pending[3].gpus", "must be >= 0")
    assert str(error) == "pending[3].gpus: must be >= 0"


def test_the_specialisations_keep_their_extras() -> None:
    assert str(ScenarioError("nodes", "empty", source="s.yaml")) == "s.yaml: nodes: empty"
    assert WorkloadError("f.csv:3:2", "bad").where == "f.csv:3:2"
    spec = JobSpecError("", "not a mapping", source="job.yaml", line=1, column=1)
    assert (str(spec), spec.source, spec.line) == ("not a mapping", "job.yaml", 1)


@pytest.mark.parametrize("kind", (FieldError, *KINDS), ids=lambda k: k.__name__)
def test_every_input_error_survives_pickling(kind: type[FieldError]) -> None:
    error = kind("pending[3].gpus", "must be >= 0")
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is kind and str(back) == str(error)
    assert (back.field, back.message) == (error.field, error.message)


def test_the_extras_survive_pickling() -> None:
    spec = pickle.loads(pickle.dumps(JobSpecError("", "bad", source="job.yaml", line=4, column=2)))
    assert (spec.source, spec.line, spec.column, spec.to_dict()["line"]) == ("job.yaml", 4, 2, 4)
    scenario = pickle.loads(pickle.dumps(ScenarioError("nodes", "empty", source="s.yaml")))
    assert (str(scenario), scenario.source) == ("s.yaml: nodes: empty", "s.yaml")


def _raise_workload_error(where: str) -> None:
    raise WorkloadError(where, "the cluster is too small for this job")


def test_an_input_error_in_a_worker_process_reaches_the_parent() -> None:
    # Before, unpickling it in the parent raised TypeError in the pool's result thread and
    # the caller waited forever.
    with ProcessPoolExecutor(max_workers=1) as pool:
        future = pool.submit(_raise_workload_error, "trace.csv:7:3")
        with pytest.raises(WorkloadError) as caught:
            future.result(timeout=60)
    assert caught.value.where == "trace.csv:7:3"


def test_suggest() -> None:
    assert suggest("tiresais", ["fifo", "tiresias", "drf"]) == ["tiresias"]
    assert suggest("zzz", ["fifo", "drf"]) == []
    # folded: case and - vs _ do not count, and the known spelling comes back
    assert suggest("GPU-Type", ["gpu_type", "gpus"], fold=True) == ["gpu_type"]
    assert suggest("h100", ["H100", "A100"], n=2, cutoff=0.5, fold=True)[0] == "H100"
