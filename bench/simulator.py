"""Simulator benchmarks (JSON lines on stdout): `python bench/simulator.py [CASE ...]`.

Cases (all of them without arguments; the data comes from ``$TRAINYARD_SHARED`` or
``../shared``):

* ``pollux``: the 8 Pollux workloads at loads 0.5, 1.0, 1.5 and 2.0 on 16 nodes x 4 GPUs,
  policies tiresias, default, las and fifo; the average JCT over the 8 workloads next to
  Pollux's published Tiresias mean (`results-jobload/tiresias-<load>/summary.json`).
* ``pollux-elastic``: the same workloads with elastic jobs (adaptive GPUs and batch size,
  `sim/pollux_jobs.py`) under `default`, next to Pollux's published mean
  (`results-jobload/pollux-<load>/summary.json`).
* ``pollux-elastic-events``: the same with a round at every event (`--interval 0`), as the
  server schedules (it runs a round per submit and run end), instead of Pollux's 60 s.
* ``pollux-anticipate``: a diagnostic of issue 13, not a policy: the elastic runs at loads
  0.5 and 1.0 with each job reporting the gradient statistics of a later point of its
  training (an oracle of its future noise scale, 5 / 10 / 20 % of its work ahead).
* ``pollux-gap``: per application and load, the elastic runs' mean JCT next to the same jobs
  alone on the empty cluster under the same policy, the ideal alone (best size in every
  epoch, free restarts) and Pollux's published per-job JCTs: where the time goes.
* ``pollux-shapes``: the elastic runs against rigid Tiresias on 16 x 8 and 32 x 2 (load 1.0)
  and at load 4.0 on 16 x 4 (the load-2.0 workloads' arrivals twice as dense).
* ``pollux-mixed``: the same with every other job rigid at its trace size: the waits of
  rigid and elastic jobs, finish-time fairness and makespan.
* ``philly-window``: the busy Philly week 2017-10-16 to 2017-10-23 (14,185 jobs; GPU demand
  above 600 GPUs on most days) on 64 nodes x 8 GPUs, every policy side by side.
* ``philly-full``: the whole Philly trace (82,247 jobs) on 64 x 8 under the default policy:
  wall seconds and simulated jobs per wall second; then the same under `tiresias`.
* ``philly-gangs``: the whole Philly trace under `default` with and without the blind
  reservation for heads spanning nodes (`reserve_gang_after_s`, outside review 14 F3): JCT,
  waits, and the longest wait of a job of more than 8 GPUs (first start and in all).
* ``weeks``: `default` against `tiresias` on nine Philly weeks from 2017-10-02 (64 x 8, the
  virtual clusters as queues with `--quota-share 0.5`): average JCT, wait and the worst
  finish-time-fairness ratio of each.
* ``ablation``: `default` on the busy Philly week with each of item 7's changes taken out
  (`Profile.with_overrides`).
* ``tie-break``: which of two queues tied on fair share goes first (`queue_tie_break`:
  declared order, or the queue whose next job is smaller), for `default` and `drf`, on six
  Philly weeks from 2017-10-02 (64 x 8): JCT, wait and the share of GPUs idle while jobs
  wait.

Timings are wall-clock on this machine with the compiled core (`make venv`).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Final

from trainyard.core import get_profile
from trainyard.datafiles import shared_root
from trainyard.sim.cluster import parse_cluster
from trainyard.sim.config import SimOptions
from trainyard.sim.engine import simulate
from trainyard.sim.metrics import summarize
from trainyard.sim.pollux_jobs import PolluxJobs
from trainyard.sim.pollux_speed import PolluxSpeed
from trainyard.sim.readers import read_workload
from trainyard.sim.speed import FixedDuration
from trainyard.sim.workload import SimJob, Workload
from trainyard.stats import percentile

SHARED = shared_root()  # $TRAINYARD_SHARED, else ../shared
POLLUX = SHARED / "traces" / "pollux"
LOADS = {"0.5": "workloads-0.5", "1.0": "workloads", "1.5": "workloads-1.5", "2.0": "workloads-2.0"}
KEYS = (
    "jct_avg", "jct_median", "jct_p99", "queueing_delay_avg", "queueing_delay_p99",
    "utilisation", "utilisation_while_waiting", "fragmentation", "fairness_rho_mean",
    "fairness_rho_max", "preemptions",
)  # fmt: skip
WINDOW = ("2017-10-16 00:00:00", "2017-10-23 00:00:00")
WEEKS = tuple(
    (f"2017-{a} 00:00:00", f"2017-{b} 00:00:00")
    for a, b in (("10-02", "10-09"), ("10-09", "10-16"), ("10-16", "10-23"), ("10-23", "10-30"),
                 ("10-30", "11-06"), ("11-06", "11-13"))
)  # fmt: skip
EXTRA_WEEKS = tuple(
    (f"2017-{a} 00:00:00", f"2017-{b} 00:00:00")
    for a, b in (("11-13", "11-20"), ("11-20", "11-27"), ("11-27", "12-04"))
)  # fmt: skip


def machine() -> dict[str, Any]:
    return {"machine": platform.machine(), "cpus": os.cpu_count(), "python": sys.version[:6]}


def pollux() -> None:
    speed = PolluxSpeed(POLLUX / "profiles")
    cluster = parse_cluster("16x4")
    for load, folder in LOADS.items():
        published = json.loads(
            (POLLUX / "results-jobload" / f"tiresias-{load}" / "summary.json").read_text()
        )["mean"]
        for policy in ("tiresias", "default", "las", "fifo"):
            start = time.perf_counter()
            jcts = []
            for w in range(1, 9):
                wl = read_workload(f"pollux:{POLLUX / folder / f'workload-{w}.csv'}")
                jcts.append(summarize(simulate(wl, cluster, speed, policy))["jct_avg"])
            mean = statistics.mean(jcts)
            out = {
                "case": "pollux", "load": float(load), "policy": policy, "jct_avg": mean,
                "published_tiresias": published, "vs_published": (mean - published) / published,
                "per_workload": jcts, "wall_s": time.perf_counter() - start, **machine(),
            }  # fmt: skip
            print(json.dumps(out), flush=True)


def pollux_elastic(
    interval_s: float = 60.0,
    case: str = "pollux-elastic",
    loads: tuple[str, ...] = tuple(LOADS),
    extra: dict[str, Any] | None = None,
) -> None:
    """Issue 13: the 8 Pollux workloads with elastic jobs (sim/pollux_jobs.py) under
    `default` (resize by goodput), next to Pollux's published means per load; rounds every
    `interval_s` (0: at every event). `extra` is added to each line."""
    options = SimOptions(interval_s=interval_s)
    speed = PolluxJobs(POLLUX / "profiles")
    cluster = parse_cluster("16x4")
    for load in loads:
        folder = LOADS[load]
        summary = POLLUX / "results-jobload" / f"pollux-{load}" / "summary.json"
        published = json.loads(summary.read_text())
        start = time.perf_counter()
        jcts, theirs = [], []
        for w in range(1, 9):
            wl = speed.elastic_workload(
                read_workload(f"pollux:{POLLUX / folder / f'workload-{w}.csv'}")
            )
            jcts.append(summarize(simulate(wl, cluster, speed, "default", options))["jct_avg"])
            theirs.append(published["avgs"].get(f"workload-{w}"))
        mean = statistics.mean(jcts)
        out = {
            "case": case, "load": float(load), "policy": "default", "jct_avg": mean,
            "published_pollux": published["mean"], "vs_pollux": mean / published["mean"],
            "per_workload": jcts, "pollux_per_workload": theirs, **(extra or {}),
            "wall_s": time.perf_counter() - start, **machine(),
        }  # fmt: skip
        print(json.dumps(out), flush=True)


def pollux_anticipate() -> None:
    """Issue 13 diagnostic, not a policy: the elastic runs at loads 0.5 and 1.0 with every job
    reporting the gradient statistics of a later point of its training (its progress plus
    5 / 10 / 20 % of its work: an oracle of its future noise scale), so that the policy sizes
    it for where it will be rather than where it is. The simulator's hook is restored after."""
    original = PolluxJobs._stats
    for look in (0.05, 0.1, 0.2):

        def ahead(self: PolluxJobs, job: SimJob, progress: float, look: float = look) -> Any:
            work = self.work(job)
            return original(self, job, min(progress + look * work, 0.999 * work))

        PolluxJobs._stats = ahead  # type: ignore[method-assign]
        try:
            pollux_elastic(60.0, "pollux-anticipate", ("0.5", "1.0"), {"look_ahead": look})
        finally:
            PolluxJobs._stats = original  # type: ignore[method-assign]


