"""The `trainyard probe links` job: all-reduce and all-gather timed with torch.distributed on
the ranks the platform started, one JSON result for the planner (`trainyard plan --links`).

Run by the platform under its torchrun-style environment (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT, LOCAL_RANK; `trainyard.exec.jobenv`), one process per rank: NCCL on real GPUs,
gloo on CPUs and on declared (virtual) GPUs (TRAINYARD_VIRTUAL_GPUS=1). For each collective
and message size from 8 bytes up to --max-bytes (powers of 4), after --warmup untimed calls,
--iters calls are timed between barriers on every rank and the slowest rank's mean is kept (a
collective ends when its last rank does). The nodes are counted from each rank's host name.

Rank 0 prints the result as one line ``TRAINYARD_LINKS_JSON {...}`` (so `trainyard probe links`
reads it from the job's log, whatever user the job ran as) and, with --out, writes it to that
file. Its form is `trainyard.planner.links.parse_probe`'s: ``{"collectives": [{"collective",
"ranks", "nodes", "backend", "sizes": [[bytes, time_us], ...]}]}``. This module imports torch
only when it runs.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

MARKER = "TRAINYARD_LINKS_JSON"
COLLECTIVES = ("all_reduce", "all_gather")


def sizes(max_bytes: int) -> list[int]:
    """Message sizes: 8 bytes, then x4, up to `max_bytes` (whole float32 elements)."""
    out, size = [], 8
    while size <= max_bytes:
        out.append(size)
        size *= 4
    return out


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-bytes", type=int, default=0, help="default 64 MiB NCCL, 4 MiB gloo")
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="also write the result here")
    parser.add_argument("--timeout", type=float, default=120.0, help="process group timeout, s")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    import torch
    import torch.distributed as dist

    virtual = os.environ.get("TRAINYARD_VIRTUAL_GPUS", "0") not in ("", "0")
    cuda = torch.cuda.is_available() and not virtual
    backend = "nccl" if cuda else "gloo"
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend=backend, timeout=timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda") if cuda else torch.device("cpu")
    hosts: list[Any] = [None] * world
    dist.all_gather_object(hosts, socket.gethostname())
    max_bytes = args.max_bytes or (64 << 20 if cuda else 4 << 20)
    result: dict[str, Any] = {"backend": backend, "collectives": []}
    for name in COLLECTIVES:
        points = []
        for size in sizes(max_bytes):
            elements = max(1, size // 4)
            run: Callable[[], Any]
            if name == "all_reduce":
                tensor = torch.ones(elements, dtype=torch.float32, device=device)
                run = functools.partial(dist.all_reduce, tensor)
            else:
                # nccl-tests' size for all_gather is the gathered output.
                part = max(1, elements // world)
                tensor = torch.ones(part, dtype=torch.float32, device=device)
                output = torch.empty(part * world, dtype=torch.float32, device=device)
                gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
                run = functools.partial(gather, output, tensor)
            for _ in range(args.warmup):
                run()
            if cuda:
                torch.cuda.synchronize()
            dist.barrier()
            start = time.perf_counter()
            for _ in range(args.iters):
                run()
            if cuda:
                torch.cuda.synchronize()
            mean_us = (time.perf_counter() - start) / args.iters * 1e6
            points.append([elements * 4 if name == "all_reduce" else part * world * 4, mean_us])
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, points)
        merged = [[p[0], max(g[i][1] for g in gathered)] for i, p in enumerate(points)]
        result["collectives"].append(
            {
                "collective": name,
                "ranks": world,
                "nodes": len(set(hosts)),
                "backend": backend,
                "sizes": merged,
            }
        )
    if rank == 0:
        text = json.dumps(result, separators=(",", ":"))
        print(f"{MARKER} {text}", flush=True)
        if args.out is not None:
            args.out.write_text(json.dumps(result, indent=1) + "\n")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
