"""Training progress sent to the trainyard server: `Reporter`.

This module owns the report a job sends (its JSON body, below) and how often it is sent. The
training loop calls `Reporter.step` once per optimizer step; the call only adds to counters.
A background thread POSTs one aggregate of the steps since the last report to
``{TRAINYARD_API_URL}/v1/jobs/{TRAINYARD_JOB_ID}/reports`` (header
``Authorization: Bearer {TRAINYARD_TOKEN}``) at most every ``min_interval_s`` seconds, and a
last one at `Reporter.close` (also called at interpreter exit)::

    {"attempt": 0, "gpus": 8, "nodes": 1, "world_size": 8, "batch": 256,
     "step_time": 0.31, "steps": 16, "step": 1200, "samples": 307200,
     "loss": 0.52, "grad_sqr": null, "grad_var": null, "remaining_samples": 2252800}

``gpus`` is ``WORLD_SIZE`` times the GPUs of a rank (`env.gpus_per_rank`: its
``TRAINYARD_RANK_DEVICES`` or else ``CUDA_VISIBLE_DEVICES`` entries, at least 1); ``nodes``
is ``GROUP_WORLD_SIZE``; ``batch`` the global batch of the last step; ``step_time`` the mean
seconds per step over the ``steps`` aggregated; ``step`` and ``samples`` the totals since the
reporter started, added to those of the checkpoint the job resumed from when it says so
(`Reporter.resume`: then they do not fall back to 0 on a restart or resize); ``loss``,
``grad_sqr`` and ``grad_var`` the last values given (null when never given or not finite);
``remaining_samples`` the last number of samples the job said it still has to train (null
when it never said: a loop that knows its total steps passes ``(total_steps - step) *
batch``; the scheduler then gives GPUs first where they bring a job nearest its end,
`core/actions/rebalance.py`).

Only rank 0 reports. Outside trainyard (`env.under_trainyard` false) every call is a no-op
and the constructor says so in one line on stderr. Reports never raise into the training
loop: a failed POST (5 s timeout) is dropped, and the first failure is written once to stderr.
Standard library only.
"""

from __future__ import annotations

import atexit
import json
import math
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from trainyard.sdk import env

TIMEOUT_S = 5.0
# the server is reached directly: a job's HTTP(S)_PROXY is meant for the outside world
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
OFF_LINE = "trainyard.sdk: not running under trainyard; reports are off"


def _finite(value: Any) -> float | None:
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


# what the server takes as a step's duration (`ReportIn.step_time`), seconds
STEP_TIME_RANGE = (1e-6, 86_400.0)


def _nonnegative(value: Any) -> float | None:
    number = _finite(value)
    return number if number is not None and number >= 0 else None


@dataclass
class _Window:
    """The steps since the last report (`timed`: those whose duration is known)."""

    steps: int = 0
    timed: int = 0
    time_s: float = 0.0
    batch: int = 0
    loss: float | None = None
    grad_sqr: float | None = None
    grad_var: float | None = None
    remaining: int | None = None


