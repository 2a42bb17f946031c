"""Seeded random scenarios: every rule in `invariants.py` holds on every cycle of 30.

Each seed builds a scenario in the file format (so the loader is exercised too): a few groups
of nodes under one or two topology levels, a queue tree with guaranteed shares and limits,
running jobs on random free devices and a mix of pending gangs. Then 30 cycles run, each on the
applied result of the previous one, 5 minutes apart, with no arrivals and no completions. In
such a closed world a job is evicted at most once: being evicted twice means it was placed
and then evicted again for work that was already there (preemption ping-pong).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from trainyard.core import PROFILES, apply_decision, run_cycle
from trainyard.scenario import load_scenario

from .invariants import check_decision

SEEDS = range(60)
CYCLES = 30


def random_scenario(seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    two_levels = rng.random() < 0.5
    nodes: list[dict[str, Any]] = []
    free: dict[str, list[int]] = {}
    for g in range(rng.randint(1, 3)):
        gpus = rng.choice([4, 8])
        count = rng.randint(1, 6)
        per_leaf = rng.randint(1, 3)
        path = [f"g{g}l{{leaf}}"]
        if two_levels:
            path.insert(0, f"s{g % 2}")
        group = {
            "name": f"g{g}n{{i}}",
            "count": count,
            "gpus": gpus,
            "gpu_type": rng.choice(["A100", "H100"]),
            "gpu_memory_gb": rng.choice([40, 80]),
            "island_size": rng.choice([0, gpus // 2]),
            "cpus": rng.choice([32, 128]),
            "path": path,
            "path_every": {"leaf": per_leaf},
        }
        if rng.random() < 0.2:
            group["unavailable"] = [gpus - 1]
        nodes.append(group)
        for i in range(count):
            usable = [d for d in range(gpus) if d not in group.get("unavailable", [])]
            free[f"g{g}n{i}"] = usable
    total = sum(len(v) for v in free.values())
    names = ["t1", "t2", "t3"]
    shares = [total // 4, total // 4, 0]
    queues = [{"name": "org", "guaranteed": sum(shares)}]
    for name, share in zip(names, shares, strict=True):
        q: dict[str, Any] = {"name": name, "parent": "org", "guaranteed": share}
        if rng.random() < 0.3:
            q["limit"] = max(share, total // 2)
        queues.append(q)
    now = 10_000
    running = []
    for k in range(rng.randint(0, 8)):
        node = rng.choice(sorted(free))
        if not free[node]:
            continue
        take = rng.randint(1, len(free[node]))
        devices, free[node] = free[node][:take], free[node][take:]
        running.append(
            {
                "id": f"r{k}",
                "queue": rng.choice(names),
                "priority": rng.randint(0, 3),
                "preemptible": rng.random() < 0.8,
                "min_runtime": rng.choice([0, 0, 3000]),
                "cpus": rng.choice([0, 4]) * take,
                "expected_duration": rng.choice([None, 5000, 20000]),
                "placement": [{"node": node, "devices": devices}],
                "started_at": rng.randint(0, now),
            }
        )
    pending = []
    for k in range(rng.randint(1, 14)):
        job: dict[str, Any] = {
            "id": f"p{k}",
            "queue": rng.choice(names),
            "gpus": rng.choice([1, 2, 4, 8, 16]),
            "priority": rng.randint(0, 5),
            "submit_time": rng.randint(0, now),
            "preemptible": rng.random() < 0.9,
            "expected_duration": rng.choice([None, 600, 50000]),
            "attained_service": rng.choice([0, 100_000]),
            "cpus": rng.choice([0, 8]),
        }
        if rng.random() < 0.3:
            job["gpu_types"] = [rng.choice(["A100", "H100"])]
        if rng.random() < 0.2:
            job["topology"] = rng.choice(["node", "leaf"])
        pending.append(job)
    levels = ["spine", "leaf"] if two_levels else ["leaf"]
    return {
        "now": now,
        "profile": PROFILES.names()[seed % len(PROFILES.names())],
        "topology": {"levels": levels},
        "nodes": nodes,
        "queues": queues,
        "running": running,
        "pending": pending,
    }


@pytest.mark.parametrize("seed", SEEDS)
def test_random_scenario_keeps_every_rule(seed: int) -> None:
    scenario = load_scenario(random_scenario(seed))
    snap = scenario.snapshot
    evicted: Counter[str] = Counter()
    for cycle in range(CYCLES):
        decision = run_cycle(snap, scenario.profile or "default")
        try:
            check_decision(snap, decision)
        except AssertionError as exc:
            raise AssertionError(f"seed {seed}, cycle {cycle}: {exc}") from None
        evicted.update(e.job_id for e in decision.evictions)
        twice = [job for job, n in evicted.items() if n > 1]
        assert not twice, f"seed {seed}, cycle {cycle}: evicted again: {twice}"
        snap = replace(apply_decision(snap, decision), now=snap.now + 300)
