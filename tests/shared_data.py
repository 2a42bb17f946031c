"""Where the tests find the shared data (`$TRAINYARD_SHARED`, else `../shared` beside the
repository) and the one rule for data missing from it: a failure under CI=true, where no
check may be skipped for a missing input, and a skip on a machine without the folder.

Tests import it by name (`from shared_data import SHARED, require`), as they do `fake_nvml`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("TRAINYARD_SHARED", REPO.parent / "shared"))


def require(path: Path, purpose: str) -> Path:
    """`path` when it exists; else fail under CI=true, or skip saying what it would `purpose`
    ("check the planner")."""
    if path.exists():
        return path
    if os.environ.get("CI") == "true":
        pytest.fail(f"{path} is missing (set TRAINYARD_SHARED); CI must not skip this check")
    pytest.skip(f"{path} not found; set TRAINYARD_SHARED to {purpose}")
