"""Prometheus metrics of the control plane, through `prometheus_client`.

`PlatformMetrics` holds the platform's own metrics in one `CollectorRegistry` (queue lengths,
GPUs allocated and free, job state counts, scheduling-cycle latency, submissions, booking
conflicts) plus the client library's process metrics (CPU, memory, open files) and Python
runtime metrics. `PLATFORM` is the server's; tests make fresh ones with `platform_metrics()`.
`GET /metrics` renders it in the text format, or in OpenMetrics when the scraper asks for it
(`render(accept)`), with the accounting counters of `UsageCollector` appended.

The small wrappers keep call sites short and typed: `Counter.inc(amount, **labels)`,
`Gauge.replace(values)` (swap a whole labelled set at once, atomically for a scrape: a
custom collector, as `prometheus_client` gauges can only be cleared then set) and
`Histogram.observe(value, **labels)`; `value` / `count` read them back (for tests).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence

import prometheus_client
from prometheus_client import CollectorRegistry, exposition
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.registry import Collector

__all__ = [
    "PLATFORM",
    "Counter",
    "Gauge",
    "Histogram",
    "PlatformMetrics",
    "UsageCollector",
    "platform_metrics",
]

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Counter:
    """A value that only goes up (per label set)."""

    def __init__(
        self, registry: CollectorRegistry, name: str, help_text: str, labels: Sequence[str] = ()
    ) -> None:
        self.name = name.removesuffix("_total")
        self.labels = tuple(labels)
        self._registry = registry
        self._metric = prometheus_client.Counter(
            self.name, help_text, self.labels, registry=registry
        )

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        child = self._metric.labels(**labels) if self.labels else self._metric
        child.inc(amount)

    def value(self, **labels: str) -> float:
        found = self._registry.get_sample_value(f"{self.name}_total", labels)
        return found if found is not None else 0.0


class Histogram:
    """Observations in cumulative buckets, with their sum and count."""

    def __init__(
        self,
        registry: CollectorRegistry,
        name: str,
        help_text: str,
        buckets: Sequence[float] = LATENCY_BUCKETS,
    ) -> None:
        self.name = name
        self._registry = registry
        self._metric = prometheus_client.Histogram(
            name, help_text, buckets=tuple(buckets), registry=registry
        )

    def observe(self, value: float) -> None:
        self._metric.observe(value)

    def count(self) -> int:
        found = self._registry.get_sample_value(f"{self.name}_count")
        return int(found or 0)


class Gauge(Collector):
    """A labelled value set replaced whole (`replace`) or one value at a time (`set`)."""

    def __init__(
        self, registry: CollectorRegistry, name: str, help_text: str, labels: Sequence[str]
    ) -> None:
        self.name = name
        self.help = help_text
        self.labels = tuple(labels)
        self._values: dict[tuple[str, ...], float] = {}
        self._lock = threading.Lock()
        registry.register(self)

    def _key(self, labels: dict[str, str]) -> tuple[str, ...]:
        if set(labels) != set(self.labels):
            raise ValueError(f"{self.name} takes labels {self.labels}, got {tuple(labels)}")
        return tuple(str(labels[name]) for name in self.labels)

    def set(self, value: float, **labels: str) -> None:
        key = self._key(labels)
        with self._lock:
            self._values[key] = float(value)

    def replace(self, values: Iterable[tuple[dict[str, str], float]]) -> None:
        """Set every labelled value at once, dropping label sets not given (e.g. a queue
        that was deleted)."""
        new = {self._key(labels): float(v) for labels, v in values}
        with self._lock:
            self._values = new

    def value(self, **labels: str) -> float:
        with self._lock:
            return self._values.get(self._key(labels), 0.0)

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(self.name, self.help, labels=self.labels)
        with self._lock:
            items = sorted(self._values.items())
        for key, value in items:
            family.add_metric(list(key), value)
        yield family

    def describe(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(self.name, self.help, labels=self.labels)


class UsageCollector(Collector):
    """Accounting counters from the database, per tenant: GPU-, CPU- and memory-seconds of
    every finished run interval (`UsageRecord`), read at scrape time (cached `ttl_s`)."""

    def __init__(
        self, read: Callable[[], list[tuple[str, float, float, float]]], ttl_s: float = 10.0
    ) -> None:
        self.read = read
        self.ttl_s = ttl_s
        self._cache: tuple[float, list[tuple[str, float, float, float]]] | None = None

    def collect(self) -> Iterator[Metric]:
        now = time.monotonic()
        if self._cache is None or now - self._cache[0] > self.ttl_s:
            self._cache = (now, self.read())
        rows = self._cache[1]
        for index, (name, help_text) in enumerate((
            ("trainyard_usage_gpu_seconds", "GPU-seconds of finished run intervals."),
            ("trainyard_usage_cpu_seconds", "CPU-seconds of finished run intervals."),
            ("trainyard_usage_memory_gb_seconds", "GB-seconds of memory of finished runs."),
        )):  # fmt: skip
            family = CounterMetricFamily(name, help_text, labels=("tenant",))
            for tenant, *values in rows:
                family.add_metric([tenant], float(values[index]))
            yield family


class PlatformMetrics:
    """The platform's metrics, in one registry with the process and Python collectors."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        prometheus_client.ProcessCollector(registry=self.registry)
        prometheus_client.PlatformCollector(registry=self.registry)
        prometheus_client.GCCollector(registry=self.registry)
        r = self.registry
        self.queue_pending = Gauge(
            r, "trainyard_queue_pending_jobs", "Jobs waiting in each queue.", ("queue",)
        )
        self.queue_running = Gauge(
            r, "trainyard_queue_running_jobs", "Jobs running in each queue.", ("queue",)
        )
        self.gpus = Gauge(
            r, "trainyard_gpus", "GPUs by state (allocated or free) and type.", ("state", "type")
        )
        self.jobs = Gauge(r, "trainyard_jobs", "Jobs in each lifecycle state.", ("state",))
        self.job_gpus = Gauge(
            r, "trainyard_job_gpus",
            "GPUs each job holding devices runs at (an elastic job: its world size now).",
            ("job", "queue", "state"),
        )  # fmt: skip
        self.resizes = Counter(
            r, "trainyard_job_resizes_total", "Live resizes of running elastic jobs.", ("kind",)
        )
        self.cycle_seconds = Histogram(
            r, "trainyard_scheduling_cycle_seconds", "Wall time of one scheduling cycle."
        )
        self.submissions = Counter(
            r, "trainyard_job_submissions_total", "Jobs submitted, by outcome.", ("outcome",)
        )
        self.step_failures = Counter(
            r, "trainyard_scheduler_step_failures_total",
            "Scheduler steps that raised (the server's log has each traceback). While it "
            "rises nothing is scheduled: alert on it.",
        )  # fmt: skip
        self.booking_conflicts = Counter(
            r,
            "trainyard_booking_conflicts_total",
            "Bug signals: a decision or a launch that would put a job on a device (or CPU and "
            "memory) a live job still holds, by where it was caught (decision or launch).",
            ("stage",),
        )

    def render(self, accept: str = "", extra: CollectorRegistry | None = None) -> tuple[bytes, str]:
        """The exposition (body, content type): OpenMetrics when `accept` asks for it."""
        registries = [self.registry] + ([extra] if extra is not None else [])
        if "application/openmetrics-text" in accept:
            parts = [openmetrics.generate_latest(reg) for reg in registries]  # type: ignore[no-untyped-call]
            body = b"".join(p.removesuffix(b"# EOF\n") for p in parts) + b"# EOF\n"
            return body, openmetrics.CONTENT_TYPE_LATEST
        # the 0.0.4 text format: what every Prometheus version reads (our names are ASCII)
        body = b"".join(prometheus_client.generate_latest(reg) for reg in registries)
        return body, exposition.CONTENT_TYPE_PLAIN_0_0_4


def platform_metrics() -> PlatformMetrics:
    """A fresh set of the platform's metrics (tests; one server uses `PLATFORM`)."""
    return PlatformMetrics()


PLATFORM = platform_metrics()
