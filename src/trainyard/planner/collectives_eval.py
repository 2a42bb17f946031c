"""Comparison of the collective model with the published points of nccl_collectives.csv.

This module owns reading ``<shared>/planner/nccl_collectives.csv`` (nccl-tests bus-bandwidth
factors, a measured 8xH100 all-reduce sweep, stated and measured points) and setting each
comparable row against `collectives.predict`, for `trainyard plan --evaluate` and
docs/benchmarks.md. The model itself is in `collectives.py`.
"""

from __future__ import annotations

import csv
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from trainyard.datafiles import shared_root
from trainyard.planner.collectives import (
    A100_NVLINK,
    H100_NVLINK,
    LL_MAX_BW_AMPERE,
    PROTOCOLS,
    Prediction,
    Topology,
    _size,
    best,
    ib_link,
    nvlink,
    predict,
)
from trainyard.planner.errors import PlannerError

__all__ = ["Comparison", "compare_to_published", "default_csv_path", "summarize"]


@dataclass(frozen=True, slots=True)
class Comparison:
    """One CSV row against the model.

    `metric` is ``"busbw"`` (bandwidth regime: relative error of busbw) or ``"time"`` (latency
    regime: relative error of the time; nccl-tests rounds busbw to 0.00 there). `regime` is
    ``"latency"`` (<= 64 KiB), ``"bandwidth"`` (>= 1 GiB or a stated asymptote) or ``"mid"``
    (reported, not claimed). `relative_error` is (predicted - published) / published.
    """

    description: str
    predicted_busbw_gbps: float
    published_busbw_gbps: float
    relative_error: float
    metric: Literal["busbw", "time"]
    regime: Literal["latency", "mid", "bandwidth"]
    predicted_time_us: float | None = None
    published_time_us: float | None = None
    algorithm: str = ""


LATENCY_REGIME_MAX_BYTES: Final = 64 << 10
BANDWIDTH_REGIME_MIN_BYTES: Final = 1 << 30
_ASYMPTOTE_BYTES: Final = 16 << 30  # "large message" for rows stating an asymptotic busbw


def default_csv_path() -> Path:
    """``$TRAINYARD_SHARED`` (else ``../shared`` from the working directory, i.e. beside the
    repository when run from its root) ``/planner/nccl_collectives.csv``."""
    return shared_root() / "planner" / "nccl_collectives.csv"


def _h100(ranks: int, nvls: bool) -> Topology:
    return Topology(ranks_per_node=ranks, intra=H100_NVLINK, nvls=nvls)


def _topology_for(row: dict[str, str]) -> tuple[Topology, str | None] | None:
    """The topology a published row describes, and the algorithm it forces (None: best)."""
    gpu, scope, algo = row["gpu"], row["scope"], row["algorithm"]
    ranks = int(row["num_ranks"]) if row["num_ranks"] else 0
    forced: str | None = {"ring": "ring", "NVLS": "nvls"}.get(algo)
    if row["collective"] == "p2p/ring" and "NDR" in gpu:
        # nccl-tests #290/#267: 2 nodes, one 400G NIC each, ring.
        return Topology(1, nodes=2, intra=H100_NVLINK, inter=ib_link(400)), "ring"
    if row["collective"] != "allreduce" or ranks < 2:
        return None
    if gpu.startswith(("H100", "H200")) and "intra" in scope:
        return _h100(ranks, nvls=True), forced
    if gpu.startswith("H800"):
        # 200 GB/s/dir reduced NVLink = 8 links of 25 GB/s; NCCL models 20.6 GB/s each.
        return Topology(ranks, intra=nvlink(8), nvls=True), forced
    if gpu.startswith(("A100", "DGX-A100")):
        if "intra" in scope and ranks <= 8:
            return Topology(ranks, intra=A100_NVLINK, ll_max_bw_gbps=LL_MAX_BW_AMPERE), forced
        if "inter" in scope and ranks % 8 == 0:
            # "8x200Gb/s HDR per node" -> 200 Gbit per GPU; "4x200Gb HDR" -> 100 Gbit per GPU.
            nics = 8 if "8x200" in scope else 4 if "4x200" in scope else 0
            if nics:
                return (
                    Topology(
                        8,
                        nodes=ranks // 8,
                        intra=A100_NVLINK,
                        inter=ib_link(200 * nics / 8),
                        ll_max_bw_gbps=LL_MAX_BW_AMPERE,
                    ),
                    forced,
                )
    return None


