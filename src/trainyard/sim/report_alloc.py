"""The report's allocation-over-time plot: GPUs held by each job over simulated time, stacked.

This module owns `allocation_matrix` (the numbers) and `plot_allocation` (the PNG). Each job's
allocation is a step function (`JobRecord.allocation`); the `TOP` jobs with the most
GPU-seconds get a band of their own, the rest share one grey band ("other jobs"), so a
Philly run with tens of thousands of jobs plots as fast as a Pollux one. An elastic job's
band widens and narrows as it is grown and shrunk; the top edge is the cluster's allocated
GPUs. Time points are capped at `max_points` (the report passes its `MAX_POINTS`) by keeping
every n-th change (the allocation between kept points is the value at the earlier one), like
the other timelines. A band is summed from its jobs' changes in one sorted pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from trainyard.sim.metrics import duration_unit, window
from trainyard.sim.records import JobRecord, SimResult

__all__ = ["TOP", "allocation_matrix", "plot_allocation"]

TOP = 20


def _top(records: Sequence[JobRecord], top: int) -> list[JobRecord]:
    held = [r for r in records if r.allocation]
    held.sort(key=lambda r: (-r.held, r.id))
    return held[:top]


def allocation_matrix(
    result: SimResult, top: int = TOP, max_points: int = 2000
) -> tuple[np.ndarray, list[str], np.ndarray]:
    """(times, labels, gpus) with gpus[i, j] the GPUs band i holds from times[j]: one row per
    top job by GPU-seconds, then one for all other jobs (when there are any)."""
    t0, t1 = window(result)
    chosen = _top(result.records, top)
    chosen_ids = {r.id for r in chosen}
    others = [r for r in result.records if r.allocation and r.id not in chosen_ids]
    times = sorted({t for r in result.records for t, _ in r.allocation} | {t0, t1})
    if len(times) > max_points:
        step = -(-len(times) // max_points)
        times = sorted({*times[::step], t0, t1})
    grid = np.asarray(times, dtype=float)

    def row(recs: Sequence[JobRecord]) -> np.ndarray:
        """GPUs the jobs of `recs` hold together at each grid time: the running sum of their
        changes (each allocation entry adds its size less the one before it)."""
        changes = sorted(
            (t, g - prev)
            for r in recs
            for (t, g), prev in zip(
                r.allocation, (0, *(g for _, g in r.allocation[:-1])), strict=True
            )
        )
        if not changes:
            return np.zeros(len(grid))
        at = np.asarray([t for t, _ in changes], dtype=float)
        held = np.cumsum([d for _, d in changes], dtype=float)
        idx = np.searchsorted(at, grid, side="right") - 1
        return np.where(idx >= 0, held[np.clip(idx, 0, None)], 0.0)

    rows = [row([r]) for r in chosen]
    labels = [r.id for r in chosen]
    if others:
        rows.append(row(others))
        labels.append(f"other jobs ({len(others)})")
    matrix = np.vstack(rows) if rows else np.zeros((0, len(grid)))
    return grid, labels, matrix


def band_colours(labels: list[str]) -> list[tuple[float, float, float, float] | str]:
    """A colour per band: the 20 of matplotlib's `tab20` (so `TOP` jobs never share one;
    found by an outside review: a 10-colour cycle gave two jobs of 20 the same blue), then
    the cycle again, and grey for "other jobs"."""
    from matplotlib import colormaps

    palette = colormaps["tab20"]
    colours: list[tuple[float, float, float, float] | str] = []
    for i in range(len(labels)):
        red, green, blue, alpha = palette(i % 20)
        colours.append((float(red), float(green), float(blue), float(alpha)))
    if labels and labels[-1].startswith("other jobs"):
        colours[-1] = "0.75"
    return colours


def plot_allocation(
    result: SimResult, path: Path, title: str, top: int = TOP, max_points: int = 2000
) -> None:
    """Write the stacked allocation plot of `result` to `path` (PNG)."""
    times, labels, matrix = allocation_matrix(result, top, max_points)
    span = float(times[-1] - times[0]) if len(times) else 0.0
    unit, size = duration_unit(span)
    fig = Figure(figsize=(8.0, 4.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    ax.grid(True, alpha=0.3)
    if len(labels):
        colours = band_colours(labels)
        ax.stackplot(
            (times - times[0]) / size, matrix, labels=labels, colors=colours, step="post",
            linewidth=0.0,
        )  # fmt: skip
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="x-small", ncol=1)
    ax.set_ylim(0, max(result.total_gpus, 1))
    ax.set_xlabel(f"simulated time ({unit})")
    ax.set_ylabel("GPUs held")
    ax.set_title(title, fontsize="small")
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100, metadata={"Software": None})
