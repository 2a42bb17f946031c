"""The simulation engine, continued: placement-dependent rates, determinism, invariants
checked on every profile over generated workloads (records, timeline, and every placement the
core hands back), the estimates option, bad input and the `max_time_s` cut-off (hand-computed
cases: see the comments)."""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import replace

import pytest

import trainyard.sim.engine as engine_module
from trainyard.core import PROFILES, Decision, Queue, Snapshot, run_cycle
from trainyard.sim.cluster import parse_cluster
from trainyard.sim.engine import SimOptions, default_queues, simulate
from trainyard.sim.metrics import summarize
from trainyard.sim.readers import read_workload
from trainyard.sim.records import JobRecord, Sample, SimResult
from trainyard.sim.speed import FixedDuration
from trainyard.sim.workload import SimJob, Workload, WorkloadError


def run(jobs: list[SimJob], cluster: str = "2x4", **options: object) -> SimResult:
    """`jobs` on `cluster` (2x4: 8 GPUs) under fifo with FixedDuration (or `speed=`)."""
    speed = options.pop("speed", None) or FixedDuration()
    return simulate(
        Workload("test", "hand", tuple(jobs)),
        parse_cluster(cluster),
        speed,  # type: ignore[arg-type]
        "fifo",
        SimOptions(**options),  # type: ignore[arg-type]
    )


def rec(result: SimResult, job_id: str) -> JobRecord:
    (found,) = [r for r in result.records if r.id == job_id]
    return found


def at(result: SimResult, t: float) -> Sample:
    """The sample in effect at time `t`."""
    return [s for s in result.samples if s.t <= t][-1]


class Placed:
    """Rate 1 on one node, 0.5 across nodes; twice as fast on v100. Logs every call."""

    name = "placed"
    first_start_s = 0.0
    restart_s = 0.0

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[int, ...], str]] = []

    def work(self, job: SimJob) -> float:
        assert job.duration is not None
        return job.duration

    def rate(self, job: SimJob, per_node: tuple[int, ...], gpu_type: str) -> float:
        self.calls.append((job.id, per_node, gpu_type))
        base = 1.0 if len(per_node) == 1 else 0.5
        return base * (2.0 if gpu_type == "v100" else 1.0)

    def isolated_rate(self, job: SimJob) -> float:
        return 1.0


# -- 5. placement-dependent rates ---------------------------------------------------------------


def test_rate_sees_per_node_sorted_descending_and_the_gpu_type() -> None:
    # a (2 GPUs) takes half a node; b (6 GPUs) gets the 2 left there and the other node's 4:
    # per_node (4, 2), across nodes rate 0.5 * 2 (v100) = 1: 100 units in 100 s.
    speed = Placed()
    r = run(
        [SimJob("a", 0, 2, duration=1000), SimJob("b", 0, 6, duration=100)],
        cluster="2x4:v100",
        speed=speed,
        interval_s=0,
    )
    assert ("a", (2,), "v100") in speed.calls
    assert ("b", (4, 2), "v100") in speed.calls
    assert all(c[1] == tuple(sorted(c[1], reverse=True)) for c in speed.calls)
    assert rec(r, "b").end == 100  # 100 / (0.5 * 2)
    assert rec(r, "a").end == 500  # 1000 / (1 * 2)


def test_spanning_nodes_is_slower() -> None:
    # 2x4 of the default type: b spans (4, 2) at rate 0.5: 100 units take 200 s
    speed = Placed()
    r = run(
        [SimJob("a", 0, 2, duration=1000), SimJob("b", 0, 6, duration=100)],
        speed=speed,
        interval_s=0,
    )
    assert ("b", (4, 2), "gpu") in speed.calls
    assert (rec(r, "b").end, rec(r, "b").run_time) == (200, 200)


