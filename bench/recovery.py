"""Recovery benchmark (issue 16): `python bench/recovery.py [--executor ray|local] [--json]`.

A real `trainyard up` server (a subprocess with its own home, SQLite) runs a real DDP job
(`examples/jobs/ddp/train.py`, gloo on CPU, `--step-sleep` per step, a checkpoint every
`--checkpoint-every` steps, progress reported through `trainyard.sdk.Reporter` every second,
one trace line per step) and the benchmark breaks it:

- `--executor ray` (default): this process starts a `ray.cluster_utils.Cluster` of 3 worker
  nodes x 4 virtual GPUs (fast health checks, docs/ray.md) and the server drives it
  (`--executor ray --ray-address`). The job asks for 8 GPUs on 2 nodes (2 ranks of 4 GPUs).
  Its worker process (rank 1's training process) is killed with SIGKILL `--kills` times
  (3), then the node of rank 1 is removed `--node-losses` times (3); after each removal the
  node is added back under the same name once the job trains again elsewhere.
- `--executor local`: the server runs on this machine with 4 virtual GPUs; the job asks for
  2 GPUs, 2 ranks; rank 1's process is killed `--kills` times. There are no node losses.

Each failure comes once the attempt has trained past `--checkpoint-every` + a few steps, at
a step that is not a checkpoint. Measured, per failure, from the trace and the server's API:

- `worker_kill_to_running_s`: kill -> the first training step of the new attempt;
- `node_loss_detect_s`: node removed -> the job's FAILED event (the platform noticed);
- `node_loss_to_running_s`: node removed -> the first training step of the new attempt;
- `lost_steps`: the last step the old attempt trained minus the step the new one resumed
  from (at most one checkpoint interval when nothing more is lost);
- `duplicates`: trace lines of an attempt written after a later attempt's first step (two
  attempts training at once);
- `jobs_lost`: 1 unless the job ends SUCCEEDED with every step trained.

Last line on stdout: one JSON object with those, `checkpoint_interval_steps`, p50s, wall time
and machine. Run from the repository root with the project's venv.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from served import FINAL, Server, until
from trainyard.exec.ray.nodes import FAST_HEALTH_CHECKS

REPO = Path(__file__).resolve().parent.parent
TRAIN = REPO / "examples" / "jobs" / "ddp" / "train.py"
NODES = {"w1": "r1", "w2": "r1", "w3": "r2"}


class Trace:
    """The job's trace file: one JSON line per step of rank 0."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def rows(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                out.append(json.loads(line))
        return out

    def first(self, attempt: int) -> dict[str, Any] | None:
        return next((r for r in self.rows() if r["attempt"] == attempt), None)

    def first_after(self, attempt: int) -> dict[str, Any] | None:
        """The first row of the earliest attempt after `attempt` that trained: an attempt
        may never train (a launch onto a node that left meanwhile is requeued at once as
        the infrastructure's failure, under the next attempt number)."""
        rows = [r for r in self.rows() if r["attempt"] > attempt]
        if not rows:
            return None
        first = min(r["attempt"] for r in rows)
        return next(r for r in rows if r["attempt"] == first)

    def last(self, attempt: int) -> dict[str, Any] | None:
        rows = [r for r in self.rows() if r["attempt"] == attempt]
        return rows[-1] if rows else None


class Cluster:
    """The Ray cluster of this benchmark (`ray.cluster_utils.Cluster`)."""

    def __init__(self) -> None:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        from ray.cluster_utils import Cluster as RayCluster

        self.cluster = RayCluster(
            initialize_head=True,
            head_node_args={"num_cpus": 1, "num_gpus": 0, "_system_config": FAST_HEALTH_CHECKS},
        )
        self.workers: dict[str, Any] = {}
        for name in NODES:
            self.add(name)
        self.cluster.wait_for_nodes()

    def add(self, name: str) -> None:
        labels = {"trainyard.io/node": name, "trainyard.io/rack": NODES[name]}
        self.workers[name] = self.cluster.add_node(num_cpus=2, num_gpus=4, labels=labels)

    def remove(self, name: str) -> None:
        self.cluster.remove_node(self.workers.pop(name), allow_graceful=False)

    def shutdown(self) -> None:
        self.cluster.shutdown()


def _run_json(home: Path, job_id: str, attempt: int) -> dict[str, Any] | None:
    path = home / "runs" / "jobs" / job_id / f"attempt-{attempt}" / "run.json"
    with contextlib.suppress(OSError, json.JSONDecodeError):
        data: dict[str, Any] = json.loads(path.read_text())
        if data.get("ranks") and all(r.get("pid") for r in data["ranks"]):
            return data
    return None


def _worker_pid(home: Path, job_id: str, attempt: int, rank: dict[str, Any]) -> int:
    """The training process of a rank: the local executor records its wrapper's pid in
    `run.json` and the command's in `rank-R.pid.json`; the Ray executor records the
    command's pid itself (its supervisor is the Ray actor)."""
    path = home / "runs" / "jobs" / job_id / f"attempt-{attempt}" / f"rank-{rank['rank']}.pid.json"
    if path.exists():
        return int(json.loads(path.read_text())["pid"])
    return int(rank["pid"])


POLL_S = 0.02  # how often the trace is read while a failure is timed