def _ideal_alone(speed: PolluxJobs, job: SimJob) -> float:
    """Seconds `job` takes alone at its best size in every epoch (packed on 4-GPU nodes; a
    rigid job at its own size), restarts free and no first start: a bound no scheduler
    reaches."""
    work, done, seconds = speed.work(job), 0.0, 0.0
    sizes = range(1, (job.max_gpus or job.gpus) + 1) if job.max_gpus else (job.gpus,)
    while done < work:
        end = min(speed.next_change(job, done), work)
        rate = max(speed.rate_at(job, PolluxSpeed.packed(k), "", done) for k in sizes)
        seconds += (end - done) / rate
        done = end
    return seconds


KINDS = ("full", "alone", "ideal", "pollux")


def pollux_gap(loads: Sequence[str] = tuple(LOADS)) -> None:
    """Issue 13: where the elastic runs' time goes, per application and load: the mean JCT in
    the 8 workloads (`default`, 60 s rounds), the same jobs alone on the empty 16 x 4 cluster
    under the same policy (submitted at 0, rounds at every event: the policy's own ramp-up
    and restarts, no contention), the ideal alone (`_ideal_alone`) and Pollux's published
    per-job JCTs. `share_*` are each application's part of the mean over all jobs."""
    speed = PolluxJobs(POLLUX / "profiles")
    cluster = parse_cluster("16x4")
    events = SimOptions(interval_s=0.0)
    for load in loads:
        folder = LOADS[load]
        summary = POLLUX / "results-jobload" / f"pollux-{load}" / "summary.json"
        published = json.loads(summary.read_text())["jcts"]
        start = time.perf_counter()
        sums: dict[str, dict[str, float]] = {}
        ideal: dict[tuple[str | None, int | None, int, int | None], float] = {}
        total = 0
        for w in range(1, 9):
            wl = speed.elastic_workload(
                read_workload(f"pollux:{POLLUX / folder / f'workload-{w}.csv'}")
            )
            full = {r.id: r for r in simulate(wl, cluster, speed, "default").records}
            for job in wl.jobs:
                app = job.application or "?"
                one = replace(wl, jobs=(replace(job, submit_time=0.0),))
                alone = simulate(one, cluster, speed, "default", events).records[0].jct
                key = (job.application, job.max_gpus, job.gpus, job.batch_size)
                if key not in ideal:
                    ideal[key] = _ideal_alone(speed, job)
                got = sums.setdefault(app, dict.fromkeys(("jobs", *KINDS), 0.0))
                got["jobs"] += 1
                got["full"] += full[job.id].jct or 0.0
                got["alone"] += alone or 0.0
                got["ideal"] += ideal[key]
                got["pollux"] += published[f"workload-{w}"][job.id]
                total += 1
        apps = {
            app: {
                "jobs": int(v["jobs"]),
                **{f"mean_{k}": v[k] / v["jobs"] for k in KINDS},
                **{f"share_{k}": v[k] / total for k in KINDS},
            }
            for app, v in sorted(sums.items())
        }
        out = {
            "case": "pollux-gap", "load": float(load), "policy": "default",
            **{k: sum(a[f"share_{k}"] for a in apps.values()) for k in KINDS},
            "per_application": apps, "wall_s": time.perf_counter() - start, **machine(),
        }  # fmt: skip
        print(json.dumps(out), flush=True)


