"""Time-model calibration (JSON on stdout): `python bench/planner_calibrate.py [--csv PATH ...]`.

Re-runs the grid search the constants of `trainyard.planner.compute.Calibration` came from
(`trainyard.planner.calibrate.FULL_GRID`, 105,000 points, about 6 minutes on 2 cores) on the
calibration rows of published_configs.csv (default ``$TRAINYARD_SHARED`` or ``../shared``) and
prints the best point, whether it equals the shipped constants, and the errors of every row:
calibration rows, the shared file's held-out rows, and the published runs shipped with the
planner (`trainyard/planner/data/published_runs.csv`, all held out, never fitted on) apart.
`--quick` searches only the neighbours of the shipped constants. `--csv` may be repeated: the
rows of every file are fitted together, a file's rows marked ``split=calibration`` joining the
calibration rows (how a set of extra published runs is tried as calibration data).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time

from trainyard.planner.calibrate import FULL_GRID, Grid, fit
from trainyard.planner.compute import CALIBRATION
from trainyard.planner.evaluate import load_cases, package_csv_path


def neighbours() -> Grid:
    c = CALIBRATION
    return Grid(
        gemm_max=(round(c.gemm_max - 0.01, 2), c.gemm_max, round(c.gemm_max + 0.01, 2)),
        gemm_half=(c.gemm_half - 25, c.gemm_half, c.gemm_half + 25),
        traffic=(round(c.traffic - 0.1, 1), c.traffic, round(c.traffic + 0.1, 1)),
        peak_exponent=(c.peak_exponent - 0.5, c.peak_exponent, c.peak_exponent + 0.5),
    )


def package_summary(calibration: object) -> dict[str, object]:
    """Errors of the package's published runs under the chosen constants (never fitted on)."""
    cases, skipped = load_cases(package_csv_path())
    errors = [(c, c.error(calibration)) for c in cases]  # type: ignore[arg-type]
    absolute = [abs(e) for _, e in errors]
    return {
        "rows": len(errors),
        "median_abs": statistics.median(absolute) if absolute else None,
        "max_abs": max(absolute) if absolute else None,
        "skipped": len(skipped),
        "rows_errors": [
            {
                "table_id": c.table_id,
                "model": c.model_name,
                "gpus": c.layout.gpus,
                "metric": c.metric,
                "error": round(e, 4),
            }
            for c, e in errors
        ],
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--csv", action="append", default=None, help="published_configs.csv (repeatable)"
    )
    parser.add_argument("--quick", action="store_true", help="only the shipped point's neighbours")
    args = parser.parse_args()
    cases, skipped = [], []
    for path in args.csv or [None]:
        found, left = load_cases(path)
        cases += found
        skipped += left
    start = time.perf_counter()
    result = fit(cases, neighbours() if args.quick else FULL_GRID)
    out = {
        "grid_points": result.points,
        "seconds": round(time.perf_counter() - start, 1),
        "best": dataclasses.asdict(result.calibration),
        "objective": round(result.objective, 5),
        "shipped": dataclasses.asdict(CALIBRATION),
        "best_is_shipped": result.calibration == CALIBRATION,
        "calibration_rows": result.summary(True),
        "held_out_rows": result.summary(False),
        "package_runs": package_summary(result.calibration),
        "skipped_rows": len(skipped),
        "rows": [
            {
                "table_id": case.table_id,
                "model": case.model_name,
                "gpus": case.layout.gpus,
                "published": case.published,
                "error": round(err, 4),
                "calibration": case.calibration,
            }
            for case, err in result.errors
        ],
    }
    print(json.dumps(out, indent=2))
