"""Fitting the time model's constants (`compute.Calibration`) to published throughput.

This module owns the calibration procedure the constants in `trainyard.planner.compute` came
from: a grid search over gemm_max, gemm_half, traffic and peak_exponent that minimises
median + 0.2·max of the relative TFLOP/s error over the calibration rows
(`compute.CALIBRATION_ROWS`) of published_configs.csv, read through
`trainyard.planner.evaluate.load_cases`. The held-out rows never enter the objective; `fit`
reports their errors beside. Pure and deterministic: the first best point in grid order wins.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from trainyard.planner.compute import Calibration
from trainyard.planner.errors import PlannerError
from trainyard.planner.evaluate import Case

__all__ = ["FULL_GRID", "Fit", "Grid", "fit", "objective"]

MAX_WEIGHT: Final = 0.2  # weight of the worst row in the objective (median + 0.2·max)


@dataclass(frozen=True)
class Grid:
    """The values tried for each constant of `Calibration`."""

    gemm_max: tuple[float, ...]
    gemm_half: tuple[float, ...]
    traffic: tuple[float, ...]
    peak_exponent: tuple[float, ...]

    def points(self) -> list[Calibration]:
        """Every combination, in grid order (gemm_max slowest, peak_exponent fastest)."""
        axes = (self.gemm_max, self.gemm_half, self.traffic, self.peak_exponent)
        if not all(axes):
            raise PlannerError("grid", "every axis needs at least one value")
        return [Calibration(g, w, c, e) for g, w, c, e in itertools.product(*axes)]


# The grid the shipped constants lie on (105,000 points; they were found on a coarser sub-grid
# of it, see docs/benchmarks.md).
FULL_GRID: Final = Grid(
    gemm_max=tuple(round(0.60 + 0.01 * i, 2) for i in range(21)),
    gemm_half=tuple(25.0 * i for i in range(25)),
    traffic=tuple(round(0.1 * i, 1) for i in range(40)),
    peak_exponent=(0.0, 0.5, 1.0, 1.5, 2.0),
)


@dataclass(frozen=True)
class Fit:
    """The best point, its objective, and the relative errors per row under it."""

    calibration: Calibration
    objective: float
    errors: tuple[tuple[Case, float], ...]
    points: int

    def summary(self, calibration_rows: bool) -> dict[str, float | int]:
        """Median and max |error| over the calibration rows (True) or the held-out rows."""
        errs = [abs(e) for case, e in self.errors if case.calibration == calibration_rows]
        if not errs:
            return {"rows": 0}
        return {"rows": len(errs), "median_abs": statistics.median(errs), "max_abs": max(errs)}


def _errors(cases: Sequence[Case], calibration: Calibration) -> list[float]:
    return [c.error(calibration) for c in cases]


def objective(errors: Sequence[float]) -> float:
    """median + MAX_WEIGHT·max of the absolute relative errors."""
    if not errors:
        raise PlannerError("cases", "no calibration row to fit on")
    absolute = [abs(e) for e in errors]
    return statistics.median(absolute) + MAX_WEIGHT * max(absolute)


def fit(cases: Sequence[Case], grid: Grid = FULL_GRID) -> Fit:
    """The grid point with the lowest `objective` over the calibration rows among `cases`."""
    fitted = [c for c in cases if c.calibration]
    if not fitted:
        raise PlannerError("cases", "none of the rows is a calibration row (CALIBRATION_ROWS)")
    points = grid.points()
    best: tuple[float, Calibration] | None = None
    for point in points:
        score = objective(_errors(fitted, point))
        if best is None or score < best[0] - 1e-12:
            best = (score, point)
    assert best is not None  # points() is never empty
    score, chosen = best
    errors = tuple(zip(cases, _errors(cases, chosen), strict=True))
    return Fit(chosen, score, errors, len(points))
