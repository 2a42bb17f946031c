"""`Reporter` against a real HTTP server (``http.server`` in a thread) that records what it
gets: one aggregate per interval, the exact body and the bearer token, rank 0 only, nothing
(and one line on stderr) outside trainyard, failures that never reach the training loop."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from trainyard import sdk
from trainyard.sdk.report import OFF_LINE

WAIT_S = 120.0
FIELDS = {
    "attempt",
    "gpus",
    "nodes",
    "world_size",
    "batch",
    "step_time",
    "steps",
    "step",
    "samples",
    "loss",
    "grad_sqr",
    "grad_var",
    "remaining_samples",
}


class Recorder:
    def __init__(self, status: int = 204) -> None:
        self.requests: list[dict[str, Any]] = []
        self.status = status
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                recorder.requests.append(
                    {
                        "path": self.path,
                        "auth": self.headers.get("Authorization"),
                        "type": self.headers.get("Content-Type"),
                        "body": json.loads(self.rfile.read(length)),
                    }
                )
                self.send_response(recorder.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def bodies(self) -> list[dict[str, Any]]:
        return [r["body"] for r in self.requests]


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    recorder = Recorder()
    monkeypatch.setenv("TRAINYARD_API_URL", recorder.url + "/")
    monkeypatch.setenv("TRAINYARD_JOB_ID", "job-7")
    monkeypatch.setenv("TRAINYARD_TOKEN", "s3cret")
    monkeypatch.setenv("TRAINYARD_ATTEMPT", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("GROUP_WORLD_SIZE", "2")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    yield recorder
    recorder.server.shutdown()
    recorder.server.server_close()


def test_many_steps_make_one_report_per_interval(server: Recorder) -> None:
    reporter = sdk.Reporter(min_interval_s=3600.0)
    for i in range(1000):
        left = (1500 - i - 1) * 256 if i < 999 else None  # the last step does not say
        reporter.step(0.5 if i % 2 else 1.5, batch=256, loss=1.0 / (i + 1), grad_sqr=2.0,
                      remaining_samples=left)  # fmt: skip
    assert server.requests == []  # the interval has not passed
    reporter.close()
    reporter.close()
    reporter.step(1.0, batch=256)  # after close: nothing
    assert len(server.requests) == 1
    request = server.requests[0]
    assert request["path"] == "/v1/jobs/job-7/reports"
    assert request["auth"] == "Bearer s3cret" and request["type"] == "application/json"
    body = request["body"]
    assert set(body) == FIELDS
    assert body == {
        "attempt": 2,
        "gpus": 8,  # 4 ranks x 2 devices each
        "nodes": 2,
        "world_size": 4,
        "batch": 256,
        "step_time": pytest.approx(1.0),
        "steps": 1000,
        "step": 1000,
        "samples": 256_000,
        "loss": pytest.approx(0.001),
        "grad_sqr": 2.0,
        "grad_var": None,
        "remaining_samples": 501 * 256,  # the last value given
    }


def test_reports_aggregate_the_steps_since_the_last(server: Recorder) -> None:
    reporter = sdk.Reporter(min_interval_s=0.05)
    total = 0
    deadline = time.monotonic() + WAIT_S
    while len(server.requests) < 3 and time.monotonic() < deadline:
        reporter.step(0.25, batch=64, samples=60, loss=float("nan"))
        total += 1
        time.sleep(0.01)
    reporter.close()
    bodies = server.bodies()
    assert len(bodies) >= 3
    assert len(bodies) <= total  # never more reports than steps
    assert sum(b["steps"] for b in bodies) == total
    assert [b["step"] for b in bodies] == sorted({b["step"] for b in bodies})
    assert bodies[-1]["step"] == total and bodies[-1]["samples"] == 60 * total
    assert all(b["step_time"] == pytest.approx(0.25) and b["loss"] is None for b in bodies)


def test_only_rank_0_reports(server: Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    reporter = sdk.Reporter(min_interval_s=0.0)
    assert not reporter.enabled
    for _ in range(10):
        reporter.step(0.1, batch=8)
    reporter.close()
    assert server.requests == []


def test_outside_trainyard_every_call_is_a_no_op(capsys: pytest.CaptureFixture[str]) -> None:
    reporter = sdk.Reporter(min_interval_s=0.0)
    for _ in range(100):
        reporter.step(0.1, batch=8, loss=1.0)
    reporter.close()
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [OFF_LINE] and captured.out == ""


def test_failures_never_reach_the_loop_and_are_told_once(
    server: Recorder, capsys: pytest.CaptureFixture[str]
) -> None:
    server.status = 500
    reporter = sdk.Reporter(min_interval_s=0.0)
    deadline = time.monotonic() + WAIT_S
    while len(server.requests) < 3 and time.monotonic() < deadline:
        reporter.step(0.1, batch=8)
        time.sleep(0.01)
    reporter.step("not a number", batch=8)  # type: ignore[arg-type]
    reporter.close()
    assert len(server.requests) >= 3
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("trainyard.sdk: a report to ") and "500" in lines[0]


def test_an_unreachable_server_is_harmless(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TRAINYARD_API_URL", "http://127.0.0.1:9")  # discard: refused
    monkeypatch.setenv("TRAINYARD_JOB_ID", "j")
    reporter = sdk.Reporter(min_interval_s=0.0)
    reporter.step(0.1, batch=8)
    reporter.close()
    err = capsys.readouterr().err
    assert err.count("trainyard.sdk:") == 1 and "failed" in err


def test_a_step_time_that_is_not_a_duration_is_measured_instead(
    server: Recorder, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by an outside review: one NaN, negative or huge step time went into the
    window's mean, the server refused the whole report (422), progress stopped, and the
    training job was killed as hung. Now such a time is replaced by the time between steps,
    measured here, and the step counts; values the server refuses are never sent."""
    reporter = sdk.Reporter(min_interval_s=3600.0)
    reporter.step(float("nan"), batch=8)  # the first: the time since the reporter started
    time.sleep(0.05)
    for bad in (float("nan"), -0.2, 1e9, 0.0):
        reporter.step(bad, batch=8, grad_sqr=-1.0, grad_var=float("inf"), samples=-5)
        time.sleep(0.05)
    reporter.step(0.1, batch=8)
    reporter.close()
    (body,) = server.bodies()
    assert body["step"] == 6 and body["steps"] == 6
    assert 0.03 <= body["step_time"] <= 5.0  # measured: about 0.05 s a step, and 0.1 given
    assert body["grad_sqr"] is None and body["grad_var"] is None and body["samples"] == 16
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "is not a duration" in lines[0], lines


