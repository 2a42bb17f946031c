"""The simulation engine on tiny hand-computed cases: every expected number is worked out in the
comments (times in seconds; cluster "2x4" = 2 nodes x 4 GPUs = 8 GPUs).

More (placement-dependent rates, determinism, invariants over random workloads, recorded
placements, bad input, `max_time_s`) in `test_engine_more.py`.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from trainyard.core import Profile, get_profile
from trainyard.sim.cluster import parse_cluster
from trainyard.sim.engine import SimOptions, simulate
from trainyard.sim.metrics import summarize
from trainyard.sim.records import JobRecord, Sample, SimResult
from trainyard.sim.speed import FixedDuration
from trainyard.sim.workload import SimJob, Workload


def run(
    jobs: list[SimJob],
    profile: str | Profile = "fifo",
    *,
    cluster: str = "2x4",
    speed: object | None = None,
    **options: object,
) -> SimResult:
    workload = Workload("test", "hand", tuple(jobs))
    return simulate(
        workload,
        parse_cluster(cluster),
        speed or FixedDuration(),  # type: ignore[arg-type]
        profile,
        SimOptions(**options),  # type: ignore[arg-type]
    )


def rec(result: SimResult, job_id: str) -> JobRecord:
    (found,) = [r for r in result.records if r.id == job_id]
    return found


def at(result: SimResult, t: float) -> Sample:
    """The sample in effect at time `t` (the timeline is piecewise constant)."""
    before = [s for s in result.samples if s.t <= t]
    assert before, f"no sample at or before {t}"
    return before[-1]


class Penalized:
    """Rate 1, work = duration, with a start penalty of 20 s and a restart penalty of 30 s."""

    name = "penalized"
    first_start_s = 20.0
    restart_s = 30.0

    def work(self, job: SimJob) -> float:
        assert job.duration is not None
        return job.duration

    def rate(self, job: SimJob, per_node: tuple[int, ...], gpu_type: str) -> float:
        return 1.0

    def isolated_rate(self, job: SimJob) -> float:
        return 1.0


class Piecewise:
    """Jobs without a duration need 150 units at rate 1 until progress 50, then rate 2 (alone:
    50 s + 100/2 s = 100 s); jobs with a duration run it at rate 1."""

    name = "piecewise"
    first_start_s = 0.0

    def __init__(self, restart_s: float = 0.0) -> None:
        self.restart_s = restart_s
        self.calls: list[tuple[str, float]] = []

    def work(self, job: SimJob) -> float:
        return 150.0 if job.duration is None else job.duration

    def rate(self, job: SimJob, per_node: tuple[int, ...], gpu_type: str) -> float:
        raise AssertionError("rate_at must be used when the model has it")

    def isolated_rate(self, job: SimJob) -> float:
        return 1.0

    def isolated_time(self, job: SimJob) -> float:
        return 100.0 if job.duration is None else job.duration

    def rate_at(
        self, job: SimJob, per_node: tuple[int, ...], gpu_type: str, progress: float
    ) -> float:
        self.calls.append((job.id, progress))
        if job.duration is not None:
            return 1.0
        return 1.0 if progress < 50 else 2.0

    def next_change(self, job: SimJob, progress: float) -> float:
        if job.duration is not None or progress >= 50:
            return math.inf
        return 50.0


def state(result: SimResult, t: float) -> tuple[int, int, int]:
    """(allocated, pending jobs, pending GPUs) at time `t`."""
    s = at(result, t)
    return (s.allocated, s.pending_jobs, s.pending_gpus)


# -- 1. event ordering and rounds ---------------------------------------------------------------


def test_arrival_waits_for_the_next_round() -> None:
    # interval 60: submitted at 10, the next round is at 60; 60 + 100 = 160
    r = run([SimJob("a", 10, 1, duration=100)], interval_s=60)
    a = rec(r, "a")
    assert (a.first_start, a.end, a.run_time) == (60, 160, 100)
    assert a.queueing_delay == 50 and a.jct == 150
    assert r.rounds == 1  # one round at 60; the completion at 160 leaves nothing to place


def test_interval_zero_starts_at_the_arrival() -> None:
    r = run([SimJob("a", 10, 1, duration=100)], interval_s=0)
    a = rec(r, "a")
    assert (a.first_start, a.end) == (10, 110)
    assert r.end_time == 110 and r.rounds == 1


def test_freed_gpus_are_handed_out_at_the_next_round() -> None:
    # a: 8 GPUs 0..100 (round at 0). b (8 GPUs, at 10) waits: round at 60 (arrival) cannot place
    # it; a ends at 100, not a round: the next is at 120; b runs 120..170.
    r = run([SimJob("a", 0, 8, duration=100), SimJob("b", 10, 8, duration=50)], interval_s=60)
    assert (rec(r, "a").first_start, rec(r, "a").end) == (0, 100)
    assert (rec(r, "b").first_start, rec(r, "b").end) == (120, 170)
    assert r.rounds == 3  # 0, 60, 120
    # between 100 and 120 the cluster is idle while b waits
    assert at(r, 110) == Sample(100, 0, 1, 8, 0)
    assert at(r, 120).allocated == 8


def test_completion_before_arrival_at_the_same_instant() -> None:
    # a ends at 100 exactly when b (8 GPUs) arrives: the completion is applied first, so the
    # round at 100 places b at once; one sample at t=100 (the state after the round)
    r = run([SimJob("a", 0, 8, duration=100), SimJob("b", 100, 8, duration=50)], interval_s=0)
    assert (rec(r, "b").first_start, rec(r, "b").end) == (100, 150)
    assert [s for s in r.samples if s.t == 100] == [Sample(100, 8, 0, 0, 0)]
    assert r.rounds == 2
    # the same with rounds every 60 s: 100 is no round, b starts at 120
    r60 = run([SimJob("a", 0, 8, duration=100), SimJob("b", 100, 8, duration=50)], interval_s=60)
    assert (rec(r60, "b").first_start, rec(r60, "b").end) == (120, 170)


def test_quiet_rounds_are_skipped() -> None:
    # one 1-GPU job running 100,000 s: a single round, not one per minute
    r = run([SimJob("a", 0, 1, duration=100_000)], interval_s=60)
    assert r.rounds == 1 and rec(r, "a").end == 100_000
    # a second job arriving at 5000 (fits at once): round at 5040, nothing else
    r = run([SimJob("a", 0, 1, duration=100_000), SimJob("b", 5000, 1, duration=10)], interval_s=60)
    assert r.rounds == 2
    assert (rec(r, "b").first_start, rec(r, "b").end) == (5040, 5050)


# -- 2. gangs and queueing ----------------------------------------------------------------------

GANGS = [
    SimJob("a", 0, 6, duration=100),
    SimJob("b", 1, 4, duration=50),
    SimJob("c", 2, 2, duration=30),
]


def test_fifo_head_of_line_blocking() -> None:
    # a takes 6 of 8 GPUs 0..100; b (4) does not fit in the 2 free; c (2) would, but FIFO keeps
    # it behind b. At 100 both start: b 100..150, c 100..130.
    r = run(GANGS, "fifo", interval_s=0)
    got = {x.id: (x.first_start, x.end, x.jct, x.queueing_delay) for x in r.records}
    assert got == {
        "a": (0, 100, 100, 0),
        "b": (100, 150, 149, 99),
        "c": (100, 130, 128, 98),
    }
    assert r.rounds == 4  # 0, 1, 2, 100 (130 and 150 leave nothing pending)


@pytest.mark.parametrize("profile", ["las", "priority", "drf", "default", "tiresias"])
def test_greedy_profiles_let_the_small_job_pass(profile: str) -> None:
    # c (2 GPUs) starts on arrival at 2 in the 2 free GPUs: 2..32; b still waits for a: 100..150
    r = run(GANGS, profile, interval_s=0)
    got = {x.id: (x.first_start, x.end, x.jct, x.queueing_delay) for x in r.records}
    assert got == {
        "a": (0, 100, 100, 0),
        "b": (100, 150, 149, 99),
        "c": (2, 32, 30, 0),
    }


def test_fifo_samples_and_summary() -> None:
    r = run(GANGS, "fifo", interval_s=0)
    times = [s.t for s in r.samples]
    assert times == sorted(times)
    assert all(0 <= s.allocated <= r.total_gpus for s in r.samples)
    # (allocated, pending jobs, pending GPUs) by hand
    assert state(r, 0.5) == (6, 0, 0)
    assert state(r, 1.5) == (6, 1, 4)  # b waits
    assert state(r, 50) == (6, 2, 6)  # b and c wait
    assert state(r, 120) == (6, 0, 0)  # b + c run
    assert state(r, 140) == (4, 0, 0)  # b alone
    assert state(r, 150) == (0, 0, 0)
    s = summarize(r)
    # window [0, 150]; allocated GPU-seconds 6*100 + 6*30 + 4*20 = 860; capacity 8*150 = 1200
    assert s["utilisation"] == round(860 / 1200, 4) == 0.7167
    # something waits from 1 to 100: 99 s, with 6 of 8 GPUs busy
    assert s["waiting_time"] == 99 and s["utilisation_while_waiting"] == 0.75
    assert s["jct_avg"] == round((100 + 149 + 128) / 3, 4)
    assert s["queueing_delay_avg"] == round((0 + 99 + 98) / 3, 4)
    assert s["makespan"] == 150 and s["finished"] == 3
    assert s["gpu_hours"] == round((6 * 100 + 4 * 50 + 2 * 30) / 3600, 4)


def test_summary_of_a_single_job() -> None:
    # submitted at 10, runs 60..160 on 1 of 8 GPUs: window [10, 160]; 100 GPU-s of 8*150
    s = summarize(run([SimJob("a", 10, 1, duration=100)], interval_s=60))
    assert s["utilisation"] == round(100 / 1200, 4)
    assert s["waiting_time"] == 50 and s["utilisation_while_waiting"] == 0
    assert s["window_start"] == 10 and s["window_end"] == 160


# -- 3. preemption ------------------------------------------------------------------------------


def test_tiresias_preempts_a_job_past_16_gpu_hours() -> None:
    # a: 8 GPUs, 10,000 s, from 0. b: 8 GPUs, 500 s, at 100. Round at 120: both in LAS level 0
    # (a has 960 GPU-s), FIFO inside it: b waits. a crosses 57,600 GPU-s at 57,600/8 = 7200, a
    # round: a is in level 1, b preempts it. a kept 7200 s of progress. b runs 7200..7700; the
    # next round is 7740; a restarts with the 30 s penalty: 7770 + 2800 = 10,570.
    r = run(
        [SimJob("a", 0, 8, duration=10_000), SimJob("b", 100, 8, duration=500)],
        "tiresias",
        speed=FixedDuration(restart_s=30),
        interval_s=60,
    )
    a, b = rec(r, "a"), rec(r, "b")
    assert (b.first_start, b.end, b.preemptions) == (7200, 7700, 0)
    assert (a.first_start, a.end) == (0, 10_570)
    assert (a.preemptions, a.restarts) == (1, 1)
    assert a.run_time == 7200 + (10_570 - 7740)  # 10,030: the penalty counts as run time
    assert r.rounds == 4  # 0, 120, 7200, 7740
    assert at(r, 7720) == Sample(7700, 0, 1, 8, 0)  # a waits for the round at 7740


def test_tiresias_with_start_and_restart_penalties() -> None:
    # Penalized: 20 s after a first start, 30 s after a restart, no progress in either.
    # a starts at 0, progresses from 20; preempted at 7200 (the threshold is GPU-seconds held,
    # penalty included) with 7180 done. b: 7200 + 20 + 500 = 7720. a restarts at the round
    # 7740: 7770 + (10,000 - 7180) = 10,590.
    r = run(
        [SimJob("a", 0, 8, duration=10_000), SimJob("b", 100, 8, duration=500)],
        "tiresias",
        speed=Penalized(),
        interval_s=60,
    )
    a, b = rec(r, "a"), rec(r, "b")
    assert (b.first_start, b.end, b.run_time) == (7200, 7720, 520)
    assert (a.first_start, a.end, a.preemptions, a.restarts) == (0, 10_590, 1, 1)
    assert a.run_time == 7200 + 2850
    assert (a.isolated_time, b.isolated_time) == (10_020, 520)  # first-start penalty included


def test_threshold_crossed_while_nothing_waits() -> None:
    # a crosses 57,600 GPU-s at 7200 with nothing pending (no round then). b arrives at 8000:
    # the round at 8000 sees a in level 1 and b preempts it at once. b 8000..8100; a restarts
    # at 8100 with 10,000 - 8000 = 2000 left: 10,100.
    r = run(
        [SimJob("a", 0, 8, duration=10_000), SimJob("b", 8000, 8, duration=100)],
        "tiresias",
        interval_s=0,
    )
    assert (rec(r, "b").first_start, rec(r, "b").end) == (8000, 8100)
    a = rec(r, "a")
    assert (a.end, a.run_time, a.preemptions, a.restarts) == (10_100, 10_000, 1, 1)
    assert r.rounds == 3  # 0, 8000, 8100


def test_preempted_again_during_the_restart_penalty() -> None:
    # restart penalty 10. b evicts a at 30 (30 done); b 30..40; a restarts at 40, in penalty
    # until 50; c evicts it at 45 with still 30 done; c 45..55; a restarts at 55, penalty to 65,
    # 70 left: 135. Held 30 + 5 + 80 = 115 s.
    r = run(
        [
            SimJob("a", 0, 8, duration=100),
            SimJob("b", 30, 8, duration=10, priority=5),
            SimJob("c", 45, 8, duration=10, priority=5),
        ],
        "priority",
        speed=FixedDuration(restart_s=10),
        interval_s=0,
    )
    a = rec(r, "a")
    assert (a.end, a.run_time, a.preemptions, a.restarts) == (135, 115, 2, 2)
    assert (rec(r, "c").first_start, rec(r, "c").end) == (45, 55)


def test_two_las_thresholds() -> None:
    # tiresias with levels split at 800 and 1600 GPU-s; 8-GPU jobs gain 8 GPU-s per second.
    # a (1000 s) from 0: level 1 at 100. b (50 s) at 150 evicts it (a: 150 done, 1200 GPU-s);
    # b 150..200; a restarts at 200 (level 1). c (500 s) at 230 evicts it (a: 180 done,
    # 1440 GPU-s). c reaches 800 at 330 (a round: same level as a, FIFO, no eviction) and 1600
    # at 430: level 2 > a's 1, a evicts c (c: 200 done). a reaches 1600 at 450 (a round; same
    # level as c, a is older: it stays) and ends at 430 + 820 = 1250; c 1250 + 300 = 1550.
    prof = replace(get_profile("tiresias"), name="tiresias2", las_thresholds=(800.0, 1600.0))
    r = run(
        [
            SimJob("a", 0, 8, duration=1000),
            SimJob("b", 150, 8, duration=50),
            SimJob("c", 230, 8, duration=500),
        ],
        prof,
        interval_s=0,
    )
    got = {x.id: (x.first_start, x.end, x.run_time, x.preemptions, x.restarts) for x in r.records}
    assert got == {
        "a": (0, 1250, 1000, 2, 2),
        "b": (150, 200, 50, 0, 0),
        "c": (230, 1550, 500, 1, 1),
    }
    assert r.rounds == 8  # 0, 150, 200, 230, 330, 430, 450, 1250


def test_no_preemption_below_the_threshold() -> None:
    # a would reach 57,600 GPU-s only at 57,600 s; it ends at 1000 first: b waits
    r = run(
        [SimJob("a", 0, 1, duration=1000), SimJob("b", 10, 8, duration=100)],
        "tiresias",
        interval_s=0,
    )
    assert rec(r, "a").preemptions == 0
    assert (rec(r, "b").first_start, rec(r, "b").end) == (1000, 1100)


def test_priority_preemption_keeps_progress() -> None:
    # a (8 GPUs, 100 s) from 0; b (priority 5) at 30 evicts it: a has 30 done. b 30..70; a
    # restarts at 70 with 10 s penalty: 80 + 70 = 150; held GPUs 30 + 80 = 110 s
    r = run(
        [SimJob("a", 0, 8, duration=100), SimJob("b", 30, 8, duration=40, priority=5)],
        "priority",
        speed=FixedDuration(restart_s=10),
        interval_s=0,
    )
    a = rec(r, "a")
    assert (a.end, a.run_time, a.preemptions, a.restarts) == (150, 110, 1, 1)
    assert (rec(r, "b").first_start, rec(r, "b").end) == (30, 70)
    assert state(r, 50) == (8, 1, 8)  # b runs, a waits


def test_min_runtime_delays_the_preemption() -> None:
    # min_runtime 100: a (from 0) cannot be evicted before 100, which wakes a round although
    # nothing arrives or ends then. b 100..140; a restarts at 140 with 100 left: 240.
    r = run(
        [SimJob("a", 0, 8, duration=200), SimJob("b", 30, 8, duration=40, priority=5)],
        "priority",
        interval_s=0,
        min_runtime_s=100,
    )
    assert (rec(r, "b").first_start, rec(r, "b").end) == (100, 140)
    a = rec(r, "a")
    assert (a.end, a.run_time, a.preemptions) == (240, 200, 1)


def test_locality_wait_wakes_a_round() -> None:
    # default: a and b (3 GPUs each) take one node each, 1 GPU free on each. c (2 GPUs, at 10)
    # fits a node's size, so it waits 900 s for one before spanning: wake at 910, round at 960,
    # c spans 1 + 1: 960..1060 (FixedDuration ignores the placement).
    r = run(
        [
            SimJob("a", 0, 3, duration=1000),
            SimJob("b", 0, 3, duration=1000),
            SimJob("c", 10, 2, duration=100),
        ],
        "default",
        interval_s=60,
    )
    assert (rec(r, "c").first_start, rec(r, "c").end) == (960, 1060)
    # while c waits, the 2 free GPUs are reported as fragmented
    assert at(r, 500) == Sample(60, 6, 1, 2, 2)


# -- 4. piecewise rates -------------------------------------------------------------------------


def test_piecewise_rate_alone() -> None:
    # 50 units at rate 1 (50 s) then 100 at rate 2 (50 s): 0..100
    speed = Piecewise()
    r = run([SimJob("a", 0, 8)], speed=speed, interval_s=0)
    a = rec(r, "a")
    assert (a.first_start, a.end, a.run_time, a.isolated_time) == (0, 100, 100, 100)
    assert ("a", 50.0) in speed.calls  # the rate is re-read at the change point


def test_piecewise_preempted_in_the_second_piece() -> None:
    # at 60 a has 50 + 2*10 = 70 done; b 60..90; a restarts at 90, penalty 10 -> 100,
    # then 80 units at rate 2: 140. Held 60 + 50 = 110 s.
    speed = Piecewise(restart_s=10)
    r = run(
        [SimJob("a", 0, 8), SimJob("b", 60, 8, duration=30, priority=5)],
        "priority",
        speed=speed,
        interval_s=0,
    )
    a = rec(r, "a")
    assert (a.end, a.run_time, a.preemptions, a.restarts) == (140, 110, 1, 1)
    assert ("a", 70.0) in speed.calls  # restarted with its progress kept
    assert (rec(r, "b").first_start, rec(r, "b").end) == (60, 90)


def test_piecewise_preempted_in_the_first_piece() -> None:
    # at 30 a has 30 done; b 30..70; a restarts at 70, penalty -> 80, 20 units at rate 1
    # -> 100, 100 units at rate 2 -> 150. Held 30 + 80 = 110 s.
    r = run(
        [SimJob("a", 0, 8), SimJob("b", 30, 8, duration=40, priority=5)],
        "priority",
        speed=Piecewise(restart_s=10),
        interval_s=0,
    )
    a = rec(r, "a")
    assert (a.end, a.run_time, a.preemptions) == (150, 110, 1)
