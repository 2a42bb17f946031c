"""One input-error type (`trainyard.errors.FieldError`) and one "did you mean" (`suggest`)."""

from __future__ import annotations

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


def test_suggest() -> None:
    assert suggest("tiresais", ["fifo", "tiresias", "drf"]) == ["tiresias"]
    assert suggest("zzz", ["fifo", "drf"]) == []
    # folded: case and - vs _ do not count, and the known spelling comes back
    assert suggest("GPU-Type", ["gpu_type", "gpus"], fold=True) == ["gpu_type"]
    assert suggest("h100", ["H100", "A100"], n=2, cutoff=0.5, fold=True)[0] == "H100"
