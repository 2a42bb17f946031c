"""Prometheus metrics of the control plane, in the text exposition format (version 0.0.4).

This module owns the metric types (`Counter`, `Gauge`, `Histogram`, each with optional labels),
the `Registry` that renders them for `GET /metrics`, and `PLATFORM`, the registry of the
platform's own metrics (queue lengths, GPUs allocated and free, job state counts, scheduling
cycle latency, submissions). It is small on purpose: no client library, no global state other
than `PLATFORM`, thread-safe (the API and the scheduler loop update metrics concurrently).
"""

from __future__ import annotations

import math
import re
import threading
from bisect import bisect_left
from collections.abc import Iterable, Sequence

__all__ = [
    "PLATFORM",
    "Counter",
    "Gauge",
    "Histogram",
    "PlatformMetrics",
    "Registry",
    "platform_metrics",
]

_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if value != int(value) else str(int(value))


class _Metric:
    kind = ""

    def __init__(self, name: str, help_text: str, labels: Sequence[str] = ()) -> None:
        if not _NAME.match(name):
            raise ValueError(f"metric name {name!r} is not a valid Prometheus name")
        for label in labels:
            if not _LABEL.match(label) or label.startswith("__"):
                raise ValueError(f"label name {label!r} is not a valid Prometheus label")
        self.name = name
        self.help = help_text
        self.labels = tuple(labels)
        self._lock = threading.Lock()

    def _key(self, labels: dict[str, str]) -> tuple[str, ...]:
        if set(labels) != set(self.labels):
            raise ValueError(f"{self.name} takes labels {self.labels}, got {tuple(labels)}")
        return tuple(str(labels[name]) for name in self.labels)

    def _labelled(self, key: tuple[str, ...], extra: str = "") -> str:
        pairs = [f'{n}="{_escape(v)}"' for n, v in zip(self.labels, key, strict=True)]
        if extra:
            pairs.append(extra)
        return "{" + ",".join(pairs) + "}" if pairs else ""

    def samples(self) -> Iterable[str]:
        raise NotImplementedError

    def render(self) -> str:
        head = [f"# HELP {self.name} {_escape(self.help)}", f"# TYPE {self.name} {self.kind}"]
        return "\n".join([*head, *self.samples()])


class _Single(_Metric):
    """A metric with one value per label set (counters and gauges)."""

    def __init__(self, name: str, help_text: str, labels: Sequence[str] = ()) -> None:
        super().__init__(name, help_text, labels)
        self._values: dict[tuple[str, ...], float] = {}

    def value(self, **labels: str) -> float:
        with self._lock:
            return self._values.get(self._key(labels), 0.0)

    def samples(self) -> Iterable[str]:
        with self._lock:
            items = sorted(self._values.items())
        return [f"{self.name}{self._labelled(k)} {_number(v)}" for k, v in items]


class Counter(_Single):
    """A value that only goes up (per label set)."""

    kind = "counter"

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        if amount < 0:
            raise ValueError("a counter only goes up")
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount


class Gauge(_Single):
    """A value that goes up and down; `replace` swaps the whole labelled set at once."""

    kind = "gauge"

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


class Histogram(_Metric):
    """Observations in cumulative buckets, with their sum and count."""

    kind = "histogram"

    def __init__(
        self,
        name: str,
        help_text: str,
        labels: Sequence[str] = (),
        buckets: Sequence[float] = LATENCY_BUCKETS,
    ) -> None:
        super().__init__(name, help_text, labels)
        if list(buckets) != sorted(set(buckets)) or not buckets:
            raise ValueError("histogram buckets must be increasing and distinct")
        self.buckets = tuple(float(b) for b in buckets)
        self._counts: dict[tuple[str, ...], list[int]] = {}
        self._sums: dict[tuple[str, ...], float] = {}

    def observe(self, value: float, **labels: str) -> None:
        key = self._key(labels)
        index = bisect_left(self.buckets, value)
        with self._lock:
            counts = self._counts.setdefault(key, [0] * (len(self.buckets) + 1))
            counts[index] += 1
            self._sums[key] = self._sums.get(key, 0.0) + value

    def count(self, **labels: str) -> int:
        with self._lock:
            return sum(self._counts.get(self._key(labels), []))

    def samples(self) -> Iterable[str]:
        with self._lock:
            items = sorted((k, list(c), self._sums[k]) for k, c in self._counts.items())
        out = []
        for key, counts, total in items:
            running = 0
            for bound, n in zip((*self.buckets, math.inf), counts, strict=True):
                running += n
                le = f'le="{_number(bound)}"'
                out.append(f"{self.name}_bucket{self._labelled(key, le)} {running}")
            out.append(f"{self.name}_sum{self._labelled(key)} {_number(total)}")
            out.append(f"{self.name}_count{self._labelled(key)} {running}")
        return out


class Registry:
    """Named metrics rendered together (one `# HELP`/`# TYPE` block each)."""

    def __init__(self) -> None:
        self._metrics: dict[str, _Metric] = {}
        self._lock = threading.Lock()

    def add(self, metric: _Metric) -> None:
        with self._lock:
            if metric.name in self._metrics:
                raise ValueError(f"metric {metric.name} is registered twice")
            self._metrics[metric.name] = metric

    def render(self) -> str:
        """The whole registry in the text exposition format (ends with a newline)."""
        with self._lock:
            metrics = [self._metrics[name] for name in sorted(self._metrics)]
        return "\n".join(m.render() for m in metrics) + "\n"


class PlatformMetrics:
    """The platform's metrics, registered in one `Registry`."""

    def __init__(self) -> None:
        self.registry = Registry()
        self.queue_pending = Gauge(
            "trainyard_queue_pending_jobs", "Jobs waiting in each queue.", ("queue",)
        )
        self.queue_running = Gauge(
            "trainyard_queue_running_jobs", "Jobs running in each queue.", ("queue",)
        )
        self.gpus = Gauge(
            "trainyard_gpus", "GPUs by state (allocated or free) and type.", ("state", "type")
        )
        self.jobs = Gauge("trainyard_jobs", "Jobs in each lifecycle state.", ("state",))
        self.cycle_seconds = Histogram(
            "trainyard_scheduling_cycle_seconds", "Wall time of one scheduling cycle."
        )
        self.submissions = Counter(
            "trainyard_job_submissions_total", "Jobs submitted, by outcome.", ("outcome",)
        )
        self.booking_conflicts = Counter(
            "trainyard_booking_conflicts_total",
            "Bug signals: a decision or a launch that would put a job on a device (or CPU and "
            "memory) a live job still holds, by where it was caught (decision or launch).",
            ("stage",),
        )
        for metric in (
            self.booking_conflicts,
            self.queue_pending,
            self.queue_running,
            self.gpus,
            self.jobs,
            self.cycle_seconds,
            self.submissions,
        ):
            self.registry.add(metric)


def platform_metrics() -> PlatformMetrics:
    """A fresh set of the platform's metrics (tests; one server uses `PLATFORM`)."""
    return PlatformMetrics()


PLATFORM = platform_metrics()
