"""Plain-text output for the client commands: aligned tables and a little colour.

The commands a user runs many times a minute (`jobs`, `describe`, `submit`, `wait`) print
through this module instead of rich, whose import alone costs ~30 ms per command (issue 19:
the client must start about as fast as `squeue`). Colour (ANSI) only on a terminal, never
when `NO_COLOR` is set or the output is piped, so scripts read the same text a person sees.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

_CODES = {
    "bold": "1",
    "dim": "2",
    "red": "31",
    "green": "32",
    "yellow": "33",
    "magenta": "35",
    "cyan": "36",
}


def colour_on(stream: object = None) -> bool:
    """Whether to colour output written to `stream` (stdout by default)."""
    out = sys.stdout if stream is None else stream
    isatty = getattr(out, "isatty", None)
    return bool(isatty and isatty()) and "NO_COLOR" not in os.environ


def paint(text: str, style: str | None, on: bool) -> str:
    """`text` in `style` ("bold green", "red", ...) when `on`."""
    if not on or not style:
        return text
    codes = ";".join(_CODES[s] for s in style.split() if s in _CODES)
    return f"\x1b[{codes}m{text}\x1b[0m" if codes else text


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    right: Sequence[str] = (),
    styles: Sequence[Sequence[str | None]] | None = None,
    colour: bool = False,
) -> str:
    """Rows under their headers, columns two spaces apart (columns named in `right` aligned
    right), as `squeue` prints; `styles[i][j]` colours cell j of row i when `colour`."""
    widths = [len(h) for h in headers]
    for row in rows:
        for j, cell in enumerate(row):
            widths[j] = max(widths[j], len(cell))
    align_right = {j for j, h in enumerate(headers) if h in right}

    def line(cells: Sequence[str], style_row: Sequence[str | None] | None) -> str:
        parts = []
        for j, cell in enumerate(cells):
            pad = widths[j] - len(cell)
            text = paint(cell, style_row[j] if style_row else None, colour)
            last = j == len(cells) - 1
            parts.append(
                " " * pad + text if j in align_right else text + ("" if last else " " * pad)
            )
        return "  ".join(parts).rstrip()

    out = [line(headers, ["bold"] * len(headers) if colour else None)]
    out += [line(row, styles[i] if styles else None) for i, row in enumerate(rows)]
    return "\n".join(out)