def pollux_shapes() -> None:
    """Issue 13 off the measured setting: the elastic runs (`default`) against rigid Tiresias
    on clusters and a load Pollux's results do not cover: the load-1.0 workloads on 16 x 8 and
    32 x 2, and the load-2.0 workloads with their arrivals twice as dense (load 4.0) on 16 x 4.
    Mean JCT of each and their ratio, with the worst workload's ratio."""
    speed = PolluxJobs(POLLUX / "profiles")
    for folder, shape, squeeze, load in (
        ("workloads", "16x8", 1.0, 1.0),
        ("workloads", "32x2", 1.0, 1.0),
        ("workloads-2.0", "16x4", 2.0, 4.0),
    ):
        cluster = parse_cluster(shape)
        start = time.perf_counter()
        elastic, rigid = [], []
        for w in range(1, 9):
            trace = read_workload(f"pollux:{POLLUX / folder / f'workload-{w}.csv'}")
            jobs = tuple(replace(j, submit_time=j.submit_time / squeeze) for j in trace.jobs)
            trace = replace(trace, jobs=jobs)
            wl = speed.elastic_workload(trace)
            elastic.append(summarize(simulate(wl, cluster, speed, "default"))["jct_avg"])
            rigid.append(summarize(simulate(trace, cluster, speed, "tiresias"))["jct_avg"])
        out = {
            "case": "pollux-shapes", "cluster": shape, "load": load,
            "elastic_jct_avg": statistics.mean(elastic), "rigid_tiresias_jct_avg":
            statistics.mean(rigid), "ratio": statistics.mean(elastic) / statistics.mean(rigid),
            "worst_workload_ratio": max(e / r for e, r in zip(elastic, rigid, strict=True)),
            "wall_s": time.perf_counter() - start, **machine(),
        }  # fmt: skip
        print(json.dumps(out), flush=True)


