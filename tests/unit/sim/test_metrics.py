"""Metrics on tiny hand-computed runs: every number below is worked out in the comments."""

from __future__ import annotations

import json

from trainyard.sim.metrics import TABLE_LEGEND, compare, summarize, table_rows, window
from trainyard.sim.records import JobRecord, Sample, SimResult


def job(
    id: str,
    queue: str,
    gpus: int,
    submit: float,
    start: float | None,
    end: float | None,
    run_time: float,
    isolated: float,
    preemptions: int = 0,
    restarts: int = 0,
) -> JobRecord:
    return JobRecord(id, queue, gpus, submit, start, end, run_time, preemptions, restarts, isolated)


def result(
    records: tuple[JobRecord, ...],
    samples: tuple[Sample, ...],
    end_time: float,
    total_gpus: int = 2,
    policy: str = "fifo",
    queues: tuple[str, ...] = (),
    seed: int = 0,
) -> SimResult:
    return SimResult(
        "tiny", "2gpu", policy, seed, total_gpus, records, samples, end_time, 7, queues
    )


# 2 GPUs, 3 jobs:
#   a: prod, 1 GPU, submit 0, runs 0-10.                      JCT 10, wait 0, iso 10
#   b: prod, 2 GPUs, submit 0, waits for both GPUs, runs 10-20. JCT 20, wait 10, iso 10
#   c: dev, 1 GPU, submit 2, runs 2-10, preempted for b, restarts 20-28.
#      JCT 26, wait 0, run_time 16, iso 14, 1 preemption, 1 restart
TINY_JOBS = (
    job("a", "prod", 1, 0, 0, 10, 10, 10),
    job("b", "prod", 2, 0, 10, 20, 10, 10),
    job("c", "dev", 1, 2, 2, 28, 16, 14, preemptions=1, restarts=1),
)
#   t    allocated  pending jobs/gpus  fragmented
TINY_SAMPLES = (
    Sample(0, 1, 1, 2, 0),  # a runs, b waits
    Sample(2, 2, 1, 2, 0),  # a, c run, b waits
    Sample(10, 2, 1, 1, 0),  # b runs, c waits
    Sample(20, 1, 0, 0, 0),  # c runs
    Sample(28, 0, 0, 0, 0),  # all done
)


def tiny() -> SimResult:
    return result(TINY_JOBS, TINY_SAMPLES, end_time=28)


def test_counts_jct_and_queueing_delay() -> None:
    s = summarize(tiny())
    assert (s["jobs"], s["finished"], s["unfinished"], s["started"]) == (3, 3, 0, 3)
    # JCTs 10, 20, 26: mean 56/3, median 20, p99 rank ceil(2.97) = 3 -> 26
    assert s["jct_avg"] == 18.6667
    assert s["jct_median"] == 20
    assert s["jct_p99"] == 26
    # delays 0, 10, 0: mean 10/3, p99 -> 10
    assert s["queueing_delay_avg"] == 3.3333
    assert s["queueing_delay_p99"] == 10
    assert s["makespan"] == 28  # 28 - 0
    assert (s["window_start"], s["window_end"]) == (0, 28)


def test_utilisation() -> None:
    s = summarize(tiny())
    # ∫ allocated = 1*2 + 2*8 + 2*10 + 1*8 + 0 = 46 over 2 GPUs * 28 s = 56 -> 0.821428...
    assert s["utilisation"] == 0.8214
    # waiting (pending > 0) during [0, 20): ∫ allocated = 2 + 16 + 20 = 38 of 2 * 20 = 40
    assert s["waiting_time"] == 20
    assert s["utilisation_while_waiting"] == 0.95
    # no fragmented GPUs: 0 of 40 GPU-s; idle while waiting = 40 - 38 = 2 -> 0 / 2
    assert s["fragmentation"] == 0
    assert s["fragmented_share_of_idle"] == 0


def test_fragmentation() -> None:
    # 4 GPUs on two nodes; x holds one GPU on each node, y wants 2 GPUs on one node.
    #   [0, 10): allocated 2, y pending, the 2 free GPUs are fragmented
    #   [10, 20): x done at 10, y runs on 2 GPUs, nothing pending
    jobs = (
        job("x", "q", 2, 0, 0, 10, 10, 10),
        job("y", "q", 2, 0, 10, 20, 10, 10),
    )
    samples = (Sample(0, 2, 1, 2, 2), Sample(10, 2, 0, 0, 0))
    s = summarize(result(jobs, samples, end_time=20, total_gpus=4))
    # waiting [0, 10): ∫ fragmented = 20, ∫ total = 40, ∫ idle = 40 - 20 = 20
    assert s["fragmentation"] == 0.5
    assert s["fragmented_share_of_idle"] == 1.0
    assert s["utilisation_while_waiting"] == 0.5
    # ∫ allocated = 2*10 + 2*10 = 40 of 4 * 20 = 80
    assert s["utilisation"] == 0.5


