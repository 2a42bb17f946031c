"""Planner speed benchmark (JSON on stdout): `python bench/planner.py [--repeat N]`.

Times the planner's three searches on the largest published configuration (the 1T-parameter
SC'21 model on 3,072 A100s): the layout search (`search`), the GPU-count search for a goal
(`size_for_tokens`, up to 3,072 GPUs) and the re-plan for an actual allocation
(`search_allocation`, 384 nodes of 8). Each is run `--repeat` times in a fresh process state
(caches live inside one call only); min / median / max wall seconds are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable

from trainyard.planner.allocation import search_allocation
from trainyard.planner.hardware import gpu
from trainyard.planner.presets import preset
from trainyard.planner.search import search
from trainyard.planner.sizing import size_for_tokens


def timed(fn: Callable[[], object], repeat: int) -> dict[str, float]:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return {"min_s": min(runs), "median_s": statistics.median(runs), "max_s": max(runs)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    model, a100 = preset("sc21-1008.0b"), gpu("A100")
    cases: dict[str, Callable[[], object]] = {
        "search_1T_3072": lambda: search(model, 3072, a100),
        "size_for_tokens_1T_upto_3072": lambda: size_for_tokens(
            model, a100, 450e9, objective="cost", max_gpus=3072
        ),
        "search_allocation_1T_384x8": lambda: search_allocation(model, a100, [8] * 384),
    }
    for name, fn in cases.items():
        out = {
            "case": name,
            "params": model.params,
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
        }
        out.update(timed(fn, args.repeat))
        print(json.dumps(out), flush=True)
