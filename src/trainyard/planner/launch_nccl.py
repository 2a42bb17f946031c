"""The NCCL side of a plan's launcher settings: which collectives the plan issues, the algorithm
and protocol chosen for each (`CollectiveChoice`) and the NCCL_ALGO / NCCL_PROTO values that
follow from them.

This module owns the per-collective algorithm choice behind `launch.launch_settings`'s NCCL
variables (`plan_collectives`, `nccl_variables`). It is pure: it builds strings and dicts and
starts nothing.

Collectives are the ones `compute.step_time` prices, on the same topologies:

* tensor-parallel all-reduce (tp > 1): b·s·h·2 bytes over the t ranks of a group, gcd(t, nodes_of)
  per node; 4 per layer and micro-batch (6 with full recompute), l/p layers, m micro-batches.
  With sequence parallelism Megatron issues it as reduce-scatter + all-gather of the same volume.
* data-parallel gradient reduction (dp > 1): params/(t·p) gradients of 2 bytes (4 with
  `fp32_grads`), 1.5x for ZeRO-3, once per iteration over d ranks, gcd(d, nodes_of // (t·p)) per
  node. With ZeRO >= 1 (Megatron's distributed optimizer) it runs as reduce-scatter + all-gather.

Each is timed with `collectives.best` (the winner) and `collectives.predict` (the runner-up: the
fastest other algorithm, any protocol). `reason` says by how much the winner beats it: the
runner-up's time over the winner's, minus one.

NCCL variables. NCCL_ALGO accepts Ring, Tree, CollnetDirect, CollnetChain, NVLS, NVLSTree and PAT;
NCCL >= 2.24 also takes a per-function form for it and NCCL_PROTO, ``"allreduce:tree;allgather:
ring"`` (the version from release write-ups; NVIDIA/nccl#1892 shows ``allreduce:tree``). Tree
exists for all-reduce only, and a global ``NCCL_ALGO=Tree`` leaves broadcast and all-gather with
no algorithm at all (NVIDIA/nccl#317), so values are always per function, only for the functions
the plan's collectives run as (above), and other functions stay on NCCL's tuner. For each such
function the value follows the collective using it with the larger predicted time per iteration
(one value cannot tell two collectives of one function apart); `LaunchSettings.notes` says when
the other would have preferred something else. Reduce-scatter and all-gather get a value only
when the choice is ring (the model prices tree, hierarchical and NVLS for all-reduce only).
Mapping: ring -> Ring, tree -> Tree, nvls -> NVLS, hierarchical -> Tree (NCCL's tree reduces in
the node, all-reduces across nodes and broadcasts back, i.e. the hierarchical scheme;
NVIDIA/nccl#530); simple -> Simple, ll -> LL. Plans without collectives get no NCCL variables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from trainyard.planner import collectives as coll
from trainyard.planner.comm import per_node, topology
from trainyard.planner.errors import PlannerError
from trainyard.planner.hardware import GPU
from trainyard.planner.model import Model
from trainyard.planner.search import Plan

__all__ = [
    "NCCL_ALGO_NAMES",
    "NCCL_PROTO_NAMES",
    "CollectiveChoice",
    "nccl_variables",
    "plan_collectives",
]

NCCL_ALGO_NAMES: Final = {"ring": "Ring", "tree": "Tree", "hierarchical": "Tree", "nvls": "NVLS"}
NCCL_PROTO_NAMES: Final = {"simple": "Simple", "ll": "LL"}
# NCCL functions a modelled all-reduce runs as: itself, or reduce-scatter + all-gather.
_ALL_REDUCE: Final = ("allreduce",)
_SHARDED: Final = ("reducescatter", "allgather")


@dataclass(frozen=True)
class CollectiveChoice:
    """One collective the plan issues, the algorithm and protocol chosen for it, and why.

    `nbytes` is the message size of one call, `calls_per_iteration` how often it runs per
    iteration; `time_us` and `busbw_gbps` are one call's predicted time and nccl-tests bus
    bandwidth. `runner_up` is the fastest other algorithm ("tree/simple"), None when no other
    applies. `nccl_functions` are the NCCL functions the job really calls for it: ("allreduce",),
    or ("reducescatter", "allgather") under sequence parallelism or a sharded optimizer.
    """

    name: str
    collective: str
    nccl_functions: tuple[str, ...]
    nbytes: int
    ranks: int
    ranks_per_node: int
    nodes: int
    algorithm: str
    protocol: str
    time_us: float
    busbw_gbps: float
    runner_up: str | None
    runner_up_us: float | None
    calls_per_iteration: int
    reason: str

    @property
    def iteration_us(self) -> float:
        """Predicted time of all its calls in one iteration (before any overlap)."""
        return self.time_us * self.calls_per_iteration


def _runner_up(nbytes: int, topo: coll.Topology, winner: str) -> coll.Prediction | None:
    """The fastest prediction of an algorithm other than `winner` (any protocol)."""
    found: list[coll.Prediction] = []
    for algo in coll.ALGORITHMS:
        if algo == winner:
            continue
        for proto in coll.PROTOCOLS:
            try:
                found.append(coll.predict("all_reduce", nbytes, topo, algo, proto))
            except PlannerError:
                continue  # not applicable on this topology
    return min(found, key=lambda p: p.time_us, default=None)


def _size(nbytes: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if nbytes >= scale:
            value = nbytes / scale
            return f"{value:.0f} {unit}" if value >= 100 else f"{value:.3g} {unit}"
    return f"{nbytes} B"


def _choose(
    name: str, functions: tuple[str, ...], nbytes: int, topo: coll.Topology, calls: int
) -> CollectiveChoice:
    top = coll.best("all_reduce", nbytes, topo).prediction
    other = _runner_up(nbytes, topo, top.algorithm)
    bound = "latency-bound" if top.latency_us >= top.bandwidth_us else "bandwidth-bound"
    nodes, per_node = topo.nodes, topo.ranks_per_node
    if nodes == 1:
        where = f"{per_node} GPUs in one node"
    else:
        where = f"{nodes} nodes x {per_node} GPU{'s' if per_node > 1 else ''}"
    label = f"{top.algorithm}/{top.protocol}"
    if other is None:
        reason = f"{label} is the only modelled algorithm for {_size(nbytes)} over {where}"
        runner, runner_us = None, None
    else:
        runner, runner_us = f"{other.algorithm}/{other.protocol}", other.time_us
        gain = (other.time_us / top.time_us - 1) * 100 if top.time_us > 0 else 0.0
        reason = (
            f"{label} beats {runner} by {gain:.0f}% ({top.time_us:.0f} vs {other.time_us:.0f} us) "
            f"for {_size(nbytes)} over {where}: {bound}"
        )
    return CollectiveChoice(
        name=name,
        collective="all_reduce",
        nccl_functions=functions,
        nbytes=nbytes,
        ranks=topo.ranks,
        ranks_per_node=per_node,
        nodes=nodes,
        algorithm=top.algorithm,
        protocol=top.protocol,
        time_us=top.time_us,
        busbw_gbps=top.busbw_gbps,
        runner_up=runner,
        runner_up_us=runner_us,
        calls_per_iteration=calls,
        reason=reason,
    )


def plan_collectives(
    model: Model, plan: Plan, gpu: GPU, nodes_of: int, links: coll.LinkSet | None
) -> list[CollectiveChoice]:
    """The collectives `plan` issues (tensor-parallel, then data-parallel or sharded: the dense
    weights' over the data-parallel ranks, a mixture of experts' routed experts' over their
    expert-data-parallel group, as `stages` prices them), each with the algorithm and protocol
    chosen for it on the topology `compute.step_time` prices."""
    lay = plan.layout
    t, p, d = lay.tp, lay.pp, lay.dp
    m = lay.microbatches(model)
    out: list[CollectiveChoice] = []
    if t > 1:
        per_layer = 6 if lay.recompute == "full" else 4
        calls = max(lay.stage_layers(model)) * m * per_layer
        msg = lay.micro_batch * model.seq_len // lay.cp * model.hidden * 2
        functions = _SHARDED if lay.sequence_parallel else _ALL_REDUCE
        topo = topology(t, per_node(t, nodes_of), gpu, links)
        out.append(_choose("tensor-parallel all-reduce", functions, msg, topo, calls))
    grad_bytes = 4 if lay.fp32_grads else 2
    experts = model.layers * model.expert_params  # reduced over their own group (below)
    edp = lay.expert_data_parallel
    if d * lay.cp > 1:
        volume = (model.params - experts) / (t * p) * grad_bytes
        ranks = lay.shard_size if lay.zero >= 2 else d * lay.cp
        topo = topology(ranks, per_node(ranks, max(1, nodes_of // (t * p))), gpu, links)
        functions = _SHARDED if lay.zero >= 1 else _ALL_REDUCE
        if lay.zero >= 2:
            # ZeRO-2: a reduce-scatter per micro-batch and one gather; ZeRO-3/FSDP: two
            # gathers and a reduce-scatter per micro-batch (`compute` module docstring).
            name = "sharded gradient reduce-scatter and weight all-gather"
            calls = 3 * m if lay.zero == 3 else m + 1
        else:
            name = "data-parallel gradient all-reduce"
            calls = 1
        out.append(_choose(name, functions, int(volume), topo, calls))
    if experts and edp > 1:  # the routed experts' gradients: over the ranks holding the same
        on_node = max(1, max(1, nodes_of // (t * p)) * t // lay.ep)
        topo = topology(edp, per_node(edp, on_node), gpu, links)
        volume = experts / (lay.ep * p) * grad_bytes
        functions = _SHARDED if lay.zero >= 1 else _ALL_REDUCE
        name = f"expert gradient reduction (expert-data-parallel group of {edp})"
        out.append(_choose(name, functions, int(volume), topo, 3 * m if lay.zero == 3 else 1))
    return out


def nccl_variables(choices: list[CollectiveChoice]) -> tuple[dict[str, str], list[str]]:
    """Per-function NCCL_ALGO / NCCL_PROTO from each function's dominant collective, and notes."""
    algos: list[str] = []
    protos: list[str] = []
    notes: list[str] = []
    for function in ("allreduce", "reducescatter", "allgather"):
        users = [c for c in choices if function in c.nccl_functions]
        if not users:
            continue
        top = max(users, key=lambda c: c.iteration_us)
        label = f"{top.algorithm}/{top.protocol}"
        if function != "allreduce" and top.algorithm != "ring":
            notes.append(f"{function} left to NCCL's tuner: {top.algorithm} is all-reduce only")
            continue
        algos.append(f"{function}:{NCCL_ALGO_NAMES[top.algorithm]}")
        protos.append(f"{function}:{NCCL_PROTO_NAMES[top.protocol]}")
        notes += [
            f"{function}: the {c.name} prefers {c.algorithm}/{c.protocol} but shares NCCL_ALGO "
            f"with the {top.name} ({top.iteration_us / 1e3:.3g} vs {c.iteration_us / 1e3:.3g} ms "
            f"per iteration), so it runs with {label}"
            for c in users
            if c is not top and (c.algorithm, c.protocol) != (top.algorithm, top.protocol)
        ]
    if not algos:
        return {}, notes
    notes.append("NCCL_ALGO/NCCL_PROTO use the per-function form: NCCL >= 2.24")
    return {"NCCL_ALGO": ";".join(algos), "NCCL_PROTO": ";".join(protos)}, notes