class Reporter:
    """Aggregates training steps and reports them to the server in the background."""

    def __init__(self, min_interval_s: float = 5.0) -> None:
        if not min_interval_s >= 0:
            raise ValueError(f"min_interval_s: expected >= 0, got {min_interval_s}")
        self.min_interval_s = float(min_interval_s)
        self.enabled = env.under_trainyard() and env.rank() == 0
        if not env.under_trainyard():
            print(OFF_LINE, file=sys.stderr, flush=True)
        self._cond = threading.Condition()
        self._window = _Window()
        self._total_steps = 0
        self._total_samples = 0
        self._base = (0, 0)  # the totals of the checkpoint resumed from (`resume`)
        self._closing = False
        self._closed = False
        self._warned = False
        self._thread: threading.Thread | None = None
        if not self.enabled:
            return
        url, job = env.api_url(), env.job_id()
        assert url is not None and job is not None  # under_trainyard
        self.url = f"{url}/v1/jobs/{urllib.parse.quote(job, safe='')}/reports"
        self._headers = {"Content-Type": "application/json"}
        token = env.token()
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        world = env.world_size()
        self._fixed = {
            "attempt": env.attempt(),
            "gpus": world * env.gpus_per_rank(),
            "nodes": env.nodes(),
            "world_size": world,
        }
        self._last_sent = self._last_step_at = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="trainyard-reports", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def step(
        self,
        step_time: float,
        batch: int,
        samples: int | None = None,
        loss: float | None = None,
        grad_sqr: float | None = None,
        grad_var: float | None = None,
        remaining_samples: int | None = None,
    ) -> None:
        """Record one training step: its duration in seconds, its global batch, the samples
        it consumed (default: `batch`) and, when known, its loss, the gradient statistics
        (mean squared norm and variance, as goodput-aware schedulers use them) and the
        samples it still has to train to its end. Never raises; a value that is not a
        number, or a batch below 1, is reported once on stderr and the step is dropped. A
        step time that is not a duration (NaN, negative, zero, over a day) is replaced by the
        time since the previous step, measured here (the step still counts as progress: one
        bad value must not make a training job look hung); loss and gradient statistics that
        are not finite (or, for the statistics, negative) are left out."""
        if not self.enabled:
            return
        now = time.monotonic()
        since, self._last_step_at = now - self._last_step_at, now
        try:
            seconds, global_batch = float(step_time), int(batch)
            if global_batch < 1:
                raise ValueError(f"batch must be >= 1, got {global_batch}")
            used = max(0, int(samples)) if samples is not None else global_batch
            values = _finite(loss), _nonnegative(grad_sqr), _nonnegative(grad_var)
            left = max(0, int(remaining_samples)) if remaining_samples is not None else None
        except (TypeError, ValueError, OverflowError) as error:
            self._warn(f"a step was not recorded: {error}")
            return
        low, high = STEP_TIME_RANGE
        if not low <= seconds <= high:
            self._warn(
                f"step_time {seconds!r} is not a duration of {low:g} s to a day; the time "
                "between steps is used instead"
            )
            seconds = since if low <= since <= high else math.nan
        with self._cond:
            w = self._window
            w.steps += 1
            if not math.isnan(seconds):
                w.timed += 1
                w.time_s += seconds
            w.batch = global_batch
            w.loss, w.grad_sqr, w.grad_var = (
                new if new is not None else old
                for new, old in zip(values, (w.loss, w.grad_sqr, w.grad_var), strict=True)
            )
            if left is not None:
                w.remaining = left
            self._total_steps += 1
            self._total_samples += used
            # the first step of a window starts the thread's timer; a due one wakes it
            if w.timed == 1 or time.monotonic() - self._last_sent >= self.min_interval_s:
                self._cond.notify()

    def resume(self, step: int, samples: int | None = None) -> None:
        """Continue the totals (`step`, `samples`) from a checkpoint: call it after loading
        one, with its step and, when the job keeps it, the samples trained to it. Then the
        reported step does not fall back to 0 on every restart or resize. Never raises; a
        value that is not a count is told once on stderr and left out."""
        if not self.enabled:
            return
        try:
            steps, seen = int(step), None if samples is None else int(samples)
            if steps < 0 or (seen is not None and seen < 0):
                raise ValueError(f"step and samples must be >= 0, got {step}, {samples}")
        except (TypeError, ValueError, OverflowError) as error:
            self._warn(f"resume was not recorded: {error}")
            return
        with self._cond:  # what this process counts is added to the checkpoint's totals
            self._base = (steps, seen if seen is not None else self._base[1])

    def close(self) -> None:
        """Send what is left and stop the thread (waits at most a little over the POST
        timeout). Later calls, and `step` after it, do nothing."""
        thread = self._thread
        if thread is None or self._closed:
            return
        with self._cond:
            self._closing = True
            self._cond.notify()
        thread.join(timeout=TIMEOUT_S + 5.0)
        self._closed = True
        self.enabled = False
        atexit.unregister(self.close)

    # ---- the sending thread ------------------------------------------------------------

    def _take(self) -> dict[str, Any] | None:
        """The body for the steps since the last report (and a fresh window), or None."""
        w = self._window
        if w.timed == 0:  # (a first step without a duration waits for the next one's)
            return None
        self._window = _Window(
            loss=w.loss, grad_sqr=w.grad_sqr, grad_var=w.grad_var, remaining=w.remaining
        )
        self._last_sent = time.monotonic()
        return {
            **self._fixed,
            "batch": w.batch,
            "step_time": w.time_s / w.timed,
            "steps": w.timed,
            "step": self._base[0] + self._total_steps,
            "samples": self._base[1] + self._total_samples,
            "loss": w.loss,
            "grad_sqr": w.grad_sqr,
            "grad_var": w.grad_var,
            "remaining_samples": w.remaining,
        }

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    due = self._last_sent + self.min_interval_s - time.monotonic()
                    if self._closing or (self._window.timed and due <= 0):
                        break
                    self._cond.wait(timeout=max(due, 0.05) if self._window.timed else None)
                body = self._take()
                last = self._closing
            if body is not None:
                self._post(body)
            if last:
                return

    def _post(self, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        request = urllib.request.Request(self.url, data=data, headers=self._headers)
        try:
            with _OPENER.open(request, timeout=TIMEOUT_S) as response:
                response.read()
        except urllib.error.HTTPError as error:
            if error.code in (401, 409) and self._closing:
                return  # the job is being stopped (its token ends with its run): nothing lost
            self._warn(f"a report to {self.url} failed: {error}")
        except Exception as error:  # never into the training loop
            self._warn(f"a report to {self.url} failed: {error}")

    def _warn(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            print(f"trainyard.sdk: {message} (further failures are not shown)", file=sys.stderr)
