"""Command-line start-up benchmark (issue 19): `python bench/cli.py [--json] [--runs N]`.

With a real local server (`trainyard up` in a subprocess, its own home, two virtual GPUs:
`bench/platform_load.py`'s `ServerProcess`), each command is run `--runs` times (20) as a
whole process, the way a user or a script runs it, and its wall time measured from spawn to
exit, `--pause` (0.5 s) apart so that each starts on an idle server: `trainyard submit
--gpus 0 -- true` (spec-less; each job runs and succeeds meanwhile), `trainyard jobs` and
`trainyard describe JOB`. Reported per command: p50, p99 (nearest rank: the slowest of 20)
and max in milliseconds, and the machine. The command is the installed console script next
to this interpreter (`.venv/bin/trainyard`); `--trainyard PATH` names another.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from platform_load import ServerProcess, _ms


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr}")
    return wall, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json", action="store_true", help="one JSON line (the default too)")
    parser.add_argument("--trainyard", default=str(Path(sys.executable).parent / "trainyard"))
    parser.add_argument(
        "--pause", type=float, default=0.5,
        help="seconds between runs, so that each starts on an idle server (a submitted job "
        "is launched meanwhile)",
    )  # fmt: skip
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="trainyard-bench-cli-", dir="/tmp") as tmp:
        home = Path(tmp)
        server = ServerProcess(home, virtual_gpus=2)
        env = {
            **os.environ, "TRAINYARD_URL": server.url, "TRAINYARD_TOKEN": server.token,
            "TRAINYARD_CONFIG": str(home / "client.json"), "NO_COLOR": "1",
        }  # fmt: skip
        try:
            walls: dict[str, list[float]] = {"jobs": [], "submit": [], "describe": []}
            job = ""
            for _ in range(args.runs):
                wall, out = _timed([args.trainyard, "submit", "--gpus", "0", "--", "true"], env)
                walls["submit"].append(wall)
                job = out.strip().splitlines()[0]
                time.sleep(args.pause)
            for _ in range(args.runs):
                walls["jobs"].append(_timed([args.trainyard, "jobs"], env)[0])
                time.sleep(args.pause)
            for _ in range(args.runs):
                walls["describe"].append(_timed([args.trainyard, "describe", job], env)[0])
                time.sleep(args.pause)
        finally:
            server.stop()
    report: dict[str, Any] = {"case": "cli", "runs": args.runs}
    for name, values in walls.items():
        report[name] = {"p50_ms": _ms(values, 50), "p99_ms": _ms(values, 99),
                        "max_ms": round(1000 * max(values), 2)}  # fmt: skip
    report.update(
        machine=platform.machine(), cpus=os.cpu_count(), python=platform.python_version(),
        date=time.strftime("%Y-%m-%d %H:%M"),
    )  # fmt: skip
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
