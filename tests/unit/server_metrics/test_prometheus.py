"""Prometheus text exposition of the platform's metrics (trainyard.server.metrics)."""

from __future__ import annotations

import threading

import pytest

from trainyard.server.metrics import Counter, Gauge, Histogram, Registry, platform_metrics


def test_counter_gauge_and_histogram_render_the_text_format() -> None:
    reg = Registry()
    c = Counter("t_submissions_total", "Submitted jobs.", ("outcome",))
    g = Gauge("t_queue_pending_jobs", 'Waiting "jobs".', ("queue",))
    h = Histogram("t_cycle_seconds", "Cycle time.", buckets=(0.01, 0.1))
    for m in (c, g, h):
        reg.add(m)
    c.inc(outcome="accepted")
    c.inc(2, outcome="accepted")
    c.inc(outcome="rejected")
    g.set(3, queue='res"earch')
    for v in (0.005, 0.05, 0.05, 2.0):
        h.observe(v)
    text = reg.render()
    assert text.endswith("\n")
    lines = text.splitlines()
    # Blocks sorted by name; HELP escapes quotes only in label values (not in help text).
    assert lines[0] == "# HELP t_cycle_seconds Cycle time."
    assert "# TYPE t_cycle_seconds histogram" in lines
    # Cumulative buckets: <=0.01: 1, <=0.1: 3, +Inf: 4; sum 2.105, count 4.
    assert 't_cycle_seconds_bucket{le="0.01"} 1' in lines
    assert 't_cycle_seconds_bucket{le="0.1"} 3' in lines
    assert 't_cycle_seconds_bucket{le="+Inf"} 4' in lines
    assert "t_cycle_seconds_count 4" in lines
    total = next(line for line in lines if line.startswith("t_cycle_seconds_sum"))
    assert float(total.split()[1]) == pytest.approx(2.105)
    assert 't_queue_pending_jobs{queue="res\\"earch"} 3' in lines
    assert 't_submissions_total{outcome="accepted"} 3' in lines
    assert 't_submissions_total{outcome="rejected"} 1' in lines


def test_bad_names_labels_and_values_are_refused() -> None:
    with pytest.raises(ValueError):
        Counter("1bad", "x")
    with pytest.raises(ValueError):
        Gauge("ok", "x", ("__reserved",))
    c = Counter("ok_total", "x", ("a",))
    with pytest.raises(ValueError):
        c.inc(-1, a="x")
    with pytest.raises(ValueError):
        c.inc(b="x")
    with pytest.raises(ValueError):
        Histogram("h", "x", buckets=(1.0, 0.5))
    reg = Registry()
    reg.add(Gauge("g", "x"))
    with pytest.raises(ValueError):
        reg.add(Gauge("g", "y"))


def test_gauge_replace_drops_vanished_label_sets() -> None:
    g = Gauge("q", "x", ("queue",))
    g.set(1, queue="a")
    g.replace([({"queue": "b"}, 2.0)])
    assert g.value(queue="a") == 0.0 and g.value(queue="b") == 2.0
    assert 'queue="a"' not in "\n".join(g.samples())


def test_concurrent_updates_are_not_lost() -> None:
    c = Counter("n_total", "x")

    def work() -> None:
        for _ in range(5000):
            c.inc()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert c.value() == 20000


def test_platform_metrics_cover_the_issue_list() -> None:
    m = platform_metrics()
    m.queue_pending.set(2, queue="default")
    m.gpus.set(6, state="allocated", type="H100")
    m.gpus.set(2, state="free", type="H100")
    m.jobs.set(1, state="RUNNING")
    m.cycle_seconds.observe(0.004)
    m.submissions.inc(outcome="accepted")
    text = m.registry.render()
    for name in (
        "trainyard_queue_pending_jobs",
        "trainyard_queue_running_jobs",
        "trainyard_gpus",
        "trainyard_jobs",
        "trainyard_scheduling_cycle_seconds",
        "trainyard_job_submissions_total",
    ):
        assert f"# TYPE {name} " in text
    assert 'trainyard_gpus{state="free",type="H100"} 2' in text