def test_never_waiting_gives_none() -> None:
    jobs = (job("a", "q", 1, 0, 0, 5, 5, 5),)
    s = summarize(result(jobs, (Sample(0, 1, 0, 0, 0),), end_time=5))
    assert s["waiting_time"] == 0
    assert s["utilisation_while_waiting"] is None
    assert s["fragmentation"] is None
    assert s["fragmented_share_of_idle"] is None
    assert s["utilisation"] == 0.5  # 1 of 2 GPUs for the whole window


def test_finish_time_fairness() -> None:
    s = summarize(tiny())
    # jobs in the system: a 0-10, b 0-20, c 2-28 -> (10 + 20 + 26) / 28 = 2.0, fair share 1 GPU
    assert s["avg_jobs_in_system"] == 2.0
    # T_fair: a 10 * max(1, 1/1) = 10 -> rho 1; b 10 * max(1, 2/1) = 20 -> rho 1;
    # c 14 * 1 = 14 -> rho 26/14 = 1.857142...; mean 1.285714..., 2 of 3 fair
    assert s["fairness_jobs"] == 3
    assert s["fairness_rho_mean"] == 1.2857
    assert s["fairness_rho_max"] == 1.8571
    assert s["fairness_share_fair"] == 0.6667


def test_preemptions_restarts_gpu_hours() -> None:
    s = summarize(tiny())
    assert (s["preemptions"], s["restarts"], s["jobs_preempted"]) == (1, 1, 1)
    # 1*10 + 2*10 + 1*16 = 46 GPU-s = 0.012777... h
    assert s["gpu_hours"] == 0.0128


def test_per_queue_breakdown() -> None:
    s = summarize(result(TINY_JOBS, TINY_SAMPLES, 28, queues=("prod", "dev", "idle")))
    assert list(s["queues"]) == ["dev", "idle", "prod"]  # sorted, declared empty queue kept
    # dev: c only. JCT 26, wait 0, 16 GPU-s = 0.00444 h
    assert s["queues"]["dev"] == {
        "jobs": 1,
        "finished": 1,
        "jct_avg": 26,
        "queueing_delay_avg": 0,
        "queueing_delay_p99": 0,
        "gpu_hours": 0.0044,
    }
    # prod: a, b. JCT (10 + 20) / 2 = 15, waits 0 and 10 (p99 10), 10 + 20 = 30 GPU-s
    assert s["queues"]["prod"] == {
        "jobs": 2,
        "finished": 2,
        "jct_avg": 15,
        "queueing_delay_avg": 5,
        "queueing_delay_p99": 10,
        "gpu_hours": 0.0083,
    }
    assert s["queues"]["idle"]["jobs"] == 0
    assert s["queues"]["idle"]["jct_avg"] is None


def test_unfinished_jobs_cut_off() -> None:
    # 2 GPUs, cut off at 30: a done at 10; b started at 10 and still runs; d never started.
    jobs = (
        job("a", "q", 1, 0, 0, 10, 10, 10),
        job("b", "q", 2, 5, 10, None, 20, 50),
        job("d", "q", 1, 6, None, None, 0, 5),
    )
    samples = (
        Sample(0, 1, 0, 0, 0),
        Sample(5, 1, 1, 2, 0),
        Sample(6, 1, 2, 3, 0),
        Sample(10, 2, 1, 1, 0),
    )
    r = result(jobs, samples, end_time=30)
    s = summarize(r)
    assert window(r) == (0, 30)  # unfinished jobs: the window runs to the cut-off
    assert (s["finished"], s["unfinished"], s["started"]) == (1, 2, 2)
    assert s["jct_avg"] == s["jct_median"] == s["jct_p99"] == 10
    assert s["queueing_delay_avg"] == 2.5  # a 0, b 5; d never started
    assert s["makespan"] == 10  # last end - first submit, finished jobs only
    # ∫ allocated = 1*10 + 2*20 = 50 of 2 * 30 = 60
    assert s["utilisation"] == 0.8333
    # in system: a 10, b 25, d 24 -> 59 / 30; only a counts for fairness (rho 10/10 = 1)
    assert s["avg_jobs_in_system"] == 1.9667
    assert (s["fairness_jobs"], s["fairness_rho_max"], s["fairness_share_fair"]) == (1, 1, 1)


def test_empty_run() -> None:
    s = summarize(result((), (), end_time=0))
    assert (s["jobs"], s["finished"], s["unfinished"]) == (0, 0, 0)
    for key in (
        "jct_avg",
        "jct_median",
        "jct_p99",
        "queueing_delay_avg",
        "makespan",
        "utilisation",
        "utilisation_while_waiting",
        "fragmentation",
        "fairness_rho_mean",
        "fairness_share_fair",
    ):
        assert s[key] is None, key
    assert s["queues"] == {}
    json.dumps(s, allow_nan=False)