def _parse_in_place_time(notes: str) -> float | None:
    marker = "in-place "
    if marker not in notes:
        return None
    token = notes.split(marker, 1)[1].split(" us", 1)[0]
    try:
        return float(token)
    except ValueError:
        return None


def _predict_row(topo: Topology, forced: str | None, nbytes: int) -> Prediction:
    if forced is None:
        return best("all_reduce", nbytes, topo).prediction
    protos: tuple[str, ...] = ("simple",) if forced == "nvls" else PROTOCOLS
    return min(
        (predict("all_reduce", nbytes, topo, forced, p) for p in protos),
        key=lambda p: p.time_us,
    )


def compare_to_published(path: Path | str | None = None) -> list[Comparison]:
    """Compare the model with every comparable measured or stated row of the CSV.

    Raises FileNotFoundError if the file is missing. Rows with no collective time to predict
    (busbw factors, tuning constants, link fractions) are skipped.
    """
    csv_path = Path(path) if path is not None else default_csv_path()
    out: list[Comparison] = []
    with csv_path.open(newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            kind = row["record_type"]
            if kind not in ("measured_curve", "measured", "stated"):
                continue
            found = _topology_for(row)
            if found is None:
                continue
            topo, forced = found
            label = f"{kind} {row['gpu']} {row['algorithm']} n={row['num_ranks']}"
            if kind == "measured_curve":
                nbytes = int(row["msg_bytes"])
                pred = _predict_row(topo, forced, nbytes)
                oop = float(row["time_us"])
                inplace = _parse_in_place_time(row["notes"])
                published_t = min(oop, inplace) if inplace is not None else oop
                published_bw = float(row["busbw_GBps"])
                desc = f"{label} {_size(nbytes)} ({row['source'].split(' (')[0]})"
                if nbytes <= LATENCY_REGIME_MAX_BYTES:
                    err = (pred.time_us - published_t) / published_t
                    metric: Literal["busbw", "time"] = "time"
                    regime: Literal["latency", "mid", "bandwidth"] = "latency"
                else:
                    err = (pred.busbw_gbps - published_bw) / published_bw
                    metric = "busbw"
                    regime = "bandwidth" if nbytes >= BANDWIDTH_REGIME_MIN_BYTES else "mid"
                out.append(
                    Comparison(
                        desc,
                        pred.busbw_gbps,
                        published_bw,
                        err,
                        metric,
                        regime,
                        pred.time_us,
                        published_t,
                        f"{pred.algorithm}/{pred.protocol}",
                    )
                )
            else:
                published_bw = float(row["value"])
                pred = _predict_row(topo, forced, _ASYMPTOTE_BYTES)
                out.append(
                    Comparison(
                        f"{label} ({row['source']})",
                        pred.busbw_gbps,
                        published_bw,
                        (pred.busbw_gbps - published_bw) / published_bw,
                        "busbw",
                        "bandwidth",
                        algorithm=f"{pred.algorithm}/{pred.protocol}",
                    )
                )
    return out


def summarize(rows: Sequence[Comparison], regime: str) -> tuple[float, float]:
    """(max, median) absolute relative error of the rows in `regime`."""
    errs = [abs(r.relative_error) for r in rows if r.regime == regime]
    if not errs:
        raise PlannerError("regime", f"no rows in regime {regime!r}")
    return max(errs), statistics.median(errs)
