"""Loading a scenario: a YAML/JSON file (or mapping) into a core `Snapshot`, and one cycle on it.

A scenario describes one moment of a cluster (nodes, topology, queues, running and pending
jobs, `now`) and optionally the profile to schedule it with. The format is documented in
docs/scenarios.md; in short, every record takes exactly the fields of its core dataclass,
plus a few helpers for writing big clusters by hand (`count`/`start` with `{i}` templates,
`path_every` for the topology path, device ranges like `"0-3"`).

Guarantees: a scenario that loads is a valid snapshot (`trainyard.core.validate` has run).
Any problem, including one found by the core's validation, raises `ScenarioError` whose
`field` is the path of the offending value *as written in the file* (`pending[3].gpus`) and
whose message says how to fix it. Nothing here runs a cycle except `schedule`.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from os import PathLike
from pathlib import Path
from typing import Any

from trainyard import yamlio
from trainyard.core import (
    Decision,
    Job,
    Node,
    NodeDevices,
    Profile,
    Queue,
    RunningJob,
    Snapshot,
    SnapshotError,
    Topology,
    UnknownNameError,
    get_profile,
    run_cycle,
    validate,
)
from trainyard.scenario import schema as sf
from trainyard.scenario.schema import ScenarioError
from trainyard.textfile import TextFileError, read_text

__all__ = [
    "Scenario",
    "ScenarioError",
    "Step",
    "load_scenario",
    "parse_scenario",
    "parse_step",
    "schedule",
]

RESERVED_LEVELS = ("island", "node", "cluster")


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a multi-cycle scenario (`steps:`): jobs that `finish` leave the running
    set and `submit`ted jobs join the pending ones, then `repeat` cycles run, each `advance`
    seconds after the last, each on the applied result of the one before."""

    finish: tuple[str, ...] = ()
    submit: tuple[Job, ...] = ()
    advance: float = 0.0
    repeat: int = 1


@dataclass(frozen=True, slots=True)
class Scenario:
    """A loaded scenario: a validated snapshot, the profile it asks for (if any), and its
    steps (none: one cycle)."""

    snapshot: Snapshot
    profile: Profile | None = None
    description: str = ""
    steps: tuple[Step, ...] = ()

    @property
    def profile_name(self) -> str | None:
        return self.profile.name if self.profile is not None else None


# -- sections ------------------------------------------------------------------------------


def _topology(raw: object) -> Topology:
    if raw is None:
        return Topology()
    data = sf.as_mapping(raw, "topology", ["levels", "bandwidth_gbps"])
    levels = sf.convert(("strs", None), data.get("levels", []), "topology.levels")
    for k, level in enumerate(levels):
        if not level or level in RESERVED_LEVELS or levels.index(level) != k:
            raise ScenarioError(
                f"topology.levels[{k}]",
                f"{level!r} must be non-empty, unique and not one of {list(RESERVED_LEVELS)}",
            )
    known = [*RESERVED_LEVELS, *levels]
    bw = sf.as_mapping(data.get("bandwidth_gbps", {}), "topology.bandwidth_gbps", known)
    pairs = tuple(
        (k, sf.scalar("float", v, f"topology.bandwidth_gbps.{k}", 0)) for k, v in bw.items()
    )
    return Topology(levels=tuple(levels), bandwidth_gbps=pairs)


