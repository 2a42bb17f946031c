"""Platform benchmarks (one JSON object per case on stdout): `python bench/platform_load.py`.

Cases (all of them without arguments):

* ``submit``: a real `trainyard up` server process on a fresh embedded SQLite database, and
  `--clients` client processes, each keeping `--concurrency` requests in flight over HTTP
  keep-alive connections, submit `--jobs` job specs (JSON) through the REST API. The
  clients speak minimal HTTP/1.1 themselves (as wrk does) so that they leave the CPU to
  the server; the CPU seconds of both sides are reported. Reported: submissions per
  second sustained (accepted jobs / wall seconds from the first request to the last answer),
  API latency p50/p99/max over every request, and a loss check: the number of job rows in
  the database afterwards (read directly from SQLite), which must equal the accepted count
  with every returned id distinct. The jobs ask for a GPU the node does not have (`--virtual-
  gpus 0`; `wait_for_capacity: true`, or admission would refuse them), so they stay PENDING
  and nothing runs (the per-tenant queued-jobs limit is raised to let them all in): the
  scheduler loop still wakes on the submits and schedules the growing queue meanwhile, as it
  would in production.
* ``start``: on an idle server with one virtual GPU, `--starts` jobs one after another, each
  running `sh -c 'date +%s.%N > $TRAINYARD_CHECKPOINT_DIR/stamp'` (as a uid of its own when
  the benchmark runs as root, see docs/security.md): submit-to-process-start is the time
  from just before the POST to the timestamp the job's own process writes when it starts
  (the rank wrapper's interpreter start included). p50/p99/max.

Run from the repository root with the project's venv: `.venv/bin/python bench/platform_load.py`.
Timings are wall-clock on this machine; clients and server share its CPUs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from trainyard.exec.procfs import free_port
from trainyard.stats import percentile

SPEC = {
    "name": "bench", "queue": "default", "command": ["true"], "gpus": 1, "cpus": 0.1,
    "wait_for_capacity": True,  # admission would refuse a GPU no node has (issue 14)
}  # fmt: skip


def _ms(values: list[float], p: float) -> float:
    """`trainyard.stats.percentile` `p` (nearest rank) of seconds, in milliseconds."""
    return round(1000 * (percentile(values, p) or float("nan")), 2)


class ServerProcess:
    """`trainyard up` in a subprocess with its own home; stopped with SIGTERM."""

    def __init__(self, home: Path, virtual_gpus: int) -> None:
        self.home = home
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "TRAINYARD_HOME": str(home), "TRAINYARD_CONFIG": str(home / "c.json")}
        argv = [sys.executable, "-m", "trainyard.cli.main", "up", "--port", str(self.port)]
        argv += ["--virtual-gpus", str(virtual_gpus), "--max-queued-jobs", "1000000"]
        self.log = (home / "server.log").open("w")
        self.proc = subprocess.Popen(argv, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            self.stop()
            raise RuntimeError(f"server did not start; see {home / 'server.log'}")
        self.token = (home / "admin-token").read_text().strip()

    def cpu_s(self) -> float:
        """CPU seconds the server process has used so far."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