def test_samples_before_first_submit_are_clipped() -> None:
    # a sample from t=-5 is outside the window [0, 10] and must not count
    jobs = (job("a", "q", 2, 0, 0, 10, 10, 10),)
    samples = (Sample(-5, 0, 0, 0, 0), Sample(0, 2, 0, 0, 0))
    assert summarize(result(jobs, samples, end_time=10))["utilisation"] == 1.0


def test_summary_is_json_stable() -> None:
    a = json.dumps(summarize(tiny()), allow_nan=False)
    assert a == json.dumps(summarize(tiny()))
    assert "-0.0" not in a


def test_compare_labels_and_order() -> None:
    runs = [
        result(TINY_JOBS, TINY_SAMPLES, 28, policy="fifo"),
        result(TINY_JOBS, TINY_SAMPLES, 28, policy="srtf", seed=1),
        result(TINY_JOBS, TINY_SAMPLES, 28, policy="srtf", seed=2),
        result(TINY_JOBS, TINY_SAMPLES, 28, policy="srtf", seed=2),
    ]
    out = compare(runs)
    assert list(out) == ["fifo", "srtf (seed 1)", "srtf (seed 2)", "srtf (seed 2) #2"]
    assert out["fifo"] == summarize(tiny())
    assert compare([]) == {}


def test_table_rows() -> None:
    runs = [tiny(), result(TINY_JOBS, TINY_SAMPLES, 28, policy="gavel")]
    header, rows = table_rows(compare(runs))
    assert header[0] == "policy" and [r[0] for r in rows] == ["fifo", "gavel"]
    assert all(len(r) == len(header) for r in rows)
    for title in ("JCT avg (h)", "JCT p99 (h)", "wait avg (min)", "util (%)", "frag (%)"):
        assert title in header
    assert "rho avg" in header
    # fifo: 3 jobs, 3 done, JCT avg 18.67 s = 0.01 h, wait avg 3.33 s = 0.06 min, util
    # 82.1 %, rho max 1.86, 1 preemption
    cells = rows[0]
    assert cells[:4] == ["fifo", "3", "3", "0.01"]
    assert cells[header.index("wait avg (min)")] == "0.06"
    assert "82.1" in cells and "1.86" in cells and cells[-2:] == ["1", "0"]  # preempt, resize


def test_table_units_are_fixed_per_column_whatever_the_scale() -> None:
    # 3 hours of JCT and 10 seconds of JCT both show in hours; a run with no finished job
    # shows "-"; the header is the same for every table
    long_job = (job("a", "q", 1, 0, 0, 3 * 3600, 3 * 3600, 3 * 3600),)
    short_job = (job("b", "q", 1, 0, 30, 40, 10, 10),)
    long_run = result(long_job, (Sample(0, 1, 0, 0, 0),), 3 * 3600, policy="long")
    short_run = result(short_job, (Sample(0, 1, 0, 0, 0),), 40, policy="short")
    stuck = result((job("z", "q", 1, 0, None, None, 0, 1),), (), 10, policy="stuck")
    header, rows = table_rows(compare([long_run, stuck]))
    short_header, short_rows = table_rows(compare([short_run]))
    assert header == short_header
    assert "JCT avg (h)" in header and "wait avg (min)" in header and "makespan (h)" in header
    jct, wait = header.index("JCT avg (h)"), header.index("wait avg (min)")
    assert rows[0][jct] == "3.00" and rows[1][jct] == "-"
    assert short_rows[0][jct] == "0.01" and short_rows[0][wait] == "0.50"  # 40 s, 30 s


def test_the_legend_explains_every_header() -> None:
    header, _ = table_rows(compare([tiny()]))
    terms = " ".join(term for term, _ in TABLE_LEGEND)
    for title in header[1:]:
        name = title.split(" (")[0].split()[0]  # "JCT avg (h)" -> "JCT"
        assert name in terms, title
        unit = title.partition(" (")[2]
        assert not unit or f"({unit}" in terms, title


def test_goodput_compares_run_time_with_the_isolated_time_at_the_asked_size() -> None:
    s = summarize(tiny())
    # a and b ran exactly their isolated time; c, preempted once, took 16 s for 14
    assert s["goodput_speedup_mean"] == round((1 + 1 + 14 / 16) / 3, 4)
    # isolated GPU-seconds 10 + 2 x 10 + 14 = 44 against 10 + 20 + 16 held
    assert s["goodput_per_gpu"] == round(44 / 46, 4)
    record = JobRecord("g", "prod", 1, 0, 0, 5, 5, 0, 0, 20, gpu_seconds=20.0)
    grown = result((record,), (), end_time=5)
    g = summarize(grown)  # an elastic job that ran 4 GPUs: 4x faster, as efficient per GPU
    assert g["goodput_speedup_mean"] == 4.0 and g["goodput_per_gpu"] == 1.0
