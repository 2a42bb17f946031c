"""The simulator's reports in the console: what `trainyard simulate --report DIR` wrote.

`trainyard up --sim-reports DIR` (repeatable; default `<home>/sim-reports`) names folders
that are a report (they hold `summary.json`) or hold reports one level down. A report is
shown by its folder's name: the comparison table the simulator prints (`sim.metrics`'
`table_rows`, with its legend), each run's figures, and its plots. Only the files the
report names are served (`FILES` and `allocation-*.png`), never another path.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FILES = ("utilisation.png", "queue_length.png", "jct_cdf.png", "queue_waits.png")
_ALLOCATION = re.compile(r"allocation-[A-Za-z0-9_.-]+\.png")
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")


@dataclass(frozen=True)
class Report:
    name: str
    path: Path
    modified: float
    runs: list[str]


def _report(path: Path, name: str) -> Report | None:
    summary = path / "summary.json"
    try:
        data = json.loads(summary.read_text())
        modified = summary.stat().st_mtime
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    return Report(name, path, modified, [str(k) for k in data])


def reports(roots: tuple[Path, ...]) -> list[Report]:
    """Every report under the roots, newest first (names are unique: the first wins)."""
    found: dict[str, Report] = {}
    for root in roots:
        candidates = [(root, root.name)]
        try:
            candidates += [(p, p.name) for p in sorted(root.iterdir()) if p.is_dir()]
        except OSError:
            continue
        for path, name in candidates:
            if _NAME.fullmatch(name) and name not in found:
                report = _report(path, name)
                if report is not None:
                    found[name] = report
    return sorted(found.values(), key=lambda r: (-r.modified, r.name))


def find(roots: tuple[Path, ...], name: str) -> Report | None:
    if not _NAME.fullmatch(name):
        return None
    return next((r for r in reports(roots) if r.name == name), None)


def details(report: Report) -> dict[str, Any]:
    """What the report page shows."""
    from trainyard.sim.metrics import TABLE_LEGEND, table_rows  # (numpy: on this page only)

    summaries = json.loads((report.path / "summary.json").read_text())
    header, rows = table_rows(summaries)
    plots = [f for f in FILES if (report.path / f).is_file()]
    plots += sorted(
        p.name for p in report.path.glob("allocation-*.png") if _ALLOCATION.fullmatch(p.name)
    )
    scalars = {
        label: {k: v for k, v in s.items() if isinstance(v, int | float | str)}
        for label, s in summaries.items()
    }
    return {"header": header, "rows": rows, "legend": TABLE_LEGEND, "plots": plots,
            "summaries": scalars}  # fmt: skip


def file(report: Report, name: str) -> Path | None:
    """A plot of the report, by name; None for any other name."""
    if name in FILES or _ALLOCATION.fullmatch(name):
        path = report.path / name
        return path if path.is_file() else None
    return None
