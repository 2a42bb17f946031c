"""Run a declarative case (`cases/*.yaml`) and check what it expects.

A case is data: a scenario (the format of docs/scenarios.md, or `scenario_file:` naming one)
and either one `expect:` block or a list of `steps:`. A step may first `finish` running jobs,
`submit` new pending jobs and `advance` the clock, then runs `repeat` cycles (default 1), each
on the result of the previous one (`core.apply_decision`). Every cycle is checked against the
rules in `invariants.py`; the step's `expect` is checked on its last decision, and the
`history` keys on all of its cycles. See `EXPECT_KEYS` for the vocabulary.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from trainyard.core import Decision, Snapshot, apply_decision, run_cycle
from trainyard.scenario import load_scenario, parse_step
from trainyard.scenario.steps import apply_step

from .invariants import check_decision, queue_gpus

ROOT = Path(__file__).resolve().parents[2]
CASES = Path(__file__).parent / "cases"

EXPECT_KEYS = {
    "placed": "exactly these jobs are placed",
    "placed_include": "these jobs are placed (others may be too)",
    "not_placed": "these jobs are not placed",
    "evicted": "exactly these jobs are evicted",
    "evicted_gpus": "total GPUs evicted",
    "eviction_nodes_max": "the evicted jobs sit on at most this many nodes",
    "pending": "{job: code} for jobs left pending",
    "message": "{job: substring} of the pending explanation",
    "message_excludes": "{job: substring} that must not be in the explanation",
    "nodes": "{job: number of nodes it spans}",
    "on_nodes": "{job: [nodes]} exact node set",
    "devices": "{job: {node: [devices]}} exact devices",
    "domains": "{job: {level: number of distinct domains at that level}}",
    "one_island": "[jobs] whose devices lie in one NVLink island per node",
    "gpu_type": "{job: type}",
    "action": "{job: action that placed it}",
    "waits_for": "{job: [evicted jobs]} exact after_evictions of a placement",
    "reserved": "{job: reservation start time} (null: any time)",
    "reserved_on": "{job: [nodes]} exact node set of a job's reservation",
    "no_reservation": "true: the decision holds no reservation",
    "queue_gpus": "{queue: GPUs it holds after the decision (with descendants)}",
    "empty": "true/false: the decision changes nothing",
    "resized": "{job: GPUs after} exactly these jobs are resized, to these sizes",
    "resize_reason": "{job: substring} of a resize's reason",
    "not_grown": "{job: substring} of why a running elastic job was not grown (None: no note)",
    "not_grown_until": "{job: time} the rule that holds it back lifts",
    "sizes": "{job: GPUs} a placed job's size (an elastic job may start smaller)",
}
HISTORY_KEYS = {
    "max_evictions_per_job": "over all cycles of the step, no job is evicted more often",
    "total_evictions_max": "over all cycles of the step",
    "quiet_after": "cycles after the first N of the step change nothing",
    "no_churn": "true: no job placed in one cycle of the step is evicted in a later one",
    "max_resizes_per_job": "over all cycles of the step, no job is resized more often",
}
STEP_KEYS = {"finish", "submit", "advance", "repeat", "expect", "history"}


@dataclass
class Case:
    name: str
    rule: str
    data: dict[str, Any]
    steps: list[dict[str, Any]] = field(default_factory=list)


def load_cases() -> list[Case]:
    out: list[Case] = []
    for path in sorted(CASES.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        for raw in doc["cases"]:
            unknown = set(raw) - {"name", "rule", "scenario", "scenario_file", "profile"}
            unknown -= {"expect", "steps", "history", "repeat", "advance"}
            assert not unknown, f"{path.name}: {raw.get('name')}: unknown keys {unknown}"
            steps = raw.get("steps")
            if steps is None:
                keys = ("expect", "history", "repeat", "advance")
                steps = [{k: raw[k] for k in keys if k in raw}]
            out.append(Case(f"{path.stem}::{raw['name']}", raw.get("rule", ""), raw, steps))
    return out


def run_case(case: Case) -> list[Decision]:
    """Run every step; returns the last decision of each step."""
    data = case.data
    if "scenario_file" in data:
        scenario = load_scenario(ROOT / data["scenario_file"])
    else:
        scenario = load_scenario(data["scenario"])
    profile = data.get("profile") or scenario.profile or "default"
    snap = scenario.snapshot
    results = []
    for k, step in enumerate(case.steps):
        assert not set(step) - STEP_KEYS, f"step {k}: unknown keys {set(step) - STEP_KEYS}"
        changes = parse_step(step, f"steps[{k}]", extra=("expect", "history"))
        snap = apply_step(snap, changes, f"steps[{k}]")  # the product's own step mechanics
        history: list[Decision] = []
        before = snap
        for _ in range(step.get("repeat", 1)):
            snap = replace(snap, now=snap.now + step.get("advance", 0))
            before = snap
            dec = run_cycle(snap, profile)
            check_decision(snap, dec)
            history.append(dec)
            snap = apply_decision(snap, dec)
        check_expect(step.get("expect", {}), before, history[-1], snap, f"step {k}")
        check_history(step.get("history", {}), history, f"step {k}")
        results.append(history[-1])
    return results


def _span(dec: Decision, job: str, where: str) -> Any:
    p = {p.job_id: p for p in dec.placements}.get(job)
    assert p is not None, f"{where}: {job} is not placed (pending: {dec.pending.get(job)})"
    return p


def check_expect(exp: dict[str, Any], snap: Snapshot, dec: Decision, after: Snapshot, where: str):
    unknown = set(exp) - set(EXPECT_KEYS)
    assert not unknown, f"{where}: unknown expectations {unknown}"
    placed = {p.job_id for p in dec.placements}
    evicted = {e.job_id for e in dec.evictions}
    nodes = {n.name: n for n in snap.nodes}
    reasons = {j: (r.code, r.message) for j, r in dec.pending.items()}
    if "placed" in exp:
        assert placed == set(exp["placed"]), f"{where}: placed {sorted(placed)}; {reasons}"
    for job in exp.get("placed_include", []):
        assert job in placed, f"{where}: {job} not placed: {reasons.get(job)}"
    for job in exp.get("not_placed", []):
        assert job not in placed, f"{where}: {job} was placed"
    if "evicted" in exp:
        assert evicted == set(exp["evicted"]), f"{where}: evicted {sorted(evicted)}"
    if "evicted_gpus" in exp:
        total = sum(e.gpus for e in dec.evictions)
        assert total == exp["evicted_gpus"], f"{where}: evicted {total} GPUs ({sorted(evicted)})"
    if "eviction_nodes_max" in exp:
        running = {r.job.id: r for r in snap.running}
        hosts = {nd.node for e in dec.evictions for nd in running[e.job_id].placement}
        assert len(hosts) <= exp["eviction_nodes_max"], f"{where}: evictions on {sorted(hosts)}"
    for job, code in exp.get("pending", {}).items():
        assert job in dec.pending, f"{where}: {job} is not pending"
        assert dec.pending[job].code == code, f"{where}: {job}: {reasons[job]}"
    for job, text in exp.get("message", {}).items():
        assert text in dec.pending[job].message, f"{where}: {job}: {reasons[job]}"
    for job, text in exp.get("message_excludes", {}).items():
        assert text not in dec.pending[job].message, f"{where}: {job}: {reasons[job]}"
    for job, count in exp.get("nodes", {}).items():
        got = [nd.node for nd in _span(dec, job, where).nodes]
        assert len(got) == count, f"{where}: {job} spans {got}"
    for job, names in exp.get("on_nodes", {}).items():
        got = {nd.node for nd in _span(dec, job, where).nodes}
        assert got == set(names), f"{where}: {job} on {sorted(got)}"
    for job, devs in exp.get("devices", {}).items():
        got = {nd.node: list(nd.devices) for nd in _span(dec, job, where).nodes}
        assert got == devs, f"{where}: {job} got {got}"
    levels = snap.topology.levels
    for job, per_level in exp.get("domains", {}).items():
        p = _span(dec, job, where)
        for level, count in per_level.items():
            depth = levels.index(level) + 1
            got = {nodes[nd.node].path[:depth] for nd in p.nodes}
            assert len(got) == count, f"{where}: {job} spans {level}s {sorted(got)}"
    for job in exp.get("one_island", []):
        for nd in _span(dec, job, where).nodes:
            size = nodes[nd.node].island_size or nodes[nd.node].gpus
            islands = {d // size for d in nd.devices}
            assert len(islands) == 1, f"{where}: {job} spans islands {islands} of {nd.node}"
    for job, gpu_type in exp.get("gpu_type", {}).items():
        assert _span(dec, job, where).gpu_type == gpu_type
    for job, action in exp.get("action", {}).items():
        assert _span(dec, job, where).action == action, f"{where}: {job}"
    for job, victims in exp.get("waits_for", {}).items():
        got = set(_span(dec, job, where).after_evictions)
        assert got == set(victims), f"{where}: {job} waits for {sorted(got)}"
    res = {r.job_id: r for r in dec.reservations}
    for job, start in exp.get("reserved", {}).items():
        assert job in res, f"{where}: no reservation for {job} ({sorted(res)})"
        if start is not None:
            assert res[job].start_time == start, f"{where}: {job} reserved at {res[job]}"
            est = dec.pending[job].estimated_start
            assert est == start or (est is not None and est < start), f"{where}: {job}: {est}"
    for job, nodes in exp.get("reserved_on", {}).items():
        assert job in res, f"{where}: no reservation for {job} ({sorted(res)})"
        got_nodes = sorted(n.node for n in res[job].nodes)
        assert got_nodes == sorted(nodes), f"{where}: {job} reserved on {got_nodes}"
    if exp.get("no_reservation"):
        assert not dec.reservations, f"{where}: unexpected {dec.reservations}"
    if "queue_gpus" in exp:
        held = queue_gpus(after, [(r.job, r.job.gpus) for r in after.running])
        got = {q: held[q] for q in exp["queue_gpus"]}
        assert got == exp["queue_gpus"], f"{where}: queue GPUs {got}"
    if "empty" in exp:
        assert dec.is_empty == exp["empty"], f"{where}: decision {dec}"
    resized = {z.job_id: z for z in dec.resizes}
    if "resized" in exp:
        got = {j: z.gpus for j, z in resized.items()}
        assert got == exp["resized"], f"{where}: resized {got}; {[z.reason for z in dec.resizes]}"
    for job, text in exp.get("resize_reason", {}).items():
        assert text in resized[job].reason, f"{where}: {job}: {resized[job].reason}"
    for job, text in exp.get("not_grown", {}).items():
        note = dec.not_grown.get(job)
        if text is None:
            assert note is None, f"{where}: {job}: {note}"
        else:
            assert note is not None and text in note.reason, f"{where}: {job}: {note}"
    for job, until in exp.get("not_grown_until", {}).items():
        note = dec.not_grown.get(job)
        assert note is not None and note.until == until, f"{where}: {job}: {note}"
    for job, gpus in exp.get("sizes", {}).items():
        assert _span(dec, job, where).gpus == gpus, f"{where}: {job}: {_span(dec, job, where)}"


def check_history(exp: dict[str, Any], history: list[Decision], where: str) -> None:
    unknown = set(exp) - set(HISTORY_KEYS)
    assert not unknown, f"{where}: unknown history expectations {unknown}"
    counts = Counter(e.job_id for d in history for e in d.evictions)
    if "max_evictions_per_job" in exp:
        worst = counts.most_common(1)
        assert not worst or worst[0][1] <= exp["max_evictions_per_job"], f"{where}: {counts}"
    if "total_evictions_max" in exp:
        assert counts.total() <= exp["total_evictions_max"], f"{where}: {counts}"
    if exp.get("no_churn"):
        started: dict[str, int] = {}
        for k, d in enumerate(history):
            for e in d.evictions:
                assert e.job_id not in started, (
                    f"{where}: {e.job_id} placed in cycle {started[e.job_id]} and evicted in "
                    f"cycle {k} ({e.action} for {e.for_job}) with no new work in between"
                )
            started.update((p.job_id, k) for p in d.placements)
    if "max_resizes_per_job" in exp:
        resized = Counter(z.job_id for d in history for z in d.resizes)
        worst_resized = resized.most_common(1)
        limit = exp["max_resizes_per_job"]
        assert not worst_resized or worst_resized[0][1] <= limit, f"{where}: {resized}"
    if "quiet_after" in exp:
        n = exp["quiet_after"]
        busy = [k for k, d in enumerate(history) if k >= n and not d.is_empty]
        assert not busy, f"{where}: cycles {busy[:5]} still change things: {history[busy[0]]}"