def test_a_batch_below_one_drops_the_step(server: Recorder) -> None:
    reporter = sdk.Reporter(min_interval_s=3600.0)
    reporter.step(0.1, batch=0)
    reporter.step(0.1, batch=4)
    reporter.close()
    (body,) = server.bodies()
    assert body["step"] == 1 and body["batch"] == 4


def test_resume_continues_the_totals_of_the_checkpoint(server: Recorder) -> None:
    """A job restarted (or resized) from its checkpoint at step 1,200 reports steps 1,201 on,
    not 1 on; `resume` twice is the same as once, and a bad value leaves the totals alone."""
    reporter = sdk.Reporter(min_interval_s=3600.0)
    reporter.resume(1200, samples=307_200)
    reporter.resume(1200, samples=307_200)
    reporter.resume(-1)  # told once on stderr, not recorded
    for _ in range(10):
        reporter.step(0.5, batch=256)
    reporter.close()
    body = server.bodies()[-1]
    assert body["step"] == 1210 and body["samples"] == 307_200 + 2560
    assert body["steps"] == 10


def test_resume_without_samples_continues_the_step_only(server: Recorder) -> None:
    reporter = sdk.Reporter(min_interval_s=3600.0)
    reporter.resume(40)
    reporter.step(0.5, batch=8)
    reporter.close()
    body = server.bodies()[-1]
    assert body["step"] == 41 and body["samples"] == 8