def run(args: argparse.Namespace, home: Path) -> dict[str, Any]:
    cluster = Cluster() if args.executor == "ray" else None
    extra = ["--interval", "1.0", "--restart-backoff", "10"]
    if cluster is not None:
        extra += ["--executor", "ray", "--ray-address", str(cluster.cluster.address)]
    trace = Trace(home / "trace.jsonl")
    k = args.checkpoint_every
    command = [sys.executable, str(TRAIN), "--steps", str(args.steps), "--checkpoint-every",
               str(k), "--log-every", "50", "--step-sleep", str(args.step_sleep),
               "--report-every", "1", "--trace", str(trace.path)]  # fmt: skip
    spec: dict[str, Any] = {"name": "recovery", "command": command, "max_restarts": args.kills}
    if cluster is not None:
        spec.update(gpus=8, nodes=2, workers=1)
    else:
        spec.update(gpus=2, workers=2)
    server = Server(home, extra)
    jobs: list[str] = []
    out: dict[str, Any] = {"kills": [], "losses": []}
    try:
        job = server.submit(spec)
        jobs.append(job)
        attempt = 0
        failures = [("kill", i) for i in range(args.kills)]
        failures += [("node", i) for i in range(args.node_losses if cluster else 0)]
        for kind, _i in failures:
            first = until(f"attempt {attempt} to train", lambda a=attempt: trace.first(a),
                          300, POLL_S)  # fmt: skip
            target = first["step"] + k + k // 2  # past a checkpoint, between two
            until(f"step {target}", lambda a=attempt, t=target: (trace.last(a) or {}).get(
                "step", 0) >= t, 300, POLL_S)  # fmt: skip
            run_doc = _run_json(home, job, attempt)
            assert run_doc is not None, "no run record"
            rank1 = next(r for r in run_doc["ranks"] if r["rank"] == 1)
            t0 = time.time()
            if kind == "kill":
                os.kill(_worker_pid(home, job, attempt, rank1), signal.SIGKILL)
            else:
                assert cluster is not None
                lost_node = rank1["node"]
                cluster.remove(lost_node)
            new = until(f"an attempt after {attempt} to train",
                        lambda a=attempt: trace.first_after(a), 300, POLL_S)  # fmt: skip
            nxt = new["attempt"]
            old_last = trace.last(attempt)
            assert old_last is not None
            entry = {
                "to_running_s": round(new["t"] - t0, 3),
                "lost_steps": old_last["step"] - (new["step"] - 1),
            }
            if kind == "node":
                events = server.job(job)["events"]
                failed = [e["time"] for e in events
                          if e["to_state"] == "FAILED" and e["time"] >= t0]  # fmt: skip
                entry["detect_s"] = round(min(failed) - t0, 3) if failed else None
                entry["node"] = lost_node
                out["losses"].append(entry)
                assert cluster is not None
                cluster.add(lost_node)  # back under its name, for the next round
            else:
                out["kills"].append(entry)
            attempt = nxt
        until("the job to end", lambda: server.job(job)["state"] in FINAL, 900, every=0.5)
        detail = server.job(job)
        out["final_state"] = detail["state"]
        out["restart_count"] = detail["restart_count"]
        out["attempts"] = detail["attempt"]
        out["events"] = [(e["from_state"], e["to_state"], e["reason"]) for e in detail["events"]]
        rows = trace.rows()
        out["last_step"] = max((r["step"] for r in rows), default=0)
        firsts = {}
        for r in rows:
            firsts.setdefault(r["attempt"], r["t"])
        dup = sum(1 for r in rows for a, t in firsts.items() if a > r["attempt"] and r["t"] > t)
        out["duplicates"] = dup
    finally:
        server.stop(jobs)
        if cluster is not None:
            cluster.shutdown()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON line (the default too)")
    parser.add_argument("--executor", choices=["ray", "local"], default="ray")
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--node-losses", type=int, default=3)
    parser.add_argument("--checkpoint-every", type=int, default=20)
    parser.add_argument("--step-sleep", type=float, default=0.05)
    parser.add_argument("--steps", type=int, default=600)
    args = parser.parse_args()
    began = time.monotonic()
    home = Path(tempfile.mkdtemp(prefix="trainyard-bench-recovery-", dir="/tmp"))
    try:
        got = run(args, home)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    kills = [e["to_running_s"] for e in got["kills"]]
    losses = [e["to_running_s"] for e in got["losses"]]
    detect = [e["detect_s"] for e in got["losses"]]
    lost = [e["lost_steps"] for e in got["kills"] + got["losses"]]
    ok = got["final_state"] == "SUCCEEDED" and got["last_step"] == args.steps
    report = {
        "case": f"recovery-{args.executor}",
        "executor": args.executor,
        "worker_kill_to_running_s": kills,
        "worker_kill_to_running_s_p50": statistics.median(kills) if kills else None,
        "node_loss_detect_s": detect,
        "node_loss_to_running_s": losses,
        "node_loss_to_running_s_p50": statistics.median(losses) if losses else None,
        "lost_steps": lost,
        "checkpoint_interval_steps": args.checkpoint_every,
        "step_s": args.step_sleep,
        "jobs_lost": 0 if ok else 1,
        "duplicates": got["duplicates"],
        "final_state": got["final_state"],
        "restart_count": got["restart_count"],
        "attempts": got["attempts"],
        "wall_s": round(time.monotonic() - began, 1),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, {platform.python_version()}",
        "virtual_gpus": True,
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
