"""Elastic training benchmark (issue 15): `python bench/elastic.py [--json]`.

A real `trainyard up` server (a subprocess with its own home, 4 virtual GPUs) runs the elastic
DDP example `examples/jobs/elastic/train.py` (gloo on CPU, emulated device time) through a
grow and a shrink:

1. a rigid sleeper job holds 3 of the 4 GPUs; the elastic job (1 to 4 GPUs, one rank per GPU,
   fixed global batch) is submitted and starts at 1;
2. once it trains at 1 the sleeper is cancelled: the scheduler grows the job into the idle
   GPUs, in as many resize steps as it decides (each: notice + SIGTERM, checkpoint, exit 85,
   relaunch at the new size);
3. once it trains at 4, a higher-priority rigid 2-GPU job (`--squeeze-s` seconds of sleep) is
   submitted: the elastic job gives GPUs up (a shrink or a preemption, as the scheduler
   chooses) and may grow again afterwards; everything then runs to the end.

Then the same training runs at a fixed 4 ranks (`torch.distributed.run`, no scheduler): once
with all the steps and checkpoints, for the fixed-size final loss, and `--overhead-pairs`
times (3) with and without checkpoints at `--overhead-steps` (1000) each, alternating which
goes first, for the checkpoints' cost.

Reported (one JSON object, last on stdout): the world sizes the job trained at, in order (the
`start world_size=N` line of each attempt's rank 0), the scheduler's events, the final state
and loss against the fixed-size run's, for every stop (a RESIZING or PREEMPTED event): the
steps redone (the last step of the stopped run minus the step the next run resumed from,
against the checkpoint interval) and the downtime (from the event's time, when the stop
was decided and the notice sent, to the first step the next run logged), the checkpoints'
overhead (`1 - mean step without / mean step with` per pair, both at 4 ranks; the median of
the pairs, and each: on a shared machine the spread between runs is of the same order), the
share of training time the loop spent inside `save` (the part the asynchronous checkpoint
does not hide), wall time and machine.

Scheduling knobs. The stock profile (`default`) grows a job only 60 s after its last start
(`resize_hold_s`) and charges 90 s per restart (`resize_restart_s`), which would make this a
ten-minute run. The server is started with `trainyard up --resize-hold 15
--resize-restart-cost 6` (6 s: about what a resize of this job costs here, its measured
downtime; with 15 s the job, of about 100 s, ends before a 3 -> 4 step repays it and stays
at 3); this benchmark's `--resize-hold 60 --resize-restart 90` give the stock behaviour.
Jobs run as the server's user (`--job-user server`).

Run from the repository root with the project's venv: `.venv/bin/python bench/elastic.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from served import FINAL, Server, until

REPO = Path(__file__).resolve().parent.parent
TRAIN = REPO / "examples" / "jobs" / "elastic" / "train.py"
STEP = re.compile(r"^step (\d+) loss (\S+) t=(\S+)$")
START = re.compile(r"^start world_size=(\d+)")
RESUMED = re.compile(r"^resumed from step (\d+)")
NOTICE = re.compile(r"^notice (\w+) at step=(\d+) t=(\S+)$")
DONE = re.compile(
    r"^done steps=(\d+) final_loss=(\S+) train_loss=\S+ mean_step_ms=(\S+) "
    r"median_step_ms=(\S+) save_share=(\S+) "
)


def train_argv(args: argparse.Namespace, *extra: str, steps: int | None = None) -> list[str]:
    return [
        str(TRAIN), "--steps", str(args.steps if steps is None else steps),
        "--checkpoint-every", str(args.checkpoint_every), "--device-ms", str(args.device_ms),
        "--log-every", "25", *extra,
    ]  # fmt: skip


def parse_attempt(text: str) -> dict[str, Any]:
    """What one attempt's rank-0 log says: its world size, resume step, first step (and its
    time), last step, notice and result."""
    out: dict[str, Any] = {"world_size": None, "resumed": 0, "first_step": None, "notice": None}
    out.update(last_step=None, done=None)
    for line in text.splitlines():
        line = line.strip()
        if m := START.match(line):
            out["world_size"] = int(m[1])
        elif m := RESUMED.match(line):
            out["resumed"] = int(m[1])
        elif m := STEP.match(line):
            if out["first_step"] is None:
                out["first_step"] = (int(m[1]), float(m[3]))
            out["last_step"] = int(m[1])
        elif m := NOTICE.match(line):
            out["notice"] = {"reason": m[1], "step": int(m[2]), "t": float(m[3])}
            out["last_step"] = int(m[2])
        elif m := DONE.match(line):
            out["done"] = {"steps": int(m[1]), "final_loss": float(m[2]),
                           "mean_step_ms": float(m[3]), "median_step_ms": float(m[4]),
                           "save_share": float(m[5])}  # fmt: skip
    return out


def elastic_run(args: argparse.Namespace, home: Path) -> dict[str, Any]:
    server = Server(
        home,
        [
            "--resize-hold",
            str(args.resize_hold),
            "--resize-restart-cost",
            str(args.resize_restart),
            "--interval",
            "0.5",
        ],
    )
    sleeper = [sys.executable, "-c", "import time; time.sleep(3600)"]
    jobs: list[str] = []
    try:
        blocker = server.submit({"name": "sleeper", "gpus": 3, "command": sleeper})
        jobs.append(blocker)
        until("the sleeper to run", lambda: server.job(blocker)["state"] == "RUNNING", 120)
        spec = {
            "name": "elastic", "gpus": 4, "workers": 4, "max_restarts": 2,
            "command": [sys.executable, *train_argv(args)],
            "elastic": {"min_gpus": 1, "max_gpus": 4, "batch_size": args.global_batch},
        }  # fmt: skip
        job = server.submit(spec)
        jobs.append(job)
        t_submit = time.time()

        def training_at(size: int) -> bool:
            detail = server.job(job)
            if detail["state"] in FINAL:
                raise RuntimeError(f"elastic job ended early: {detail['state']}")
            if detail["state"] != "RUNNING" or detail["gpus"] != size:
                return False
            return parse_attempt(server.logs(job))["first_step"] is not None

        until("the job to train at 1", lambda: training_at(1), 180)
        server.cancel(blocker)
        grown = True
        try:
            until("the job to grow to 4", lambda: training_at(4), args.grow_timeout)
        except RuntimeError:
            grown = False  # reported as it is: the squeeze comes anyway
        squeeze = [sys.executable, "-c", f"import time; time.sleep({args.squeeze_s})"]
        high = server.submit({"name": "high", "gpus": 2, "priority": 100, "command": squeeze})
        jobs.append(high)
        t_high = time.time()
        until("the elastic job to end", lambda: server.job(job)["state"] in FINAL, 1800)
        until("the 2-GPU job to end", lambda: server.job(high)["state"] in FINAL, 600)
        detail = server.job(job)
        high_detail = server.job(high)
        attempts = [parse_attempt(server.logs(job, a)) for a in range(detail["attempt"] + 1)]
    finally:
        server.stop(jobs)
    attempts = [a for a in attempts if a["world_size"] is not None]
    events = [
        {
            "t": round(e["time"] - t_submit, 3),
            "from": e["from_state"],
            "to": e["to_state"],
            "reason": e["reason"],
        }
        for e in detail["events"]
    ]
    stops = [e for e in detail["events"] if e["to_state"] in ("RESIZING", "PREEMPTED")]
    per_stop = []
    for event in stops:
        later = [a for a in attempts if a["first_step"] and a["first_step"][1] > event["time"]]
        before = [a for a in attempts if a["notice"] and a["notice"]["t"] >= event["time"]]
        if not later:
            continue
        nxt, old = later[0], before[0] if before else None
        lost = None if old is None else old["last_step"] - nxt["resumed"]
        per_stop.append({
            "event": event["reason"], "to": event["to_state"],
            "stopped_at_step": None if old is None else old["last_step"],
            "resumed_from_step": nxt["resumed"], "lost_steps": lost,
            "new_world_size": nxt["world_size"],
            "downtime_s": round(nxt["first_step"][1] - event["time"], 3),
            # of which: until the old run saw the notice (after its step in flight), and from
            # then until the new run's first step (save, exit, relaunch, import, rendezvous)
            "to_notice_s": None if old is None else round(old["notice"]["t"] - event["time"], 3),
            "notice_to_step_s": None if old is None
            else round(nxt["first_step"][1] - old["notice"]["t"], 3),
        })  # fmt: skip
    done = attempts[-1]["done"] if attempts else None
    return {
        "grew_to_4": grown,
        "world_sizes": [a["world_size"] for a in attempts],
        "final_state": detail["state"],
        "final_loss": None if done is None else done["final_loss"],
        "steps_done": None if done is None else done["steps"],
        "restart_count": detail.get("restart_count"),
        "high_priority_job": {
            "state": high_detail["state"],
            "submitted_s": round(t_high - t_submit, 3),
        },
        "stops": per_stop,
        "events": events,
    }


def fixed_run(
    args: argparse.Namespace, ranks: int, checkpoints: bool, steps: int | None = None
) -> dict[str, Any]:
    """The same training at a fixed `ranks` without the scheduler: `torch.distributed.run`."""
    with tempfile.TemporaryDirectory(prefix="trainyard-bench-fixed-") as tmp:
        env = {**os.environ, "TRAINYARD_CHECKPOINT_DIR": str(Path(tmp) / "ckpt")}
        for name in ("TRAINYARD_JOB_ID", "TRAINYARD_API_URL", "TRAINYARD_NOTICE_FILE"):
            env.pop(name, None)
        argv = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                f"--nproc-per-node={ranks}", *train_argv(args, steps=steps)]  # fmt: skip
        if not checkpoints:
            argv.append("--no-checkpoint")
        done = subprocess.run(argv, env=env, cwd=tmp, capture_output=True, text=True, timeout=1800)
    parsed = parse_attempt(done.stdout)
    if done.returncode != 0 or parsed["done"] is None:
        raise RuntimeError(f"fixed run failed ({done.returncode}): {done.stderr[-2000:]}")
    return dict(parsed["done"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON line (the default too)")
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--checkpoint-every", type=int, default=50)
    parser.add_argument("--global-batch", type=int, default=192)
    parser.add_argument("--device-ms", type=float, default=60.0, help="emulated device time")
    parser.add_argument("--resize-hold", type=float, default=15.0, help="profile resize_hold_s")
    parser.add_argument("--resize-restart", type=float, default=6.0, help="resize_restart_s")
    parser.add_argument("--grow-timeout", type=float, default=300.0, help="seconds to reach 4")
    parser.add_argument("--overhead-pairs", type=int, default=3, help="with/without pairs")
    parser.add_argument("--overhead-steps", type=int, default=1000, help="steps of each")
    parser.add_argument("--squeeze-s", type=float, default=20.0, help="the 2-GPU job's sleep")
    args = parser.parse_args()
    t0 = time.monotonic()
    home = Path(tempfile.mkdtemp(prefix="trainyard-bench-elastic-", dir="/tmp"))
    try:
        report = elastic_run(args, home)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    fixed = fixed_run(args, 4, checkpoints=True)
    pairs = []  # (with, without) at the same steps, alternating which runs first
    for i in range(args.overhead_pairs):
        first = fixed_run(args, 4, checkpoints=i % 2 == 0, steps=args.overhead_steps)
        second = fixed_run(args, 4, checkpoints=i % 2 == 1, steps=args.overhead_steps)
        pairs.append((first, second) if i % 2 == 0 else (second, first))
    shares = [1.0 - b["mean_step_ms"] / a["mean_step_ms"] for a, b in pairs]
    downtimes = [s["downtime_s"] for s in report["stops"]]
    lost = [s["lost_steps"] for s in report["stops"] if s["lost_steps"] is not None]
    fixed_loss = fixed["final_loss"]
    final = report["final_loss"]
    out: dict[str, Any] = {
        "case": "elastic",
        "world_sizes": report["world_sizes"],
        "final_state": report["final_state"],
        "final_loss": final,
        "fixed_size_final_loss": fixed_loss,
        "final_loss_rel_diff": None if final is None else round(abs(final / fixed_loss - 1), 6),
        "lost_steps_max": max(lost) if lost else None,
        "checkpoint_interval_steps": args.checkpoint_every,
        "resize_downtime_s_p50": round(statistics.median(downtimes), 3) if downtimes else None,
        "resize_downtimes_s": downtimes,
        "async_checkpoint_overhead": round(statistics.median(shares), 4),
        "async_checkpoint_overhead_pairs": [round(x, 4) for x in shares],
        "checkpoint_save_share": round(statistics.median(a["save_share"] for a, _ in pairs), 5),
        "overhead_mean_step_ms": [
            {"checkpoints": a["mean_step_ms"], "no_checkpoints": b["mean_step_ms"]}
            for a, b in pairs
        ],
        "fixed_size_mean_step_ms": fixed["mean_step_ms"],
        **{k: report[k] for k in ("grew_to_4", "steps_done", "restart_count", "stops")},
        "high_priority_job": report["high_priority_job"],
        "events": report["events"],
        "settings": {
            "steps": args.steps,
            "global_batch": args.global_batch,
            "device_ms": args.device_ms,
            "resize_hold_s": args.resize_hold,
            "resize_restart_s": args.resize_restart,
            "squeeze_s": args.squeeze_s,
            "virtual_gpus": 4,
            "overhead_pairs": args.overhead_pairs,
            "overhead_steps": args.overhead_steps,
        },
        "wall_s": round(time.monotonic() - t0, 1),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