def _nodes(raw: object, topo: Topology) -> tuple[list[Node], list[str]]:
    nodes: list[Node] = []
    origin: list[str] = []
    allowed = [*sf.NODE, "count", "start", "path", "path_every"]
    for e, entry in enumerate(sf.as_list(raw, "nodes")):
        where = f"nodes[{e}]"
        data = sf.as_mapping(entry, where, allowed)
        sf.require(data, "name", where, 'e.g. name: "n{i:03d}" with count: 8')
        sf.require(data, "gpus", where, "the number of GPUs of the node (0 for a CPU node)")
        base = sf.convert_fields(data, sf.NODE, where)
        every = _path_every(data.get("path_every"), topo, where)
        if "path" in data:
            path = sf.convert(("strs", None), data["path"], f"{where}.path")
        else:
            path = tuple(f"{lv}{{{lv}}}" if lv in every else "" for lv in topo.levels)
            if len(every) != len(topo.levels) and topo.levels:
                raise ScenarioError(
                    f"{where}.path",
                    f"is required: one name per topology level {list(topo.levels)} "
                    "(or give path_every for every level)",
                )
        for i in sf.copies(data, where):
            names = {"i": i, **{lv: i // n for lv, n in every.items()}}
            node_path = tuple(sf.fill_template(p, f"{where}.path", names) for p in path)
            name = sf.fill_template(base["name"], f"{where}.name", names)
            nodes.append(Node(**{**base, "name": name, "path": node_path}))
            origin.append(where)
    return nodes, origin


def _path_every(raw: object, topo: Topology, where: str) -> dict[str, int]:
    if raw is None:
        return {}
    data = sf.as_mapping(raw, f"{where}.path_every", list(topo.levels))
    every = {k: sf.scalar("int", v, f"{where}.path_every.{k}", 1) for k, v in data.items()}
    chain = [(lv, every[lv]) for lv in topo.levels if lv in every]
    for (outer, a), (inner, b) in itertools.pairwise(chain):
        if a % b:
            raise ScenarioError(
                f"{where}.path_every.{outer}",
                f"{a} nodes per {outer} must be a multiple of {b} nodes per {inner}",
            )
    return every


def _queues(raw: object) -> list[Queue]:
    out = []
    for k, entry in enumerate(sf.as_list(raw, "queues")):
        where = f"queues[{k}]"
        data = sf.as_mapping(entry, where, list(sf.QUEUE))
        sf.require(data, "name", where, "every queue needs a name")
        out.append(Queue(**sf.convert_fields(data, sf.QUEUE, where)))
    return out


def _job(data: dict[str, Any], where: str, names: Mapping[str, int]) -> Job:
    values = sf.convert_fields(data, sf.JOB, where)
    for key in ("id", "name"):
        if key in values:
            values[key] = sf.fill_template(values[key], f"{where}.{key}", names)
    return Job(**values)


def _running(raw: object, nodes: list[Node], now: float) -> tuple[list[RunningJob], list[str]]:
    by_name = {n.name: n for n in nodes}
    out: list[RunningJob] = []
    origin: list[str] = []
    allowed = [*sf.JOB, "placement", "started_at", "count", "start"]
    for e, entry in enumerate(sf.as_list(raw, "running")):
        where = f"running[{e}]"
        data = sf.as_mapping(entry, where, allowed)
        sf.require(data, "id", where, 'e.g. id: "train-{i}"')
        sf.require(data, "placement", where, "a list of {node: NAME, devices: [0, 1]}")
        started = sf.scalar("float", data.get("started_at", now), f"{where}.started_at", None)
        if started > now:
            raise ScenarioError(f"{where}.started_at", f"must be <= now ({now:g})")
        for i in sf.copies(data, where):
            names = {"i": i}
            parts = _placement(data["placement"], f"{where}.placement", i, by_name)
            job = _job(data, where, names)
            if "gpus" not in data:  # default: as many GPUs as the placement holds
                job = replace(job, gpus=sum(len(p.devices) for p in parts))
            out.append(RunningJob(job, tuple(parts), started))
            origin.append(where)
    return out, origin


def _placement(raw: object, where: str, i: int, by_name: dict[str, Node]) -> list[NodeDevices]:
    """`[{node, devices}]`; an entry with `count` repeats with `{j}` (and the job's `{i}`)."""
    parts = []
    for k, item in enumerate(sf.as_list(raw, where)):
        pw = f"{where}[{k}]"
        part = sf.as_mapping(item, pw, ["node", "devices", "count", "start"])
        sf.require(part, "node", pw, "the name of a node")
        sf.require(part, "devices", pw, "device indices, e.g. [0, 1] or '0-7' or 'all'")
        template = sf.scalar("str", part["node"], f"{pw}.node", None)
        for j in sf.copies(part, pw):
            node = sf.fill_template(template, f"{pw}.node", {"i": i, "j": j})
            devs = part["devices"]
            if devs == "all":
                if node not in by_name:
                    raise ScenarioError(f"{pw}.node", f"unknown node {node!r}")
                devices = tuple(range(by_name[node].gpus))
            else:
                devices = sf.convert(("ints", 0), devs, f"{pw}.devices")
            parts.append(NodeDevices(node, devices))
    return parts


def _pending(raw: object) -> tuple[list[Job], list[str]]:
    out: list[Job] = []
    origin: list[str] = []
    for e, entry in enumerate(sf.as_list(raw, "pending")):
        where = f"pending[{e}]"
        data = sf.as_mapping(entry, where, [*sf.JOB, "count", "start"])
        sf.require(data, "id", where, 'e.g. id: "job-{i}"')
        for i in sf.copies(data, where):
            out.append(_job(data, where, {"i": i}))
            origin.append(where)
    return out, origin


STEP_KEYS = ["finish", "submit", "advance", "repeat"]


def parse_step(raw: object, where: str, extra: tuple[str, ...] = ()) -> Step:
    """One `steps[k]` entry (`extra`: keys a caller handles itself, ignored here)."""
    data = sf.as_mapping(raw, where, [*STEP_KEYS, *extra])
    finish = tuple(
        sf.scalar("str", v, f"{where}.finish[{i}]", None)
        for i, v in enumerate(sf.as_list(data.get("finish", []), f"{where}.finish"))
    )
    submit: list[Job] = []
    for e, entry in enumerate(sf.as_list(data.get("submit", []), f"{where}.submit")):
        at = f"{where}.submit[{e}]"
        job = sf.as_mapping(entry, at, [*sf.JOB, "count", "start"])
        sf.require(job, "id", at, 'e.g. id: "late-{i}"')
        submit.extend(_job(job, at, {"i": i}) for i in sf.copies(job, at))
    advance = sf.scalar("float", data.get("advance", 0.0), f"{where}.advance", 0)
    repeat = sf.scalar("int", data.get("repeat", 1), f"{where}.repeat", 1)
    if repeat > 1000:
        raise ScenarioError(f"{where}.repeat", f"at most 1000 cycles per step, got {repeat}")
    return Step(finish, tuple(submit), float(advance), int(repeat))


def _steps(raw: object) -> tuple[Step, ...]:
    if raw is None:
        return ()
    return tuple(parse_step(e, f"steps[{k}]") for k, e in enumerate(sf.as_list(raw, "steps")))


def _profile(raw: object) -> Profile | None:
    if raw is None:
        return None
    try:
        if isinstance(raw, str):
            return get_profile(raw)
        data = sf.as_mapping(raw, "profile", [*sf.PROFILE, "scorers"])
        values = sf.convert_fields(data, sf.PROFILE, "profile")
        base = get_profile(values.pop("base", "default"))
        if "scorers" in data:
            raw_sc = data["scorers"]
            known = list(raw_sc) if isinstance(raw_sc, Mapping) else []
            sc = sf.as_mapping(raw_sc, "profile.scorers", known)
            values["scorers"] = tuple(
                (k, sf.scalar("float", v, f"profile.scorers.{k}", 0)) for k, v in sc.items()
            )
        return base.with_overrides(**values)
    except UnknownNameError as exc:
        raise ScenarioError("profile", exc.message) from None
    except ValueError as exc:
        if isinstance(exc, ScenarioError):
            raise
        raise ScenarioError("profile", str(exc)) from None


# -- entry points --------------------------------------------------------------------------

_TOP = [
    "description", "now", "profile", "topology", "nodes", "queues", "running", "pending",
    "steps",
]  # fmt: skip


def parse_scenario(data: object) -> Scenario:
    """Build and validate a scenario from already-parsed data (a dict)."""
    top = sf.as_mapping(data, "", _TOP)
    if "nodes" not in top:
        raise ScenarioError("nodes", "is required: a list of nodes (name, gpus, ...)")
    now = sf.scalar("float", top.get("now", 0.0), "now", None)
    description = sf.scalar("str", top.get("description", ""), "description", None)
    topo = _topology(top.get("topology"))
    nodes, node_origin = _nodes(top["nodes"], topo)
    queues = _queues(top.get("queues", []))
    running, run_origin = _running(top.get("running", []), nodes, now)
    pending, pend_origin = _pending(top.get("pending", []))
    snapshot = Snapshot(
        now=now,
        nodes=tuple(nodes),
        topology=topo,
        queues=tuple(queues),
        running=tuple(running),
        pending=tuple(pending),
    )
    try:
        validate(snapshot)
    except SnapshotError as exc:
        origins = {"nodes": node_origin, "running": run_origin, "pending": pend_origin}
        raise _translate(exc, origins, snapshot) from None
    return Scenario(snapshot, _profile(top.get("profile")), description, _steps(top.get("steps")))


def _translate(
    exc: SnapshotError, origins: dict[str, list[str]], snapshot: Snapshot
) -> ScenarioError:
    """Rewrite a core path (`running[7].job.gpus`) into the file's (`running[2].gpus`)."""
    m = re.fullmatch(r"(nodes|running|pending)\[(\d+)\](?:\.job)?(.*)", exc.field)
    if m is None:
        return ScenarioError(exc.field, exc.message)
    section, k, rest = m.group(1), int(m.group(2)), m.group(3)
    where = origins[section][k]
    label = ""
    if origins[section].count(where) > 1:
        item = getattr(snapshot, section)[k]
        name = item.name if section == "nodes" else getattr(item, "job", item).id
        label = f" (in the copy named {name!r})"
    return ScenarioError(f"{where}{rest}", exc.message + label)


def load_scenario(source: str | PathLike[str] | Mapping[str, Any]) -> Scenario:
    """Load a scenario from a YAML or JSON file (by suffix; YAML otherwise) or a mapping."""
    if isinstance(source, Mapping):
        return parse_scenario(source)
    path = Path(source)
    try:
        text = read_text(path)
    except TextFileError as exc:
        raise ScenarioError("", f"cannot read the file: it {exc}", str(path)) from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yamlio.load_yaml(text)
    except json.JSONDecodeError as exc:
        detail = " ".join(str(exc).split())
        raise ScenarioError("", f"not valid JSON: {detail}", str(path)) from None
    except yamlio.YamlError as exc:  # the one YAML loader: a key given twice is refused too
        raise ScenarioError("", f"not valid YAML: {exc}", str(path)) from None
    try:
        return parse_scenario(data)
    except ScenarioError as exc:
        raise ScenarioError(exc.field, exc.message, str(path)) from None


def schedule(scenario: Scenario, profile: str | Profile | None = None) -> Decision:
    """Run one cycle on the scenario with `profile`, else its own, else `default`."""
    chosen = profile if profile is not None else scenario.profile or "default"
    try:
        return run_cycle(scenario.snapshot, chosen)
    except UnknownNameError as exc:
        raise ScenarioError("profile", exc.message) from None
