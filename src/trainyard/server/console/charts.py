"""Inline SVG charts for the console: lines, steps, stacked areas and bars.

Each chart is one `<figure>`: the SVG (`role="img"`, its title and description say what it
shows), a legend, and a `<details>` table of the same numbers for screen readers and for
copying. Colours come from the style sheet (`.s0` ... `.s7`, eight series that keep their
contrast on the light and the dark theme); no script draws anything. Axis ticks are "nice"
numbers; times are shown in UTC, as `HH:MM`, or as dates when the span is days.

Values come from jobs (their reported loss, for one), so a chart draws whatever finite number
it is given: values are clamped to +-1e300 (an axis's width stays finite), a flat range is
widened by 1 % of its size (1e20 + 1 is 1e20), and the ticks are at most a few dozen, even
where a step is below the values' precision (a job reporting 1e16 and 1e16 + 2 once kept a
server thread in an endless loop).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

WIDTH, HEIGHT = 640, 220
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 26, 28
SERIES = 8  # distinct colours in the style sheet

Point = tuple[float, float]


@dataclass(frozen=True)
class Series:
    name: str
    points: Sequence[Point]


CAP = 1e300  # values are drawn clamped to [-CAP, CAP]


def clamped(v: float) -> float:
    """`v` within [-CAP, CAP] (NaN: 0)."""
    return 0.0 if math.isnan(v) else max(-CAP, min(CAP, v))


def _range(low: float, high: float) -> tuple[float, float]:
    """[low, high] clamped, with high > low: a flat or reversed range widened by 1 or by 1 %
    of its size, whichever is larger."""
    low, high = clamped(low), clamped(high)
    if not high > low:
        high = low + max(abs(low) * 0.01, 1.0)
    return low, high


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About `count` round values covering [low, high] (NaN or infinite ends: [0])."""
    if not math.isfinite(low) or not math.isfinite(high):
        return [0.0]
    low, high = _range(low, high)
    raw = (high - low) / max(count, 1)
    if not raw > 0:  # the width underflowed (denormal ends)
        return [low, high]
    magnitude = 10.0 ** math.floor(math.log10(raw))
    step = next((m * magnitude for m in (1, 2, 2.5, 5) if m * magnitude >= raw), 10 * magnitude)
    if not step > 0 or low + step == low or high - step == high:
        return [low, high]  # a step below the values' precision: the ends alone
    digits = 10 if step >= 1e-8 else 340  # 0.1 + 0.2 shown as 0.3; tiny steps kept whole
    value = math.floor(low / step) * step
    ticks = [round(value, digits)]
    for _ in range(4 * max(count, 1)):  # bounded, whatever the rounding does
        if value >= high - step * 1e-9:  # the last tick at or above `high`
            break
        value += step
        ticks.append(round(value, digits))
    return ticks


def _time_label(ts: float, span: float) -> str:
    moment = dt.datetime.fromtimestamp(ts, dt.UTC)
    if span > 2 * 86400:
        return moment.strftime("%b %d")
    if span > 120:
        return moment.strftime("%H:%M")
    return moment.strftime("%H:%M:%S")


def _value_label(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v / 1000:g}k"
    return f"{v:g}"


class _Frame:
    """Data to pixels for one chart."""

    def __init__(self, x0: float, x1: float, y0: float, y1: float) -> None:
        self.x0, self.x1 = _range(x0, x1)
        self.y0, self.y1 = _range(y0, y1)

    def x(self, v: float) -> float:
        share = (clamped(v) - self.x0) / (self.x1 - self.x0)
        return LEFT + share * (WIDTH - LEFT - RIGHT)

    def y(self, v: float) -> float:
        share = (clamped(v) - self.y0) / (self.y1 - self.y0)
        return HEIGHT - BOTTOM - share * (HEIGHT - TOP - BOTTOM)


