"""Where the tests find the shared data (`$TRAINYARD_SHARED`, else `../shared` beside the
repository) and the one rule for data missing from it: a failure under CI=true (or with
`shared` in TRAINYARD_REQUIRE), where no check may be skipped for a missing input, and a skip
on a machine without the folder (the product itself never needs it).

Tests import it by name (`from shared_data import SHARED, require`), as they do `fake_nvml`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("TRAINYARD_SHARED", REPO.parent / "shared"))


def required() -> bool:
    """Whether missing shared data fails the run: under CI=true, or when TRAINYARD_REQUIRE
    lists `shared`."""
    wanted = {p.strip().lower() for p in os.environ.get("TRAINYARD_REQUIRE", "").split(",")}
    return os.environ.get("CI") == "true" or "shared" in wanted


def require(path: Path, purpose: str) -> Path:
    """`path` when it exists; else fail where the shared data is required (`required`), or
    skip saying what it would `purpose` ("check the planner")."""
    if path.exists():
        return path
    if required():
        pytest.fail(f"{path} is missing (set TRAINYARD_SHARED); CI must not skip this check")
    pytest.skip(f"{path} not found; set TRAINYARD_SHARED to {purpose}")
