"""When a published run was made, and what the training stacks of its time did by default.

This module owns `run_year` (the year a row's run is of) and the defaults of a row's era that
`trainyard.planner.rows` applies where a row does not say: `legacy` (the pre-2023 stacks:
materialised attention scores, whole-layer recompute, neither sequence parallelism nor a
distributed optimizer) and `p2p_split` (whether pipeline sends are split over the
tensor-parallel ranks). Pure: it reads the cells of one row.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from trainyard.planner.cells import flag, integer, row_cell

__all__ = ["legacy", "p2p_split", "run_year"]

# The shared file's Megatron-LM tables from before fused attention (2020-2022), and any row of
# a year before 2023 (`run_year`): unless a row says otherwise they materialise the
# attention scores, recompute whole layers and run neither sequence parallelism nor the
# distributed optimizer.
_LEGACY_TABLES: Final = ("SC21_", "README_2020", "README_2021", "README_MFU_HFU")
# The shared file's tables of Megatron-LM code from before the scatter/gather of pipeline
# sends (27fc468964, 2021-01-20): the README's tables of 2020 and of January 2021 (published
# with 152aab304d, 2021-01-11). SC'21 (its Table 1, README_2021_04) and later runs split them.
_WHOLE_SENDS_TABLES: Final = ("README_2020", "README_2021_01")

_ARXIV: Final = re.compile(r"arxiv[:\s/]*(\d{2})(\d{2})\.\d{4,5}", re.IGNORECASE)
_YEAR: Final = re.compile(r"(?<!\d)(20[0-3]\d)(?!\d)")
# A year in free text only where it reads as one, not as a count ("on 2016 GPUs"): a date
# (2021-04-08, 2021/04), a citation's "(2022)" or "et al., 2022".
_CITED_YEAR: Final = re.compile(
    r"(?<!\d)(20[0-3]\d)[-/](?:0[1-9]|1[0-2])(?!\d)|\((20[0-3]\d)\)|et al\.?,?\s+(20[0-3]\d)"
)


def run_year(row: Mapping[str, str | None]) -> int | None:
    """The year a row's run is of: its `year` cell, else the year in its `date` cell, else the
    latest year its `source` and `notes` cite (an arXiv identifier's YYMM, a date, "(2022)",
    "et al., 2022"; a bare number is not read as a year); None when none is named."""
    stated = integer(row, "year")
    if stated is not None:
        return stated
    dated = _YEAR.search(row_cell(row, "date"))
    if dated:
        return int(dated.group(1))
    text = row_cell(row, "source") + " " + row_cell(row, "notes")
    years = [int(next(y for y in m.groups() if y)) for m in _CITED_YEAR.finditer(text)]
    years += [2000 + int(m.group(1)) for m in _ARXIV.finditer(text)]
    return max(years) if years else None


def legacy(row: Mapping[str, str | None]) -> bool:
    """A run of the pre-2023 stacks: the shared file's old tables, or a year before 2023."""
    year = run_year(row)
    return row_cell(row, "table_id").startswith(_LEGACY_TABLES) or (year or 2023) < 2023


def p2p_split(row: Mapping[str, str | None]) -> bool:
    """Whether the run split its pipeline sends over its tensor-parallel ranks: the
    `scatter_gather` cell (yes/no), else no for the shared file's tables of Megatron-LM code
    before the split and for runs of a year before 2021, else yes."""
    stated = flag(row, "scatter_gather")
    if stated is not None:
        return stated
    old = row_cell(row, "table_id").startswith(_WHOLE_SENDS_TABLES)
    return not (old or (run_year(row) or 2021) < 2021)