def pollux_mixed() -> None:
    """Issue 13, acceptance 2: every other job of the 8 Pollux workloads rigid at its trace
    size, the rest elastic; waits of each kind (mean, p99, max), finish-time fairness and
    makespan, next to Pollux's all-elastic published mean. `*_all_rigid`: the same workloads
    with every job rigid at its trace size, under the same policy (the rigid half's waits and
    the mean JCT), so that what the elastic half does to the rigid jobs' waits is read off."""
    speed = PolluxJobs(POLLUX / "profiles")
    cluster = parse_cluster("16x4")
    for load, folder in LOADS.items():
        summary = POLLUX / "results-jobload" / f"pollux-{load}" / "summary.json"
        published = json.loads(summary.read_text())["mean"]
        start = time.perf_counter()
        waits: dict[bool, list[float]] = {True: [], False: []}
        alone: list[float] = []  # the rigid half's waits when every job is rigid
        jcts, rhos, spans, rigid_jcts = [], [], [], []
        for w in range(1, 9):
            trace = read_workload(f"pollux:{POLLUX / folder / f'workload-{w}.csv'}")
            elastic = speed.elastic_workload(trace)
            mixed = tuple(
                e if i % 2 else t
                for i, (t, e) in enumerate(zip(trace.jobs, elastic.jobs, strict=True))
            )
            wl = replace(trace, jobs=mixed)
            res = simulate(wl, cluster, speed, "default")
            kind = {j.id: j.min_gpus is not None for j in mixed}
            for r in res.records:
                if r.queueing_delay is not None:
                    waits[kind[r.id]].append(r.queueing_delay)
            rigid = simulate(trace, cluster, speed, "default")
            rigid_jcts.append(summarize(rigid)["jct_avg"])
            alone += [
                r.queueing_delay
                for r in rigid.records
                if not kind[r.id] and r.queueing_delay is not None
            ]
            got = summarize(res)
            jcts.append(got["jct_avg"])
            rhos.append(got["fairness_rho_max"])
            spans.append(got["makespan"])
        out = {
            "case": "pollux-mixed", "load": float(load), "policy": "default",
            "jct_avg": statistics.mean(jcts), "published_pollux_all_elastic": published,
            **{f"{name}_wait_{stat}": fn(waits[flag])
               for flag, name in ((False, "rigid"), (True, "elastic"))
               for stat, fn in _WAIT_STATS},
            **{f"rigid_wait_{stat}_all_rigid": fn(alone)
               for stat, fn in _WAIT_STATS},
            "jct_avg_all_rigid": statistics.mean(rigid_jcts),
            "fairness_rho_max": max(r for r in rhos if r is not None),
            "makespan_mean": statistics.mean(s for s in spans if s is not None),
            "wall_s": time.perf_counter() - start, **machine(),
        }  # fmt: skip
        print(json.dumps(out), flush=True)


def _p99(xs: list[float]) -> float:
    return percentile(xs, 99)


# The statistics `pollux_mixed` reports of each group's waits.
_WAIT_STATS: Final = (("mean", statistics.mean), ("p99", _p99), ("max", max))


def _philly_week(window: tuple[str, str]) -> Workload:
    return read_workload(
        f"philly:{POLLUX / 'philly.csv'}", options={"start": window[0], "end": window[1]}
    )


def _week_rows(case: str, window: tuple[str, str], policies: tuple[str, ...]) -> None:
    """Simulate one Philly window on 64 x 8 under each policy; one JSON line each."""
    wl = _philly_week(window)
    cluster = parse_cluster("64x8")
    for policy in policies:
        start = time.perf_counter()
        summary = summarize(simulate(wl, cluster, FixedDuration(30.0), policy))
        out = {"case": case, "window": list(window), "policy": policy,
               "jobs": len(wl.jobs), **{k: summary[k] for k in KEYS},
               "wall_s": time.perf_counter() - start, **machine()}  # fmt: skip
        print(json.dumps(out), flush=True)


def philly_window() -> None:
    _week_rows("philly-window", WINDOW, ("fifo", "priority", "las", "tiresias", "drf", "default"))


def philly_full() -> None:
    wl = read_workload(f"philly:{POLLUX / 'philly.csv'}")
    for policy in ("default", "tiresias"):
        start = time.perf_counter()
        result = simulate(wl, parse_cluster("64x8"), FixedDuration(30.0), policy)
        wall = time.perf_counter() - start
        summary = summarize(result)
        out = {"case": "philly-full", "policy": policy, "jobs": len(wl.jobs),
               "rounds": result.rounds, "wall_s": wall, "jobs_per_s": len(wl.jobs) / wall,
               **{k: summary[k] for k in KEYS}, **machine()}  # fmt: skip
        print(json.dumps(out), flush=True)