async def _connection(
    host: str, port: int, request: bytes, jobs: Iterator[int], out: dict[str, Any]
) -> None:
    """One keep-alive HTTP/1.1 connection sending submissions back to back. A minimal
    client (like wrk's), so that the load generator spends little of the machine's CPU."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        for _ in jobs:
            t0 = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n")[1:]:
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            body = await reader.readexactly(length)
            out["latencies"].append(time.perf_counter() - t0)
            out["statuses"][status] = out["statuses"].get(status, 0) + 1
            if status == 201:
                out["ids"].append(json.loads(body)["id"])
    finally:
        writer.close()


async def _client(url: str, token: str, jobs: int, concurrency: int) -> dict[str, Any]:
    parsed = httpx.URL(url)
    body = json.dumps(SPEC).encode()
    request = (
        f"POST /v1/jobs HTTP/1.1\r\nHost: {parsed.host}:{parsed.port}\r\n"
        f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    out: dict[str, Any] = {"latencies": [], "ids": [], "statuses": {}}
    remaining = iter(range(jobs))
    host, port = parsed.host, parsed.port or 80
    await asyncio.gather(
        *(_connection(host, port, request, remaining, out) for _ in range(concurrency))
    )
    return out


def _client_process(args: tuple[str, str, int, int, float]) -> dict[str, Any]:
    url, token, jobs, concurrency, start_at = args
    time.sleep(max(0.0, start_at - time.time()))  # every client starts together
    t0, c0 = time.time(), time.process_time()
    out = asyncio.run(_client(url, token, jobs, concurrency))
    out["t0"], out["t1"], out["cpu_s"] = t0, time.time(), time.process_time() - c0
    return out


def bench_submit(jobs: int, clients: int, concurrency: int) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="trainyard-bench-"))
    server = ServerProcess(home, virtual_gpus=0)
    try:
        start_at = time.time() + 1.0
        per = [jobs // clients + (1 if i < jobs % clients else 0) for i in range(clients)]
        work = [(server.url, server.token, n, concurrency, start_at) for n in per]
        cpu0 = server.cpu_s()
        with multiprocessing.get_context("spawn").Pool(clients) as pool:
            results = pool.map(_client_process, work)
        server_cpu = server.cpu_s() - cpu0
    finally:
        server.stop()
    latencies = [x for r in results for x in r["latencies"]]
    ids = [x for r in results for x in r["ids"]]
    statuses: dict[str, int] = {}
    for r in results:
        for code, n in r["statuses"].items():
            statuses[str(code)] = statuses.get(str(code), 0) + n
    wall = max(r["t1"] for r in results) - min(r["t0"] for r in results)
    with sqlite3.connect(home / "trainyard.db") as db:
        stored = db.execute("SELECT count(*) FROM jobs").fetchone()[0]
        pending = db.execute("SELECT count(*) FROM jobs WHERE state='PENDING'").fetchone()[0]
    shutil.rmtree(home, ignore_errors=True)
    return {
        "case": "submit",
        "jobs": jobs,
        "clients": clients,
        "concurrency_per_client": concurrency,
        "accepted": len(ids),
        "statuses": statuses,
        "wall_s": round(wall, 3),
        "submissions_per_s": round(len(ids) / wall, 1),
        "latency_ms": {
            "p50": _ms(latencies, 50),
            "p99": _ms(latencies, 99),
            "max": _ms(latencies, 100),
        },
        "cpu_s": {
            "server": round(server_cpu, 2),
            "clients": round(sum(r["cpu_s"] for r in results), 2),
        },
        "stored_rows": stored,
        "pending_rows": pending,
        "distinct_ids": len(set(ids)),
        "none_lost": stored == len(ids) == len(set(ids)) == jobs,
    }


def bench_start(starts: int) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="trainyard-bench-"))
    server = ServerProcess(home, virtual_gpus=1)
    delays: list[float] = []
    try:
        headers = {"Authorization": f"Bearer {server.token}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=60) as client:
            for i in range(starts):
                spec = {  # (the job may write its own directories only: docs/security.md)
                    "name": f"start-{i}",
                    "command": ["sh", "-c", 'date +%s.%N > "$TRAINYARD_CHECKPOINT_DIR/stamp"'],
                    "gpus": 1,
                }
                t0 = time.time()
                answer = client.post("/v1/jobs", json=spec)
                assert answer.status_code == 201, answer.text
                job_id = answer.json()["id"]
                stamp = home / "runs" / "jobs" / job_id / "checkpoints" / "stamp"
                deadline = time.monotonic() + 30
                while not stamp.exists() or not stamp.read_text().strip():
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"job {job_id} did not start within 30 s")
                    time.sleep(0.002)
                delays.append(float(stamp.read_text()) - t0)
                while client.get(f"/v1/jobs/{job_id}").json()["state"] != "SUCCEEDED":
                    time.sleep(0.01)  # idle machine: the next job starts after this one ended
    finally:
        server.stop()
        shutil.rmtree(home, ignore_errors=True)
    return {
        "case": "start",
        "starts": starts,
        "submit_to_process_start_ms": {
            "p50": _ms(delays, 50),
            "p99": _ms(delays, 99),
            "max": _ms(delays, 100),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("cases", nargs="*", default=["submit", "start"])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--starts", type=int, default=50)
    args = parser.parse_args()
    machine = {
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
    }
    for case in args.cases:
        if case == "submit":
            result = bench_submit(args.jobs, args.clients, args.concurrency)
        elif case == "start":
            result = bench_start(args.starts)
        else:
            parser.error(f"unknown case {case!r}: submit or start")
        print(json.dumps({**result, **machine}), flush=True)


if __name__ == "__main__":
    main()