def test_gpu_type_of_a_heterogeneous_cluster() -> None:
    # two 4-GPU jobs, one per node: the v100 one runs at 2 (50 s), the k80 one at 1 (100 s)
    speed = Placed()
    r = run(
        [SimJob("a", 0, 4, duration=100), SimJob("b", 0, 4, duration=100)],
        cluster="1x4:k80+1x4:v100",
        speed=speed,
        interval_s=0,
    )
    assert sorted(c[2] for c in speed.calls) == ["k80", "v100"]
    assert all(c[1] == (4,) for c in speed.calls)
    assert sorted(x.end for x in r.records if x.end is not None) == [50, 100]


# -- 7. determinism -----------------------------------------------------------------------------


def _synthetic_run(seed: int) -> SimResult:
    workload = read_workload("synthetic:300", seed=seed)
    return simulate(workload, parse_cluster("8x8"), FixedDuration(), "default", seed=seed)


def test_same_inputs_same_result() -> None:
    first, second = _synthetic_run(3), _synthetic_run(3)
    a = json.dumps(summarize(first), sort_keys=True)
    b = json.dumps(summarize(second), sort_keys=True)
    assert a == b
    assert first.records == second.records
    assert first.samples == second.samples
    assert first.rounds == second.rounds and first.end_time == second.end_time
    assert summarize(first)["finished"] == 300


def test_another_seed_gives_another_result() -> None:
    a, b = _synthetic_run(3), _synthetic_run(4)
    assert a.records != b.records
    assert json.dumps(summarize(a), sort_keys=True) != json.dumps(summarize(b), sort_keys=True)


# -- 8. invariants over random workloads --------------------------------------------------------


def _small_workload(seed: int, cap: int = 16) -> Workload:
    """25 synthetic jobs, sizes capped to the 16-GPU cluster, run times capped to a day (the
    trace has jobs of months; they add nothing here but rounds)."""
    w = read_workload("synthetic:25", seed=seed, options={"queues": "2"})
    jobs = tuple(
        replace(j, gpus=min(j.gpus, cap), duration=min(j.duration or 1.0, 86_400.0)) for j in w.jobs
    )
    return Workload(w.kind, w.source, jobs, w.queues)


class _Recorder:
    """Wraps `run_cycle`: checks that no device is held twice and no node over-committed, before
    and after each decision, and that every gang gets exactly its GPUs."""

    def __init__(self, real: object) -> None:
        self.real = real
        self.cycles = 0
        self.placed: Counter[str] = Counter()
        self.expected: dict[str, float | None] = {}

    @staticmethod
    def _check(holding: dict[str, tuple[tuple[str, int], ...]], capacity: dict[str, int]) -> None:
        devices = [d for held in holding.values() for d in held]
        assert len(devices) == len(set(devices)), "a device is held by two jobs"
        per_node = Counter(node for node, _ in devices)
        for node, used in per_node.items():
            assert used <= capacity[node], f"node {node} over-committed"

    def __call__(self, snapshot: Snapshot, profile: object, layout: object) -> Decision:
        self.cycles += 1
        capacity = {n.name: n.gpus for n in snapshot.nodes}
        holding = {
            r.job.id: tuple((nd.node, d) for nd in r.placement for d in nd.devices)
            for r in snapshot.running
        }
        for r in snapshot.running:
            assert len(holding[r.job.id]) == r.job.gpus
        self._check(holding, capacity)
        for job in snapshot.pending:
            self.expected[job.id] = job.expected_duration
        decision: Decision = self.real(snapshot, profile, layout)  # type: ignore[operator]
        for e in decision.evictions:
            del holding[e.job_id]
        gpus = {j.id: j.gpus for j in snapshot.pending}
        for p in decision.placements:
            got = tuple((nd.node, d) for nd in p.nodes for d in nd.devices)
            assert len(got) == gpus[p.job_id], "a gang got the wrong number of GPUs"
            holding[p.job_id] = got
            self.placed[p.job_id] += 1
        self._check(holding, capacity)
        return decision