def _axes(frame: _Frame, yticks: list[float], time_axis: bool, y_unit: str) -> list[str]:
    parts = []
    for v in yticks:
        y = frame.y(v)
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" '
                     f'y2="{y:.1f}"/>')  # fmt: skip
        parts.append(f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" '
                     f'text-anchor="end">{escape(_value_label(v))}</text>')  # fmt: skip
    span = frame.x1 - frame.x0
    xticks = nice_ticks(frame.x0, frame.x1, 6)
    if time_axis:  # whole minutes, hours or days
        week = 7 * 86400  # past 8 weeks: whole weeks, about 8 ticks
        unit = next((u for u in (1, 10, 60, 300, 900, 3600, 3 * 3600, 6 * 3600, 86400, week)
                     if span / u <= 8), week * math.ceil(span / (8 * week)))  # fmt: skip
        first = math.ceil(frame.x0 / unit) * unit
        xticks = [first + i * unit for i in range(int((frame.x1 - first) // unit) + 1)]
    for v in xticks:
        if not frame.x0 <= v <= frame.x1:
            continue
        x = frame.x(v)
        label = _time_label(v, span) if time_axis else _value_label(v)
        parts.append(f'<text class="tick" x="{x:.1f}" y="{HEIGHT - 8}" '
                     f'text-anchor="middle">{escape(label)}</text>')  # fmt: skip
    parts.append(f'<line class="axis" x1="{LEFT}" x2="{LEFT}" y1="{TOP}" '
                 f'y2="{HEIGHT - BOTTOM}"/>')  # fmt: skip
    parts.append(f'<line class="axis" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{HEIGHT - BOTTOM}" '
                 f'y2="{HEIGHT - BOTTOM}"/>')  # fmt: skip
    if y_unit:
        parts.append(f'<text class="unit" x="4" y="14">{escape(y_unit)}</text>')
    return parts


def _table(series: Sequence[Series], time_axis: bool, y_unit: str) -> str:
    rows = []
    for s in series:
        for x, y in s.points:
            when = (dt.datetime.fromtimestamp(x, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
                    if time_axis else f"{x:g}")  # fmt: skip
            rows.append(f"<tr><td>{escape(s.name)}</td><td>{when}</td><td>{y:.4g}</td></tr>")
    return (
        '<details class="chart-data"><summary>The numbers</summary><table><thead><tr>'
        f"<th>series</th><th>{'time' if time_axis else 'x'}</th><th>{escape(y_unit) or 'value'}"
        f"</th></tr></thead><tbody>{''.join(rows[:500])}</tbody></table></details>"
    )


def _legend(series: Sequence[Series]) -> str:
    if len(series) < 2:
        return ""
    items = "".join(
        f'<li><span class="swatch s{i % SERIES}" aria-hidden="true"></span>{escape(s.name)}</li>'
        for i, s in enumerate(series)
    )
    return f'<ul class="legend">{items}</ul>'


def _figure(title: str, description: str, svg: list[str], legend: str, table: str) -> Markup:
    label = escape(f"{title}: {description}")
    body = "".join(svg)
    return Markup(
        f'<figure class="chart"><figcaption>{escape(title)}</figcaption>'
        f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{label}" '
        f'preserveAspectRatio="xMidYMid meet">{body}</svg>{legend}{table}</figure>'
    )


def line_chart(
    title: str,
    series: Sequence[Series],
    *,
    y_unit: str = "",
    step: bool = False,
    time_axis: bool = True,
    y_min: float | None = 0.0,
) -> Markup:
    """Lines (or steps: a value holds until the next point) over time."""
    points = [p for s in series for p in s.points]
    if not points:
        return Markup(f'<p class="empty">{escape(title)}: nothing reported yet.</p>')
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    low = min(ys) if y_min is None else min(y_min, min(ys))
    yticks = nice_ticks(low, max(ys) if max(ys) > low else low + 1)
    frame = _Frame(min(xs), max(xs), yticks[0], yticks[-1])
    svg = _axes(frame, yticks, time_axis, y_unit)
    for i, s in enumerate(series):
        coords: list[str] = []
        previous: Point | None = None
        for x, y in s.points:
            if step and previous is not None:
                coords.append(f"{frame.x(x):.1f},{frame.y(previous[1]):.1f}")
            coords.append(f"{frame.x(x):.1f},{frame.y(y):.1f}")
            previous = (x, y)
        svg.append(f'<polyline class="line s{i % SERIES}" points="{" ".join(coords)}"/>')
        if len(s.points) == 1:
            x, y = s.points[0]
            svg.append(f'<circle class="dot s{i % SERIES}" cx="{frame.x(x):.1f}" '
                       f'cy="{frame.y(y):.1f}" r="3"/>')  # fmt: skip
    last = ", ".join(f"{s.name} {s.points[-1][1]:.3g}" for s in series if s.points)
    description = f"{len(points)} points; latest {last} {y_unit}".strip()
    return _figure(title, description, svg, _legend(series), _table(series, time_axis, y_unit))


def stacked_chart(title: str, series: Sequence[Series], *, y_unit: str = "") -> Markup:
    """Stacked areas over time (every series on the same x values, in order)."""
    series = [s for s in series if s.points]
    if not series:
        return Markup(f'<p class="empty">{escape(title)}: no usage in this window.</p>')
    xs = [x for x, _ in series[0].points]
    tops = [0.0] * len(xs)
    layers = []
    for s in series:
        bottom = list(tops)
        tops = [t + y for t, (_, y) in zip(tops, s.points, strict=True)]
        layers.append((bottom, list(tops)))
    yticks = nice_ticks(0.0, max(tops) if max(tops) > 0 else 1.0)
    frame = _Frame(xs[0], xs[-1], 0.0, yticks[-1])
    svg = _axes(frame, yticks, True, y_unit)
    for i, (bottom, top) in enumerate(layers):
        upper = [f"{frame.x(x):.1f},{frame.y(y):.1f}" for x, y in zip(xs, top, strict=True)]
        lower = [f"{frame.x(x):.1f},{frame.y(y):.1f}"
                 for x, y in zip(reversed(xs), reversed(bottom), strict=True)]  # fmt: skip
        svg.append(f'<polygon class="area s{i % SERIES}" points="{" ".join(upper + lower)}"/>')
    total = sum(y for s in series for _, y in s.points)
    description = f"{len(series)} series, {total:.3g} {y_unit} in all"
    return _figure(title, description, svg, _legend(series), _table(series, True, y_unit))


def bar_chart(title: str, bars: Sequence[tuple[str, float]], *, y_unit: str = "") -> Markup:
    """One bar per label."""
    if not bars:
        return Markup(f'<p class="empty">{escape(title)}: nothing to show.</p>')
    yticks = nice_ticks(0.0, max(v for _, v in bars) or 1.0)
    frame = _Frame(0, len(bars), 0.0, yticks[-1])
    svg = [
        p for p in _axes(frame, yticks, False, y_unit) if 'text-anchor="middle"' not in p
    ]  # the bars carry their labels
    slot = (WIDTH - LEFT - RIGHT) / len(bars)
    for i, (label, value) in enumerate(bars):
        x = LEFT + i * slot + slot * 0.15
        y = frame.y(value)
        svg.append(f'<rect class="bar s{i % SERIES}" x="{x:.1f}" y="{y:.1f}" '
                   f'width="{slot * 0.7:.1f}" height="{HEIGHT - BOTTOM - y:.1f}"/>')  # fmt: skip
        svg.append(f'<text class="tick" x="{x + slot * 0.35:.1f}" y="{HEIGHT - 8}" '
                   f'text-anchor="middle">{escape(label)}</text>')  # fmt: skip
    description = "; ".join(f"{label} {value:.3g}" for label, value in bars)
    table = _table([Series(label, [(i, v)]) for i, (label, v) in enumerate(bars)], False, y_unit)
    return _figure(title, description + f" {y_unit}", svg, "", table)
