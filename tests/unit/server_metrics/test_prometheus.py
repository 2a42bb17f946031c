"""The platform's metrics through prometheus_client (trainyard.server.metrics): the text
format and OpenMetrics, process metrics, atomic gauge replacement, concurrent counters and
the accounting counters."""

from __future__ import annotations

import threading

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from trainyard.server.metrics import Counter, Gauge, Histogram, UsageCollector, platform_metrics


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_platform_metrics_render_in_both_formats_with_process_metrics() -> None:
    m = platform_metrics()
    m.queue_pending.set(2, queue='res"earch')
    m.gpus.set(6, state="allocated", type="H100")
    m.gpus.set(2, state="free", type="H100")
    m.jobs.set(1, state="RUNNING")
    for v in (0.0005, 0.004, 2.0):
        m.cycle_seconds.observe(v)
    m.submissions.inc(outcome="accepted")
    m.submissions.inc(2, outcome="accepted")
    body, media = m.render()
    assert media.startswith("text/plain; version=0.0.4")
    text = body.decode()
    found = _samples(text)
    assert found[("trainyard_gpus", (("state", "free"), ("type", "H100")))] == 2
    assert found[("trainyard_queue_pending_jobs", (("queue", 'res"earch'),))] == 2
    assert found[("trainyard_job_submissions_total", (("outcome", "accepted"),))] == 3
    assert found[("trainyard_scheduling_cycle_seconds_count", ())] == 3
    assert found[("trainyard_scheduling_cycle_seconds_bucket", (("le", "0.001"),))] == 1
    assert "process_resident_memory_bytes" in text and "python_info" in text
    for name in ("trainyard_queue_running_jobs", "trainyard_jobs",
                 "trainyard_booking_conflicts_total"):  # fmt: skip
        assert f"# TYPE {name} " in text
    om, om_media = m.render("application/openmetrics-text; version=1.0.0")
    assert om_media.startswith("application/openmetrics-text")
    assert om.endswith(b"# EOF\n") and om.count(b"# EOF") == 1
    assert m.submissions.value(outcome="accepted") == 3 and m.cycle_seconds.count() == 3


def test_bad_labels_and_values_are_refused() -> None:
    reg = CollectorRegistry()
    c = Counter(reg, "ok_total", "x", ("a",))
    with pytest.raises(ValueError):
        c.inc(-1, a="x")
    with pytest.raises(ValueError):
        c.inc(b="x")
    with pytest.raises(ValueError):
        Histogram(reg, "h", "x", buckets=(1.0, 0.5))
    g = Gauge(reg, "g", "x", ("queue",))
    with pytest.raises(ValueError):
        g.set(1, other="x")
    with pytest.raises(ValueError):
        Gauge(reg, "g", "y", ("queue",))  # registered twice


def test_gauge_replace_drops_vanished_label_sets() -> None:
    reg = CollectorRegistry()
    g = Gauge(reg, "q", "x", ("queue",))
    g.set(1, queue="a")
    g.replace([({"queue": "b"}, 2.0)])
    assert g.value(queue="a") == 0.0 and g.value(queue="b") == 2.0
    assert reg.get_sample_value("q", {"queue": "a"}) is None
    assert reg.get_sample_value("q", {"queue": "b"}) == 2.0


def test_concurrent_updates_are_not_lost() -> None:
    c = Counter(CollectorRegistry(), "n_total", "x")

    def work() -> None:
        for _ in range(5000):
            c.inc()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert c.value() == 20000


def test_usage_counters_come_from_the_accounting() -> None:
    calls = []

    def read() -> list[tuple[str, float, float, float]]:
        calls.append(1)
        return [("acme", 7200.0, 100.0, 50.0)]

    reg = CollectorRegistry()
    reg.register(UsageCollector(read))
    assert reg.get_sample_value("trainyard_usage_gpu_seconds_total", {"tenant": "acme"}) == 7200
    assert reg.get_sample_value("trainyard_usage_cpu_seconds_total", {"tenant": "acme"}) == 100
    assert len(calls) == 1  # cached between scrapes
