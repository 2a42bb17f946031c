"""Published runs printed as Markdown: the pipe tables of a page read as rows.

This module owns reading a Markdown page (Megatron-Bridge's `docs/performance-summary.md`,
a README's results table) into the same rows a CSV gives `trainyard.planner.evaluate`: one
mapping of header cell to cell per table line. Text handling; what the cells mean is
`trainyard.planner.rows` (and `cell_names`, which says whether a heading names a GPU, a
precision or adapter training).

* A table is a header line of '|'-separated cells, a delimiter line of dashes (`|---|:--:|`)
  and the lines after it that hold a '|', with or without the outer pipes. Escaped pipes
  (`\\|`) stay in their cell; code blocks hold neither tables nor headings.
* Each row carries its line in the page as `_line` (no header cell reads as a name with a
  leading '_'), so a skipped row is named by where it is.
* Cells lose their Markdown: footnote references (`661[^note]`), links (`[text](url)` is
  text), emphasis and code marks, and HTML line breaks.
* The headings above a table give what its columns leave out, since the pages name the model,
  the system and the release in headings rather than in every line:
  - a heading "Label: value" (Megatron-Bridge's "Model: LLAMA3_70B", "System: DGX-GB300")
    is the column Label, the nearest such heading winning;
  - `model`, failing a "Model:" heading, is the model a preset's name in the nearest heading
    that holds one gives ("## Llama 3.1 405B on H100" is Llama 3.1 405B), else the nearest
    heading without a label;
  - `table_id`: the shallowest heading under the page's title (Bridge's container release,
    "26.06 NeMo Container"), else the title;
  - `training`: "lora" for a table under a heading that names LoRA, PEFT or adapters, which
    the planner does not price (`rows` skips such rows with the reason);
  - `gpu_type` and `precision` from a heading that names them ("### FP8 Performance",
    "## Results on DGX H100").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

from trainyard.planner.cell_names import gpu_name, names_adapters, precision_cell
from trainyard.planner.errors import PlannerError
from trainyard.planner.presets import preset_in

__all__ = ["is_markdown", "markdown_rows"]

_DELIMITER: Final = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)+\|?\s*$")
_HEADING: Final = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE: Final = re.compile(r"^\s{0,3}(```|~~~)")
# "Model: LLAMA3_70B", "System: DGX-GB300": a short label, a colon, the value.
_LABELLED: Final = re.compile(r"^([A-Za-z][\w ./-]{0,30}?)\s*:\s*(\S.*)$")
_MARKUP: Final = (
    (re.compile(r"\[\^[^\]]*\]"), ""),  # footnote references
    (re.compile(r"!?\[([^\]]*)\]\([^)]*\)"), r"\1"),  # links and images: their text
    (re.compile(r"<br\s*/?>", re.IGNORECASE), " "),
    (re.compile(r"<[^>]+>"), ""),
    (re.compile(r"(\*\*|__|\*|`|~~)"), ""),
)
_SUFFIXES: Final = (".md", ".markdown", ".mdown", ".mkd")
_PRECISION_WORDS: Final = re.compile(r"\b(bf16|bfloat16|fp16|float16|(?:mx)?fp8)\b", re.I)


def is_markdown(name: str, text: str) -> bool:
    """Whether a file is Markdown: by its suffix, or by a table delimiter line (`|---|---|`),
    which no CSV of published runs holds."""
    if name.lower().endswith(_SUFFIXES):
        return True
    return any(_DELIMITER.match(line) for line in text.splitlines())


def _plain(text: str) -> str:
    """Text without its Markdown (footnote references, links, HTML, emphasis), spaces joined."""
    for pattern, repl in _MARKUP:
        text = pattern.sub(repl, text)
    return " ".join(text.split())


def _cells(line: str) -> list[str]:
    """A table line's cells, Markdown removed."""
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    return [_plain(cell.replace("\\|", "|")) for cell in re.split(r"(?<!\\)\|", body)]


def _context(headings: list[tuple[int, str]], column: Callable[[str], str]) -> dict[str, str]:
    """What the headings above a table say of its lines (module docstring)."""
    out: dict[str, str] = {}
    under_title = [text for level, text in headings if level > 1]
    titles = under_title or [text for _, text in headings]
    if titles:
        out["table_id"] = titles[0]
    plain = [text for _, text in headings if not _LABELLED.match(text)]
    if plain:  # the nearest heading naming a preset, else the nearest heading
        named = next((found for found in map(preset_in, reversed(plain)) if found), None)
        out["model"] = named or plain[-1]
    for _, text in headings:  # outer to inner: the nearest "Label: value" wins
        found = _LABELLED.match(text)
        if found:
            out[column(found.group(1))] = found.group(2).strip()
    if any(names_adapters(text) for _, text in headings):
        out["training"] = "lora"
    for _, text in headings:  # outer to inner: the nearest heading naming one wins
        if _reads_as(text, "gpu_type", gpu_name):
            out["gpu_type"] = text
        one_precision = len({m.lower() for m in _PRECISION_WORDS.findall(text)}) == 1
        if one_precision and _reads_as(text, "precision", precision_cell):
            out["precision"] = text  # "BF16 vs FP8" names none
    return out


def _reads_as(text: str, field: str, read: Callable[[dict[str, str | None]], object]) -> bool:
    """Whether a heading names a `field` ("H100 FP8 Performance" a GPU and a precision)."""
    try:
        read({field: text})
    except PlannerError:
        return False
    return True


def markdown_rows(
    text: str, column: Callable[[str], str] = str.lower
) -> list[dict[str, str | None]]:
    """Every table line of a Markdown page as {column: cell}, `column` naming each header
    cell, with what the headings say (model, system, table id, kind of training) where the
    table's own columns do not give them."""
    rows: list[dict[str, str | None]] = []
    headings: list[tuple[int, str]] = []
    lines = text.splitlines()
    fenced = False  # inside a ``` or ~~~ code block, whose '#' lines are no headings
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if _FENCE.match(line):
            fenced = not fenced
            continue
        heading = None if fenced else _HEADING.match(line)
        if heading:
            level = len(heading.group(1))
            headings = [h for h in headings if h[0] < level] + [(level, _plain(heading.group(2)))]
        elif not fenced and "|" in line and i < len(lines) and _DELIMITER.match(lines[i]):
            header = [column(cell) for cell in _cells(line)]
            context = _context(headings, column)
            i += 1
            while i < len(lines) and "|" in lines[i] and lines[i].strip():
                row: dict[str, str | None] = dict(zip(header, _cells(lines[i]), strict=False))
                row["_line"] = str(i + 1)
                for key, value in context.items():
                    if not (row.get(key) or "").strip():
                        row[key] = value
                rows.append(row)
                i += 1
    return rows
