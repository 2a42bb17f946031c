"""Instructions of one scheduling cycle, counted by valgrind (JSON on stdout).

    python bench/cycle_instructions.py [--gpus 10240 --pending 5000 --profile default]

Wall-clock cycle times on a shared virtual machine move by +-30% from hour to hour
(docs/benchmarks.md); the number of instructions a cycle executes does not. This runs the
benchmark's snapshot (`trainyard.sim.workload.cluster.snapshot`, as `bench/scheduler.py`)
under `valgrind --tool=callgrind`, counting only inside the compiled `run_cycle`
(`--toggle-collect` on mypyc's entry point, so building the snapshot is not counted), once.
It needs the compiled core (`make venv`) and Debian's valgrind; a change to the core is
compared by its instruction count before and after, with decisions checked alike.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import trainyard.core.state as state_module

_CHILD = """
import sys
from trainyard.core import build_layout, run_cycle
from trainyard.runtime import gc_paused
from trainyard.sim.workload.cluster import snapshot
snap = snapshot(int(sys.argv[1]), int(sys.argv[2]), 0)
layout = build_layout(snap.nodes, snap.topology)
with gc_paused():
    run_cycle(snap, sys.argv[3], layout)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gpus", type=int, default=10240)
    parser.add_argument("--pending", type=int, default=5000)
    parser.add_argument("--profile", default="default")
    args = parser.parse_args()
    if not state_module.__file__ or not state_module.__file__.endswith(".so"):
        print("error: the core is not compiled (run `make venv`)", file=sys.stderr)
        return 2
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        print("error: valgrind not found (apt-get install -y valgrind)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        done = subprocess.run(
            [valgrind, "--tool=callgrind", "--toggle-collect=CPyPy_cycle___run_cycle",
             f"--callgrind-out-file={out}", sys.executable, "-c", _CHILD,
             str(args.gpus), str(args.pending), args.profile],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        print(done.stderr[-2000:], file=sys.stderr)
        return 1
    print(json.dumps({
        "gpus": args.gpus, "pending": args.pending, "profile": args.profile,
        "cycle_instructions": int(found.group(1)), "core": "compiled (mypyc)",
        "counted_by": "valgrind callgrind, inside run_cycle only",
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
