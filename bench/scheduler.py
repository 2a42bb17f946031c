"""Scheduler benchmark (JSON on stdout): `python bench/scheduler.py [--gpus N --pending M]`.

Without arguments it runs the three sizes that docs/benchmarks.md records. The same code runs
as `trainyard bench scheduler`.
"""

from __future__ import annotations

import argparse
import json

from trainyard.sim.timing import run

SIZES = ((1_024, 1_000), (10_240, 5_000), (102_400, 20_000))

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gpus", type=int)
    parser.add_argument("--pending", type=int)
    parser.add_argument("--profile", default="default")
    parser.add_argument("--elastic", type=float, default=0.0, help="share of elastic jobs")
    args = parser.parse_args()
    sizes = ((args.gpus, args.pending),) if args.gpus and args.pending else SIZES
    for gpus, pending in sizes:
        print(json.dumps(run(gpus, pending, profile=args.profile, elastic_share=args.elastic)))
