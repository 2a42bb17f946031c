"""The installed core (compiled with mypyc unless TRAINYARD_PURE=1) and the pure-Python
source decide exactly alike."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import trainyard.core.state
from trainyard.core import Decision, apply_decision, run_cycle
from trainyard.sim.workload.cluster import snapshot

SRC = Path(__file__).resolve().parents[3] / "src"
CASES = [(64, 60, seed) for seed in range(4)] + [(256, 200, 9)]
PROFILES = ("default", "fifo", "las")

_PURE = """
import json, sys
sys.path.insert(0, {tests!r})
import trainyard.core.state
from test_compiled import decisions
assert not trainyard.core.state.__file__.endswith(".so")
print(json.dumps(decisions()))
"""


def digest(decision: Decision) -> list[object]:
    return [
        [
            [p.job_id, [[nd.node, list(nd.devices)] for nd in p.nodes], p.action]
            for p in decision.placements
        ],
        [[e.job_id, e.for_job] for e in decision.evictions],
        sorted([k, v.code, v.message] for k, v in decision.pending.items()),
    ]


def test_installed_core_is_compiled_unless_pure() -> None:
    compiled = trainyard.core.state.__file__.endswith(".so")
    assert compiled == (os.environ.get("TRAINYARD_PURE") != "1")


def decisions() -> list[object]:
    """Digests of two consecutive cycles for every case and profile."""
    out: list[object] = []
    for gpus, pending, seed in CASES:
        for profile in PROFILES:
            snap = snapshot(gpus, pending, seed)
            first = run_cycle(snap, profile)
            second = run_cycle(apply_decision(snap, first), profile)
            out.append([digest(first), digest(second)])
    return out


def test_compiled_and_pure_python_decide_alike() -> None:
    mine = decisions()
    code = _PURE.format(tests=str(Path(__file__).parent))
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == json.loads(json.dumps(mine))