def philly_gangs() -> None:
    """The whole Philly trace under `default`, with and without `reserve_gang_after_s`."""
    wl = read_workload(f"philly:{POLLUX / 'philly.csv'}")
    for variant, after in (("default", get_profile("default").reserve_gang_after_s),
                           ("no gang reservation", None)):  # fmt: skip
        profile = get_profile("default").with_overrides(reserve_gang_after_s=after)
        start = time.perf_counter()
        result = simulate(wl, parse_cluster("64x8"), FixedDuration(30.0), profile)
        summary = summarize(result)
        ended = [r for r in result.records if r.end is not None]
        big = [r for r in ended if r.gpus > 8]
        out = {"case": "philly-gangs", "variant": variant, "reserve_gang_after_s": after,
               "jobs": len(wl.jobs), "jobs_over_8_gpus": len(big),
               "queueing_delay_max": max(r.queueing_delay or 0.0 for r in ended),
               "over_8_gpus_queueing_delay_max": max(r.queueing_delay or 0.0 for r in big),
               "over_8_gpus_waited_in_all_max": max(r.end - r.submit - r.run_time for r in big),
               **{k: summary[k] for k in KEYS},
               "wall_s": time.perf_counter() - start, **machine()}  # fmt: skip
        print(json.dumps(out), flush=True)


ABLATION = {
    "default": {},
    "no blind reservation": {"reserve_unknown_after_s": None},
    "blind reservation at once": {"reserve_unknown_after_s": 0.0},
    "plain drf order": {"queue_order": "drf"},
    "before item 7": {"queue_order": "drf", "reserve_unknown_after_s": None},
}


def ablation() -> None:
    """`default` on the busy Philly week with one of issue 11 item 7's changes taken out."""
    wl = _philly_week(WINDOW)
    cluster = parse_cluster("64x8")
    for variant, changes in ABLATION.items():
        profile = get_profile("default").with_overrides(**changes)
        start = time.perf_counter()
        summary = summarize(simulate(wl, cluster, FixedDuration(30.0), profile))
        out = {"case": "ablation", "window": list(WINDOW), "variant": variant,
               "jobs": len(wl.jobs), **{k: summary[k] for k in KEYS},
               "wall_s": time.perf_counter() - start, **machine()}  # fmt: skip
        print(json.dumps(out), flush=True)


def weeks() -> None:
    for window in (*WEEKS, *EXTRA_WEEKS):
        _week_rows("weeks", window, ("tiresias", "default"))


def tie_break() -> None:
    cluster = parse_cluster("64x8")
    for window in WEEKS:
        wl = _philly_week(window)
        for policy in ("default", "drf"):
            for tie in ("declared", "smaller"):
                profile = get_profile(policy).with_overrides(queue_tie_break=tie)
                start = time.perf_counter()
                summary = summarize(simulate(wl, cluster, FixedDuration(30.0), profile))
                busy = summary["utilisation_while_waiting"]
                out = {"case": "tie-break", "window": list(window), "policy": policy,
                       "queue_tie_break": tie, "jobs": len(wl.jobs),
                       "idle_while_waiting": None if busy is None else 1.0 - busy,
                       **{k: summary[k] for k in KEYS},
                       "wall_s": time.perf_counter() - start, **machine()}  # fmt: skip
                print(json.dumps(out), flush=True)


CASES = {
    "pollux": pollux,
    "pollux-elastic": pollux_elastic,
    "pollux-elastic-events": lambda: pollux_elastic(0.0, "pollux-elastic-events"),
    "pollux-anticipate": pollux_anticipate,
    "pollux-mixed": pollux_mixed,
    "pollux-gap": pollux_gap,
    "pollux-shapes": pollux_shapes,
    "philly-window": philly_window,
    "philly-full": philly_full,
    "philly-gangs": philly_gangs,
    "tie-break": tie_break,
    "weeks": weeks,
    "ablation": ablation,
}

if __name__ == "__main__":
    wanted = sys.argv[1:] or list(CASES)
    unknown = [c for c in wanted if c not in CASES]
    if unknown:
        sys.exit(f"unknown case {unknown[0]!r}; known: {', '.join(CASES)}")
    if not POLLUX.is_dir():
        sys.exit(f"{POLLUX} not found: set TRAINYARD_SHARED to the shared data folder")
    for case in wanted:
        CASES[case]()
