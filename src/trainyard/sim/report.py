"""Report files of one or more simulation runs: markdown, HTML, JSON and PNG plots.

This module owns `write_report` and the plots; the numbers come from `trainyard.sim.metrics`.
Output is reproducible byte for byte: matplotlib's default style on the Agg canvas, fixed
figure sizes and dpi, no software tag or timestamps in the PNG metadata, and timelines
downsampled to at most `MAX_POINTS` points per line (time-weighted bin averages) so that
runs with tens of thousands of jobs plot in seconds.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import style
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from trainyard.sim.metrics import (
    TABLE_LEGEND,
    compare,
    duration_unit,
    format_cell,
    table_rows,
    window,
)
from trainyard.sim.records import SimResult
from trainyard.sim.report_alloc import TOP, plot_allocation

__all__ = ["MAX_POINTS", "timeline", "write_report"]

MAX_POINTS = 2000
_DPI = 100
_SIZE = (8.0, 4.0)

# One block of the report: ("h1" | "h2" | "p", text), ("ul", [(term, text)]),
# ("table", (header, rows)) or ("img", (file, caption)).
Block = tuple[str, Any]

DEFINITIONS: tuple[tuple[str, str], ...] = (
    (
        "window",
        "from the first submission to the last job end (to the cut-off when jobs are "
        "left unfinished); time-weighted metrics integrate over it, sample i holding until "
        "sample i+1 and the last one until the run's end",
    ),
    ("JCT", "job completion time, end - submit, over finished jobs"),
    ("wait (queueing delay)", "first start - submit, over jobs that started"),
    (
        "median / p99",
        "the median is the usual one (mean of the two middle values for an even count); "
        "p99 is the nearest-rank percentile (numpy's inverted_cdf), the sorted value of "
        "rank ceil(0.99 n)",
    ),
    ("makespan", "last job end - first submission"),
    ("utilisation", "allocated GPU-time / total GPU-time over the window"),
    ("utilisation while waiting", "the same, restricted to the time some job is pending"),
    (
        "fragmentation",
        "GPU-time of free GPUs left idle by fragmentation (some waiting job asks "
        "for no more GPUs than are free, yet none can be placed) / total GPU-time, over the time "
        "some job is pending; fragmented share of idle divides by the idle GPU-time instead",
    ),
    (
        "finish-time fairness (rho)",
        "Themis (Mahajan et al., NSDI'20): rho = JCT / T_fair, "
        "T_fair = isolated time x max(1, gpus / (total GPUs / N)), N the time-averaged number of "
        "jobs in the system; rho<=1 (%) is the share of finished jobs with rho <= 1",
    ),
    ("preemptions / restarts", "evictions, and starts after the first, summed over jobs"),
    ("resizes", "restarts of running elastic jobs at another size, summed over jobs"),
    (
        "speedup (goodput)",
        "per finished job, isolated time at the size it asked for / run time (restart "
        "penalties included), averaged; summary.json also has goodput_per_gpu, isolated "
        "GPU-seconds / GPU-seconds held: above 1 when jobs ran faster than asked, below 1 "
        "per GPU when growing cost efficiency",
    ),
    ("GPU-hours", "gpus x run time (restart penalties included) / 3600"),
)


def timeline(result: SimResult, attr: str) -> tuple[np.ndarray, np.ndarray]:
    """A sample field over the window as (times, values) for a steps-post plot, ending at t1.

    At most `MAX_POINTS` samples are drawn as they are; longer timelines become the
    time-weighted averages of `MAX_POINTS` equal bins (exact: the integral of a piecewise
    constant function is piecewise linear, so interpolating it at the bin edges is exact).
    """
    t0, t1 = window(result)
    samples = result.samples
    if not samples or t1 <= t0:
        return np.zeros(0), np.zeros(0)
    ts = np.array([s.t for s in samples] + [max(result.end_time, samples[-1].t)], dtype=float)
    vals = np.array([getattr(s, attr) for s in samples], dtype=float)
    if len(samples) <= MAX_POINTS:
        keep = (ts[1:] > t0) & (ts[:-1] < t1)
        times, values = np.clip(ts[:-1][keep], t0, t1), vals[keep]
    else:
        area = np.concatenate(([0.0], np.cumsum(vals * np.diff(ts))))
        edges = np.linspace(t0, t1, MAX_POINTS + 1)
        times, values = edges[:-1], np.diff(np.interp(edges, ts, area)) / np.diff(edges)
    if not len(times):
        return times, values
    # repeat the last value at t1 so that the last step is drawn to the window's end
    return np.append(times, t1), np.append(values, values[-1])


def _figure() -> tuple[Figure, Axes]:
    fig = Figure(figsize=_SIZE, dpi=_DPI)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    ax.grid(True, alpha=0.3)
    return fig, ax


def _save(fig: Figure, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=_DPI, metadata={"Software": None})


def _plot_timeline(
    results: Sequence[SimResult], labels: Sequence[str], attr: str, path: Path, ylabel: str
) -> None:
    span = max((window(r)[1] for r in results), default=0.0)
    unit, size = duration_unit(span)
    fig, ax = _figure()
    for label, r in zip(labels, results, strict=True):
        t, v = timeline(r, attr)
        if attr == "allocated":
            v = 100 * v / r.total_gpus if r.total_gpus else v
        ax.plot(t / size, v, drawstyle="steps-post", linewidth=1.0, label=label)
    ax.set_xlabel(f"simulated time ({unit})")
    ax.set_ylabel(ylabel)
    if results:
        ax.legend(loc="upper right", fontsize="small")
    _save(fig, path)


def _plot_jct_cdf(results: Sequence[SimResult], labels: Sequence[str], path: Path) -> None:
    all_jcts = [np.sort([j for j in (x.jct for x in r.records) if j is not None]) for r in results]
    longest = max((float(j[-1]) for j in all_jcts if len(j)), default=0.0)
    unit, size = duration_unit(longest)
    shortest = min((float(j[0]) for j in all_jcts if len(j)), default=0.0)
    fig, ax = _figure()
    for label, jcts in zip(labels, all_jcts, strict=True):
        n = len(jcts)
        idx = np.unique(np.linspace(0, n - 1, min(n, MAX_POINTS)).round().astype(int))
        ax.plot(jcts[idx] / size, (idx + 1) / n if n else idx, linewidth=1.2, label=label)
    if shortest > 0 and longest / shortest > 100:
        ax.set_xscale("log")
    ax.set_xlabel(f"JCT ({unit})")
    ax.set_ylabel("share of finished jobs")
    ax.set_ylim(0, 1.02)
    if results:
        ax.legend(loc="lower right", fontsize="small")
    _save(fig, path)


def _plot_queue_waits(summaries: dict[str, dict[str, Any]], path: Path) -> None:
    queues = sorted({q for s in summaries.values() for q in s["queues"]})
    waits = {
        label: [(s["queues"].get(q) or {}).get("queueing_delay_avg") or 0.0 for q in queues]
        for label, s in summaries.items()
    }
    unit, size = duration_unit(max((w for ws in waits.values() for w in ws), default=0.0))
    fig, ax = _figure()
    x = np.arange(len(queues), dtype=float)
    width = 0.8 / max(1, len(waits))
    for i, (label, ws) in enumerate(waits.items()):
        ax.bar(x + (i - (len(waits) - 1) / 2) * width, np.array(ws) / size, width, label=label)
    ax.set_xticks(x, queues)
    ax.margins(y=0.25)  # headroom for the legend above the bars
    ax.set_xlabel("queue")
    ax.set_ylabel(f"average wait ({unit})")
    if waits:
        ax.legend(loc="upper right", fontsize="small")
    _save(fig, path)


def _blocks(results: Sequence[SimResult], summaries: dict[str, dict[str, Any]]) -> list[Block]:
    def distinct(values: Sequence[str]) -> str:
        return ", ".join(dict.fromkeys(values))

    setup = [
        ("workload", distinct([r.workload for r in results])),
        ("cluster", distinct([f"{r.cluster} ({r.total_gpus} GPUs)" for r in results])),
        *(
            (
                f"policy {label}",
                f"{s['policy']}, seed {s['seed']}, {s['jobs']} jobs, "
                f"{s['finished']} finished, {s['rounds']} scheduling rounds",
            )
            for label, s in summaries.items()
        ),
    ]
    q_header = [
        "queue",
        "policy",
        "jobs",
        "JCT avg (h)",
        "wait avg (min)",
        "wait p99 (min)",
        "GPU-hours",
    ]
    q_kinds = (("jct_avg", "h"), ("queueing_delay_avg", "min"), ("queueing_delay_p99", "min"))
    q_rows = [
        [
            q,
            label,
            str(m["jobs"]),
            *(format_cell(m[k], kind) for k, kind in q_kinds),
            format_cell(m["gpu_hours"], "num"),
        ]
        for q in sorted({q for s in summaries.values() for q in s["queues"]})
        for label, s in summaries.items()
        if (m := s["queues"].get(q)) is not None
    ]
    return [
        ("h1", "trainyard simulation report"),
        ("h2", "Setup"),
        ("ul", setup),
        ("h2", "Results"),
        ("table", table_rows(summaries)),
        ("p", "Each column has one unit in every row and every report:"),
        ("ul", list(TABLE_LEGEND)),
        ("h2", "Per queue"),
        ("table", (q_header, q_rows)),
        ("h2", "Plots"),
        (
            "img",
            (
                "utilisation.png",
                "Utilisation (allocated / total GPUs, %) over simulated time, one line per policy.",
            ),
        ),
        ("img", ("queue_length.png", "Pending jobs over simulated time, one line per policy.")),
        (
            "img",
            (
                "jct_cdf.png",
                "Cumulative distribution of job completion times of the finished jobs, per policy.",
            ),
        ),
        ("img", ("queue_waits.png", "Average queueing delay per queue, one bar per policy.")),
        *(
            (
                "img",
                (
                    allocation_file(label),
                    f"GPUs held by each job over simulated time under {label}, stacked: the "
                    f"{TOP} jobs with the most GPU-hours have a band each (an elastic job's "
                    "band widens and narrows as it is grown and shrunk), the rest share the "
                    "grey one.",
                ),
            )
            for label in summaries
        ),
        ("h2", "Definitions"),
        ("ul", list(DEFINITIONS)),
    ]


def _md(blocks: Sequence[Block]) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    out: list[str] = []
    for kind, body in blocks:
        if kind in ("h1", "h2"):
            out.append(f"{'#' * int(kind[1])} {body}")
        elif kind == "p":
            out.append(body)
        elif kind == "ul":
            out.append("\n".join(f"- **{term}**: {text}" for term, text in body))
        elif kind == "table":
            header, rows = body
            rule = ["---", *["---:"] * (len(header) - 1)]  # numbers right-aligned
            lines = [header, rule, *rows]
            out.append("\n".join("| " + " | ".join(cell(c) for c in row) + " |" for row in lines))
        elif kind == "img":
            file, caption = body
            out.append(f"![{caption}]({file})\n\n*{caption}*")
    return "\n\n".join(out) + "\n"


_CSS = (
    "body{font-family:sans-serif;max-width:72em;margin:2em auto;padding:0 1em}"
    "table{border-collapse:collapse;margin:1em 0}"
    "th,td{border:1px solid #ccc;padding:.25em .5em;text-align:right}"
    "th:first-child,td:first-child{text-align:left}"
    "img{max-width:100%}figcaption{font-style:italic}"
)


def _html(blocks: Sequence[Block]) -> str:
    e = html.escape
    out = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        '<head><meta charset="utf-8"><title>trainyard simulation report</title>',
        f"<style>{_CSS}</style></head>",
        "<body>",
    ]
    for kind, body in blocks:
        if kind in ("h1", "h2"):
            out.append(f"<{kind}>{e(body)}</{kind}>")
        elif kind == "p":
            out.append(f"<p>{e(body)}</p>")
        elif kind == "ul":
            items = "".join(f"<li><strong>{e(t)}</strong>: {e(x)}</li>" for t, x in body)
            out.append(f"<ul>{items}</ul>")
        elif kind == "table":
            header, rows = body
            head = "".join(f"<th>{e(c)}</th>" for c in header)
            rows_html = "".join(
                "<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in rows
            )
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows_html}</tbody></table>")
        elif kind == "img":
            file, caption = body
            out.append(
                f'<figure><img src="{e(file)}" alt="{e(caption)}">'
                f"<figcaption>{e(caption)}</figcaption></figure>"
            )
    out.append("</body>\n</html>")
    return "\n".join(out) + "\n"


def allocation_file(label: str) -> str:
    """The allocation plot's file name for the run labelled `label`."""
    return "allocation-" + "".join(c if c.isalnum() or c in "-_." else "_" for c in label) + ".png"


