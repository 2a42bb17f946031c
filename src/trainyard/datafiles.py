"""Where the shared data folder is, and how a data file named on the command line is found.

The data kept outside the repository (traces, throughput profiles, the planner's published
figures) lives in one folder: ``$TRAINYARD_SHARED``, else ``../shared`` from the working
directory (beside the repository when run from its root). A command that takes a data file
uses the path as given when it exists; otherwise a relative path is tried under that folder
(and under the subfolders the command names, e.g. ``traces`` for workloads). A path that is
found nowhere is a `DataFileNotFoundError` naming every place tried, in order.

`trainyard simulate --workload` (through `trainyard.sim.readers`) and `trainyard plan
--evaluate` resolve their files with `locate_data_file`; the planner's default data files
sit under `shared_root`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "DataFileNotFoundError",
    "data_file_candidates",
    "find_data_file",
    "locate_data_file",
    "shared_root",
]


class DataFileNotFoundError(FileNotFoundError):
    """No candidate of a data path is a file; `tried` lists them, in the order tried."""

    def __init__(self, raw: str | Path, tried: Sequence[Path]) -> None:
        self.raw = str(raw)
        self.tried = tuple(tried)
        super().__init__(f"{raw} not found (tried {', '.join(str(p) for p in self.tried)})")


def shared_root() -> Path:
    """``$TRAINYARD_SHARED``, else ``../shared`` from the working directory."""
    env = os.environ.get("TRAINYARD_SHARED")
    return Path(env) if env else Path.cwd().parent / "shared"


def data_file_candidates(
    raw: str | Path, shared: Path | None, subfolders: Sequence[str] = ("",)
) -> list[Path]:
    """The places `raw` may name, in order: itself, then (a relative path, `shared` given)
    `shared/SUB/raw` for each of `subfolders` ("" is `shared` itself)."""
    path = Path(raw).expanduser()
    candidates = [path]
    if shared is not None and not path.is_absolute():
        candidates += [shared / sub / path if sub else shared / path for sub in subfolders]
    return candidates


def find_data_file(
    raw: str | Path, shared: Path | None, subfolders: Sequence[str] = ("",)
) -> Path | None:
    """The first of `data_file_candidates` that is a file, or None."""
    for candidate in data_file_candidates(raw, shared, subfolders):
        if candidate.is_file():
            return candidate
    return None


def locate_data_file(
    raw: str | Path, shared: Path | None, subfolders: Sequence[str] = ("",)
) -> Path:
    """The first of `data_file_candidates` that is a file; `DataFileNotFoundError` (naming
    every candidate) when none is."""
    found = find_data_file(raw, shared, subfolders)
    if found is None:
        raise DataFileNotFoundError(raw, data_file_candidates(raw, shared, subfolders))
    return found
