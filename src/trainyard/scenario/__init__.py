"""Cluster scenarios as data (docs/scenarios.md): a file in, a `Snapshot`; a `Decision` out.

- `schema`: `ScenarioError`, the field kinds of every record and their checks (on the shared
  field helpers of `trainyard.fields`), the `{i}` templates of `count` entries.
- `load`: `load_scenario` / `parse_scenario` (a file or mapping into a validated `Snapshot`,
  with the profile and steps it names), `schedule` (one cycle).
- `steps`: `run_steps`, a scenario's `steps:` cycle after cycle (`trainyard schedule`).
- `output`: `decision_to_dict` / `decision_to_json`.
"""

from trainyard.scenario.load import (
    Scenario,
    Step,
    load_scenario,
    parse_scenario,
    parse_step,
    schedule,
)
from trainyard.scenario.output import decision_to_dict, decision_to_json
from trainyard.scenario.schema import ScenarioError

__all__ = [
    "Scenario",
    "ScenarioError",
    "Step",
    "decision_to_dict",
    "decision_to_json",
    "load_scenario",
    "parse_scenario",
    "parse_step",
    "schedule",
]
