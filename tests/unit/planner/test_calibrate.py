"""The calibration procedure (trainyard.planner.calibrate) against published_configs.csv.

The shared folder is found from TRAINYARD_SHARED (default: <repo>/../shared). Missing data is a
skip locally and a failure when CI=true. The full grid (bench/planner_calibrate.py) takes about a
minute; the tests search sub-grids that contain the shipped point: since the shipped constants
are the full grid's optimum, they must also win every sub-grid that contains them.
"""

from __future__ import annotations

import dataclasses

import pytest

from shared_data import SHARED, require
from trainyard.planner.calibrate import FULL_GRID, Grid, fit, objective
from trainyard.planner.compute import CALIBRATION, CALIBRATION_ROWS, Calibration
from trainyard.planner.errors import PlannerError
from trainyard.planner.evaluate import Case, load_cases

CSV = SHARED / "planner" / "published_configs.csv"


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    require(CSV, "check the calibration")
    return load_cases(CSV)[0]


def _axis(value: float, step: float) -> tuple[float, ...]:
    return (round(value - step, 6), value, round(value + step, 6))


def test_shipped_constants_lie_on_the_full_grid() -> None:
    c = CALIBRATION
    assert c.gemm_max in FULL_GRID.gemm_max
    assert c.gemm_half in FULL_GRID.gemm_half
    assert c.traffic in FULL_GRID.traffic
    assert c.peak_exponent in FULL_GRID.peak_exponent
    assert len(FULL_GRID.points()) == 21 * 25 * 40 * 5


def test_shipped_constants_beat_their_neighbours(cases: list[Case]) -> None:
    c = CALIBRATION
    grid = Grid(
        _axis(c.gemm_max, 0.01),
        _axis(c.gemm_half, 25.0),
        _axis(c.traffic, 0.1),
        _axis(c.peak_exponent, 0.5),
    )
    result = fit(cases, grid)
    assert result.points == 81
    assert result.calibration == CALIBRATION
    calibration, held_out = result.summary(True), result.summary(False)
    assert calibration["rows"] == len(CALIBRATION_ROWS) == 16
    assert held_out["rows"] == len(cases) - 16
    assert result.objective == pytest.approx(
        objective([e for case, e in result.errors if case.calibration])
    )


def test_the_objective_never_sees_held_out_rows(cases: list[Case]) -> None:
    # Doubling every held-out published value changes no calibration error, so the fit is the
    # same point with the same objective.
    doubled = [c if c.calibration else dataclasses.replace(c, published=2 * c.published)
               for c in cases]  # fmt: skip
    grid = Grid((0.68, 0.69), (375.0,), (1.6, 1.7), (1.0,))
    a, b = fit(cases, grid), fit(doubled, grid)
    assert a.calibration == b.calibration == CALIBRATION
    assert a.objective == b.objective
    assert a.summary(False) != b.summary(False)


def test_bad_inputs_name_the_field(cases: list[Case]) -> None:
    held_out = [c for c in cases if not c.calibration]
    with pytest.raises(PlannerError) as exc:
        fit(held_out, Grid((0.65,), (225.0,), (1.7,), (1.0,)))
    assert exc.value.field == "cases"
    with pytest.raises(PlannerError) as exc:
        Grid((), (225.0,), (1.7,), (1.0,)).points()
    assert exc.value.field == "grid"
    with pytest.raises(PlannerError) as exc:
        objective([])
    assert exc.value.field == "cases"
    with pytest.raises(PlannerError) as exc:
        Calibration(peak_exponent=-1.0)
    assert exc.value.field == "peak_exponent"