def _drop_stale_allocations(out_dir: Path, written: set[str]) -> None:
    """Remove the allocation plots an earlier report left in `out_dir` for runs this one does
    not have (the console shows every `allocation-*.png` of a report folder as its own).
    Only plain files of that name: nothing else of the folder is touched."""
    for path in out_dir.glob("allocation-*.png"):
        if path.name not in written and path.is_file() and not path.is_symlink():
            path.unlink(missing_ok=True)


def write_report(results: Sequence[SimResult], out_dir: Path) -> list[Path]:
    """Write report.md, report.html, summary.json, four PNG plots and one allocation plot per
    run; return their paths."""
    if not results:
        raise ValueError("write_report needs at least one SimResult")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    summaries = compare(results)
    labels = list(summaries)
    paths = {
        name: out_dir / name
        for name in (
            "report.md",
            "report.html",
            "summary.json",
            "utilisation.png",
            "queue_length.png",
            "jct_cdf.png",
            "queue_waits.png",
        )
    }
    with style.context("default"):
        _plot_timeline(results, labels, "allocated", paths["utilisation.png"], "utilisation (%)")
        _plot_timeline(results, labels, "pending_jobs", paths["queue_length.png"], "pending jobs")
        _plot_jct_cdf(results, labels, paths["jct_cdf.png"])
        _plot_queue_waits(summaries, paths["queue_waits.png"])
        for label, result in zip(labels, results, strict=True):
            path = out_dir / allocation_file(label)
            title = f"{label}: {result.workload} on {result.cluster}"
            plot_allocation(result, path, title, max_points=MAX_POINTS)
            paths[path.name] = path
    _drop_stale_allocations(out_dir, set(paths))
    blocks = _blocks(results, summaries)
    paths["report.md"].write_text(_md(blocks), encoding="utf-8")
    paths["report.html"].write_text(_html(blocks), encoding="utf-8")
    paths["summary.json"].write_text(
        json.dumps(summaries, indent=2, allow_nan=False) + "\n", encoding="utf-8"
    )
    return list(paths.values())