@pytest.mark.parametrize("profile", sorted(PROFILES.names()))
def test_invariants_on_random_workloads(profile: str, monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = _Recorder(run_cycle)
    monkeypatch.setattr(engine_module, "run_cycle", recorder)
    cluster = parse_cluster("4x4")
    for seed in range(20):
        restart = 0.0 if seed % 2 == 0 else 60.0
        interval = 0.0 if seed % 4 == 3 else 60.0
        workload = _small_workload(seed)
        durations = {j.id: j.duration for j in workload.jobs}
        recorder.placed.clear()
        r = simulate(
            workload,
            cluster,
            FixedDuration(restart_s=restart),
            profile,
            SimOptions(interval_s=interval),
        )
        assert len(r.records) == 25
        for x in r.records:
            assert x.end is not None and x.first_start is not None, (profile, seed, x)
            assert x.submit <= x.first_start <= x.end
            assert x.jct is not None and x.jct >= x.isolated_time - 1e-6
            assert x.isolated_time == durations[x.id]
            assert x.restarts <= x.preemptions
            # starts seen by the core = 1 + restarts; a preempted job is restarted (it finished)
            assert recorder.placed[x.id] == 1 + x.restarts
            assert x.restarts == x.preemptions
            d = durations[x.id]
            assert d is not None
            if restart == 0:  # GPUs held exactly as long as the work needs
                assert x.run_time == pytest.approx(d)
            else:
                assert x.run_time >= d + (restart if x.restarts else 0.0) - 1e-6
            if x.preemptions == 0:
                assert x.end - x.first_start == pytest.approx(d)
            assert x.end - x.first_start >= x.run_time - 1e-6
        times = [s.t for s in r.samples]
        assert times == sorted(times) and len(set(times)) == len(times)
        assert all(0 <= s.allocated <= cluster.gpus for s in r.samples)
        assert all(0 <= s.fragmented_free <= cluster.gpus - s.allocated for s in r.samples)
        if all(x.preemptions == 0 for x in r.records):
            _timeline_matches_records(r)
        ends = [x.end for x in r.records if x.end is not None]
        assert r.end_time >= max(ends)
        assert r.samples[-1].allocated == 0 and r.samples[-1].pending_jobs == 0
    assert recorder.cycles > 0


def _timeline_matches_records(r: SimResult) -> None:
    """Without preemption a job holds its GPUs over [first_start, end) and waits over
    [submit, first_start): each sample must say exactly that."""
    for s in r.samples:
        running = [x for x in r.records if x.first_start is not None and x.first_start <= s.t]
        running = [x for x in running if x.end is None or s.t < x.end]
        waiting = [x for x in r.records if x.submit <= s.t]
        waiting = [x for x in waiting if x.first_start is None or s.t < x.first_start]
        assert s.allocated == sum(x.gpus for x in running), s
        assert s.pending_jobs == len(waiting), s
        assert s.pending_gpus == sum(x.gpus for x in waiting), s


def test_preemptions_happen_somewhere() -> None:
    """The invariants above must not pass only because nothing is ever preempted."""
    total = 0
    for seed in range(20):
        r = simulate(_small_workload(seed), parse_cluster("4x4"), FixedDuration(), "tiresias")
        total += sum(x.preemptions for x in r.records)
    assert total > 0


# -- estimates ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("estimates", "expected"), [("none", None), ("exact", 100.0)])
def test_estimates_reach_the_core(
    estimates: str, expected: float | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = _Recorder(run_cycle)
    monkeypatch.setattr(engine_module, "run_cycle", recorder)
    jobs = (SimJob("a", 0, 8, duration=50), SimJob("b", 10, 8, duration=100))
    simulate(
        Workload("test", "hand", jobs),
        parse_cluster("2x4"),
        FixedDuration(),
        "drf",
        SimOptions(interval_s=0, estimates=estimates),
    )
    # b is seen pending at 10 (and placed at 50); its estimate is its isolated run time
    assert recorder.expected["b"] == expected
    assert recorder.expected["a"] == (50.0 if estimates == "exact" else None)


# -- 9. bad input -------------------------------------------------------------------------------


def test_job_larger_than_the_cluster() -> None:
    with pytest.raises(WorkloadError) as err:
        run([SimJob("ok", 0, 8, duration=1), SimJob("big", 0, 9, duration=1)])
    assert err.value.where == "big" and "9" in err.value.message and "8" in err.value.message


def test_unknown_queue() -> None:
    workload = Workload("test", "hand", (SimJob("j1", 0, 1, queue="nope", duration=1),))
    with pytest.raises(WorkloadError) as err:
        simulate(
            workload,
            parse_cluster("2x4"),
            FixedDuration(),
            "fifo",
            queues=[Queue(name="other", guaranteed=8)],
        )
    assert err.value.where == "j1" and "'nope'" in err.value.message


@pytest.mark.parametrize(
    ("kwargs", "where"),
    [
        ({"interval_s": -1.0}, "--interval"),
        ({"interval_s": math.nan}, "--interval"),
        ({"interval_s": math.inf}, "--interval"),
        ({"estimates": "guess"}, "--estimates"),
        ({"min_runtime_s": -5.0}, "--min-runtime"),
        ({"min_runtime_s": math.nan}, "--min-runtime"),
        ({"max_time_s": -1.0}, "--max-time"),
        ({"max_time_s": math.nan}, "--max-time"),
    ],
)
def test_bad_options(kwargs: dict[str, object], where: str) -> None:
    with pytest.raises(WorkloadError) as err:
        SimOptions(**kwargs)  # type: ignore[arg-type]
    assert err.value.where == where


def test_duplicate_job_ids() -> None:
    # without the check, the second "a" shadowed the first: the first never finished and the
    # second was reported as a restart of it
    with pytest.raises(WorkloadError) as err:
        run([SimJob("a", 0, 1, duration=100), SimJob("a", 200, 1, duration=50)], interval_s=0)
    assert err.value.where == "a" and "duplicate" in err.value.message


def test_missing_duration_and_zero_rate() -> None:
    with pytest.raises(WorkloadError) as err:
        run([SimJob("nodur", 0, 1)])
    assert err.value.where == "nodur"

    class Stalled(FixedDuration):
        def rate(self, job: SimJob, per_node: tuple[int, ...], gpu_type: str) -> float:
            return 0.0

    with pytest.raises(WorkloadError) as err:
        run([SimJob("z", 0, 1, duration=5)], speed=Stalled())
    assert err.value.where == "z" and "rate 0.0" in err.value.message


def test_default_queues_share_by_demand() -> None:
    # q0 demand 2 GPUs x 100 s = 200, q1 6 x 100 = 600: 8 GPUs split 2 / 6
    w = Workload(
        "test",
        "hand",
        (SimJob("a", 0, 2, "q0", duration=100), SimJob("b", 0, 6, "q1", duration=100)),
    )
    qs = default_queues(w, parse_cluster("2x4"), FixedDuration(), share=1.0)
    assert [(q.name, q.guaranteed) for q in qs] == [("q0", 2), ("q1", 6)]
    # The default guarantees half the cluster in the same proportions: 1 / 3, 4 GPUs pooled.
    qs = default_queues(w, parse_cluster("2x4"), FixedDuration())
    assert [(q.name, q.guaranteed) for q in qs] == [("q0", 1), ("q1", 3)]
    with pytest.raises(WorkloadError) as err:
        default_queues(w, parse_cluster("2x4"), FixedDuration(), share=1.5)
    assert err.value.where == "--quota-share"
    one = Workload("test", "hand", (SimJob("a", 0, 2, duration=1),))
    assert [
        (q.name, q.guaranteed) for q in default_queues(one, parse_cluster("2x4"), FixedDuration())
    ] == [("default", 8)]


# -- 10. max_time_s -----------------------------------------------------------------------------


@pytest.mark.parametrize("interval", [0.0, 60.0])
def test_max_time_cuts_the_run(interval: float) -> None:
    # cut at 170: a (0..150) finished; b (0..1000) still running, held its GPU 170 s;
    # c (at 500) never arrived
    r = run(
        [
            SimJob("a", 0, 1, duration=150),
            SimJob("b", 0, 1, duration=1000),
            SimJob("c", 500, 1, duration=10),
        ],
        interval_s=interval,
        max_time_s=170,
    )
    a, b, c = rec(r, "a"), rec(r, "b"), rec(r, "c")
    assert (a.first_start, a.end, a.run_time) == (0, 150, 150)
    assert (b.first_start, b.end, b.jct) == (0, None, None)
    assert b.run_time == 170
    assert (c.first_start, c.end) == (None, None)
    assert r.end_time == 170
    assert at(r, 160).allocated == 1  # a's completion at 150 is on the timeline
    s = summarize(r)
    assert (s["finished"], s["unfinished"], s["started"]) == (1, 2, 2)
    assert s["window_end"] == 170


@pytest.mark.parametrize("profile", ["fifo", "default"])
def test_a_job_nothing_can_place_ends_the_run(profile: str) -> None:
    # the queue may never hold more than 4 GPUs: "big" (6) waits forever; the run stops once
    # nothing can change instead of looping, and reports it unfinished
    workload = Workload(
        "test", "hand", (SimJob("ok", 0, 2, duration=10), SimJob("big", 5, 6, duration=10))
    )
    r = simulate(
        workload,
        parse_cluster("2x4"),
        FixedDuration(),
        profile,
        SimOptions(interval_s=0),
        queues=[Queue(name="default", guaranteed=4, limit=4)],
    )
    assert (rec(r, "ok").first_start, rec(r, "ok").end) == (0, 10)
    big = rec(r, "big")
    assert (big.first_start, big.end, big.run_time) == (None, None, 0)
    assert r.samples[-1] == Sample(10, 0, 1, 6, 0)
    assert summarize(r)["unfinished"] == 1


class _TypeSpeed:
    """Runs 3x faster on v100 than on k80, and not at all on p100."""

    name = "types"
    first_start_s = 0.0
    restart_s = 0.0

    def work(self, job: SimJob) -> float:
        return 300.0

    def runs_on(self, job: SimJob, gpu_type: str) -> bool:
        return gpu_type != "p100"

    def rate(self, job: SimJob, per_node: tuple[int, ...], gpu_type: str) -> float:
        return {"k80": 1.0, "v100": 3.0}[gpu_type]

    def isolated_rate(self, job: SimJob) -> float:
        return 3.0


def test_heterogeneous_cluster_prefers_the_fastest_type_it_can_run_on() -> None:
    # One 4-GPU node of each type; three 4-GPU jobs at t=0, interval 0. The first takes the
    # v100 node (300 / 3 = 100 s), the second the k80 node (300 s), the third waits for the
    # v100 node (p100 is unusable), then runs 100 s: ends at 200.
    jobs = tuple(SimJob(f"j{i}", 0.0, 4) for i in range(3))
    cluster = parse_cluster("1x4:k80+1x4:p100+1x4:v100")
    result = simulate(
        Workload("test", "hand", jobs), cluster, _TypeSpeed(), "fifo", SimOptions(interval_s=0)
    )
    ends = {r.id: r.end for r in result.records}
    assert ends == {"j0": 100.0, "j1": 300.0, "j2": 200.0}


def test_a_job_that_runs_on_no_type_of_the_cluster_is_refused() -> None:
    jobs = (SimJob("j", 0.0, 4),)
    cluster = parse_cluster("1x4:p100+2x4:p100")  # p100 only, in two groups
    cluster = replace(
        cluster, nodes=(*cluster.nodes[:1], replace(cluster.nodes[1], gpu_type="p100b"))
    )
    speed = _TypeSpeed()
    speed.runs_on = lambda job, gpu_type: gpu_type == "v100"  # type: ignore[method-assign]
    with pytest.raises(WorkloadError) as err:
        simulate(Workload("test", "hand", jobs), cluster, speed)
    assert err.value.where == "j" and "cannot run on any GPU type" in err.value.message
