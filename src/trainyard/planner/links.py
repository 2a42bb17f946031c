"""Measured links: reading nccl-tests output (`all_reduce_perf`, `all_gather_perf`, ...) or the
platform's own probe (`trainyard probe links`), fitting latency and bandwidth per link level,
and the `collectives.LinkSet` the planner times collectives with (`trainyard plan --links`).

This module owns the parsing and the fit; it reads one file and is otherwise pure.

nccl-tests output (NVIDIA/nccl-tests, `doc/PERFORMANCE.md`): comment lines start with ``#``;
``#  Rank  N Group  G Pid  P on HOST device  D [...] NAME`` lines name each rank's host, so the
ranks and nodes of the run are counted from them; a data line is ``size count type redop root
time algbw busbw #wrong time algbw busbw #wrong`` (out-of-place, then in-place; older versions
have no root column; a run of in-place tests only prints N/A for the out-of-place figures, and
RCCL's adds text columns, algo proto nchannels, which are not read). A file may hold several
tests run one after another, each from its header on (`parse_nccl_file`; a test that prints no
rank lines has the previous one's ranks). The collective comes from the section's
``all_reduce_perf``-style name when its text names one, else from `collective` (the file's
name, or `plan --links-collective`). Sizes are bytes, times microseconds, bandwidths GB/s. A
line that starts with a size but is not a whole data line (a file cut short) is an error, as
is a sweep whose largest message is under `SMALLEST_LARGEST` (16 MiB): no link shows its
bandwidth below it.

The probe's JSON (`trainyard.probe.links`) has the same facts: ``{"collectives": [{"collective":
"all_reduce", "ranks": R, "nodes": N, "sizes": [[bytes, time_us], ...]}, ...]}``.

Fit. For each run, time(S) = α + S/β by least squares on the relative error (every size counts
alike from 8 B to GiB). β·busbw_factor is the bus bandwidth the run tends to, α its latency.
A run on one node gives the intra-node link: bandwidth = that bus bandwidth, per-step latency
(α - NCCL's base latency)/steps (a ring all-reduce takes 2(n-1) steps; `collectives`). A run
across nodes gives the network link: one GPU's share is the bus bandwidth over the ranks per
node when the network is the bottleneck (the ring's inter-node hops share the node's NICs;
`collectives._ring_bus_bw`), and its per-step latency what α leaves after the intra-node
steps. A level with no run keeps the GPU catalogue's figure. When noise hides the trend (a negative
slope or latency), the smallest message gives α and the largest the bandwidth. A sweep whose
smallest message is over `LARGEST_SMALLEST` (1 MiB) measures no latency: NCCL's per-step
figure for the level is kept, and the fit says so (`LinkFit.latency_measured`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from trainyard.planner.collectives import COLLECTIVES, Link, LinkSet, busbw_factor
from trainyard.planner.errors import PlannerError

__all__ = [
    "LinkFit", "Run", "fit_run", "load_links", "parse_nccl_file", "parse_nccl_tests", "parse_probe",
]  # fmt: skip

_BASE_LATENCY_US: Final = 8.4  # NCCL baseLatency Ring/Simple (collectives._BASE_LATENCY_US)
# NCCL's hwLatency per ring step with the Simple protocol (`collectives.nvlink`, `ib_link`):
# kept for a level whose sweep starts too large to show its latency
_NVLINK_STEP_US: Final = 3.4
_NETWORK_STEP_US: Final = 14.0
_RANK_LINE: Final = re.compile(r"#\s*Rank\s+\d+\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)")
_NAMES: Final = {
    "all_reduce": "all_reduce",
    "allreduce": "all_reduce",
    "all_gather": "all_gather",
    "allgather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "reducescatter": "reduce_scatter",
    "broadcast": "broadcast",
}


@dataclass(frozen=True)
class Run:
    """One measured sweep: the collective, its ranks and nodes, and (bytes, time_us) points."""

    collective: str
    ranks: int
    nodes: int
    points: tuple[tuple[int, float], ...]

    @property
    def ranks_per_node(self) -> int:
        """Ranks on each node (the run's ranks over its nodes)."""
        return max(1, self.ranks // self.nodes)


@dataclass(frozen=True)
class LinkFit:
    """A run's fit: latency α (us), asymptotic bus bandwidth (GB/s), the link it implies and the
    relative error of the fit (median and max over the sizes)."""

    run: Run
    alpha_us: float
    busbw_gbps: float
    link: Link
    level: str
    median_error: float
    max_error: float
    latency_measured: bool = True  # False: the sweep's smallest message hid it (NCCL's kept)


def _collective(text: str, default: str | None) -> str:
    found = re.search(r"(all_reduce|all_gather|reduce_scatter|broadcast)_perf", text)
    name = found.group(1) if found else default
    if name is None:
        raise PlannerError(
            "collective",
            "the file does not say which collective it measured (no all_reduce_perf-style "
            "name in it or in its file name): give it with --links-collective, e.g. "
            "all_reduce, or name the file after the binary (all_reduce_perf.txt)",
        )
    key = name.lower().replace("-", "_")
    if key not in _NAMES:
        raise PlannerError(
            "collective", f"unknown collective {name!r}; use one of {', '.join(COLLECTIVES)}"
        )
    return _NAMES[key]


def _data_point(tokens: list[str]) -> tuple[int, float] | None:
    """(size, time) of a data line, or None when the line is not a complete one: the
    out-of-place time, else the in-place one (a run of in-place tests only prints N/A for the
    other); text columns after the figures (RCCL's algo, proto, nchannels) are not read."""
    if len(tokens) < 8 or not tokens[0].isdigit() or not tokens[1].isdigit():
        return None
    numbers: list[float | None] = []
    for token in tokens[2:]:
        if token.upper() == "N/A":
            numbers.append(None)
            continue
        try:
            numbers.append(float(token))
        except ValueError:
            if numbers:
                break  # text columns after the figures
            continue  # the type and redop columns
    # [root] time algbw busbw #wrong time algbw busbw #wrong
    if len(numbers) >= 9:
        numbers = numbers[1:9]
    if len(numbers) < 8:
        return None
    time_us = numbers[0] if numbers[0] is not None else numbers[4]
    if time_us is None or not _usable(int(tokens[0]), time_us):
        return None
    return int(tokens[0]), time_us


# What a measured point may be: a message of 1 byte to 1 PiB, a time of a nanosecond to a
# day (in microseconds). Beyond these a point is a typo or a broken run, and the fit's
# weights (1 / time^2) would overflow.
_SIZES: Final = (1, 2**50)
_TIMES_US: Final = (1e-3, 86_400e6)
MAX_RANKS: Final = 2**20


def _usable(size: int, time_us: float) -> bool:
    return _SIZES[0] <= size <= _SIZES[1] and _TIMES_US[0] <= time_us <= _TIMES_US[1]


# Where a test of one collective begins in a file of several (nccl-tests' header line, or the
# line some wrappers print before it).
_SECTION: Final = re.compile(r"#\s*(Collective test starting|nThread\s+\d)")
# A sweep whose largest message is smaller reaches no link's bandwidth (NVLink's ring needs
# messages of tens of MB; nccl-tests' own examples go to 128 MB and beyond), and one whose
# smallest is larger measures no latency.
SMALLEST_LARGEST: Final = 16 * 2**20
LARGEST_SMALLEST: Final = 1 * 2**20


def parse_nccl_tests(text: str, collective: str | None = None) -> Run:
    """The sweep of one nccl-tests output (see the module docstring). Raises `PlannerError`
    naming what is missing."""
    runs = parse_nccl_file(text, collective)
    return runs[0]


def parse_nccl_file(text: str, collective: str | None = None) -> list[Run]:
    """Every sweep of an nccl-tests output, one per collective test in it (the binaries run
    one after another into one file: a section each, from its header on). Raises
    `PlannerError` naming what is missing, or the line that is not a complete data line (a
    file cut short)."""
    sections: list[list[str]] = [[]]
    for line in text.splitlines():
        starts = _SECTION.match(line.lstrip()) is not None
        data_seen = any(not x.lstrip().startswith("#") and x.strip() for x in sections[-1])
        if starts and data_seen:
            sections.append([])
        sections[-1].append(line)
    runs: list[Run] = []
    hosts: list[str] = []
    for lines in sections:
        run, hosts = _section(lines, collective, hosts)
        runs.append(run)
    return runs


def _section(lines: list[str], collective: str | None, before: list[str]) -> tuple[Run, list[str]]:
    """One test's sweep and the hosts of its ranks (`before`'s, the previous test's in the
    same file, when it prints no rank lines of its own: the same job ran both)."""
    hosts: list[str] = []
    points: list[tuple[int, float]] = []
    for number, line in enumerate(lines, start=1):
        found = _RANK_LINE.search(line)
        if found:
            hosts.append(found.group(1))
            continue
        if line.lstrip().startswith("#") or not line.strip():
            continue
        tokens = line.split()
        point = _data_point(tokens)
        if point is not None:
            points.append(point)
        elif tokens[0].isdigit():  # a size, then not a whole data line
            raise PlannerError(
                "links",
                f"{line.strip()[:60]!r} is not a complete data line"
                + (" (the file ends there: cut short?)" if number == len(lines) else ""),
            )
    text = "\n".join(lines)
    if not points:
        raise PlannerError(
            "links", "no data lines (size count type ... time algbw busbw) in the nccl-tests output"
        )
    hosts = hosts or before
    if not hosts:
        raise PlannerError(
            "links",
            "no '#  Rank N Group G Pid P on HOST' lines: the ranks and nodes of the run are "
            "unknown (keep nccl-tests' header in the file)",
        )
    name = _collective(text, collective)
    largest = max(size for size, _ in points)
    if largest < SMALLEST_LARGEST:
        raise PlannerError(
            "links",
            f"the sweep's largest message is {largest:,} bytes: a link's bandwidth shows only "
            f"from about {SMALLEST_LARGEST // 2**20} MiB on (run nccl-tests with -e 1G or more)",
        )
    run = Run(name, len(hosts), len(set(hosts)), tuple(points))
    return run, hosts


def parse_probe(data: Any) -> list[Run]:
    """The sweeps of a `trainyard probe links` result (parsed JSON)."""
    if not isinstance(data, dict) or not isinstance(data.get("collectives"), list):
        raise PlannerError("links", "a probe result needs a 'collectives' list")
    runs = []
    for i, entry in enumerate(data["collectives"]):
        where = f"collectives[{i}]"
        if not isinstance(entry, dict):
            raise PlannerError(where, "must be a mapping")
        try:
            sizes = [(_whole(b), float(t)) for b, t in entry["sizes"]]
            run = Run(
                _NAMES.get(str(entry["collective"]), ""),
                _whole(entry["ranks"]),
                _whole(entry["nodes"]),
                tuple((b, t) for b, t in sizes if t > 0),
            )
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise PlannerError(where, f"needs collective, ranks, nodes and sizes: {exc}") from None
        if not run.collective or not 1 <= run.nodes <= run.ranks <= MAX_RANKS or not run.points:
            raise PlannerError(
                where,
                f"needs a known collective, 1 <= nodes <= ranks <= {MAX_RANKS} and sizes",
            )
        bad = [(b, t) for b, t in run.points if not _usable(b, t)]
        if bad:
            raise PlannerError(
                where,
                f"size {bad[0][0]} bytes, time {bad[0][1]:g} us is not a measurement: sizes "
                f"are {_SIZES[0]} to {_SIZES[1]} bytes, times {_TIMES_US[0]:g} us to a day",
            )
        runs.append(run)
    return runs


def _whole(value: Any) -> int:
    """A whole number from JSON: 8 or 8.0, not 8.7 nor true."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise ValueError(f"{value!r} is not a whole number")
    return int(value)


def _least_squares(points: tuple[tuple[int, float], ...]) -> tuple[float, float]:
    """α (us) and 1/β (us per byte) minimising the squared relative error."""
    # Minimise sum(((a + x*S) - t)^2 / t^2): normal equations in (a, x), weights 1/t^2.
    s11 = s12 = s22 = r1 = r2 = 0.0
    for size, t in points:
        w = 1.0 / (t * t)
        s11 += w
        s12 += w * size
        s22 += w * size * size
        r1 += w * t
        r2 += w * size * t
    det = s11 * s22 - s12 * s12
    if det <= 0:
        raise PlannerError("links", "the sweep needs at least two different message sizes")
    alpha = (r1 * s22 - r2 * s12) / det
    slope = (s11 * r2 - s12 * r1) / det
    if slope <= 0 or alpha < 0:
        # Noise (a busy machine) hid the trend: the largest message gives the bandwidth, the
        # smallest the latency.
        (small, t_small), (large, t_large) = min(points), max(points)
        alpha = t_small
        slope = max(t_large - t_small, t_large * 0.01) / max(large - small, 1)
    return max(0.0, alpha), slope


def fit_run(run: Run) -> LinkFit:
    """Latency and bandwidth of one run and the link they imply (see the module docstring)."""
    if run.ranks < 2:
        raise PlannerError("links", "a run of one rank measures no link")
    alpha, slope = _least_squares(run.points)
    algbw = 1.0 / slope / 1e3  # GB/s: bytes per us / 1e3
    busbw = algbw * busbw_factor(run.collective, run.ranks)
    rounds = 2 if run.collective == "all_reduce" else 1
    errors = [abs(alpha + slope * size - t) / t for size, t in run.points]
    errors.sort()
    spare = max(0.0, alpha - _BASE_LATENCY_US)
    measured = min(size for size, _ in run.points) <= LARGEST_SMALLEST
    if run.nodes == 1:
        steps = rounds * (run.ranks - 1)
        step = spare / steps if measured else _NVLINK_STEP_US
        link, level = Link(busbw, latency_us=step), "intra"
    else:
        intra_steps = rounds * (run.ranks - run.nodes)
        inter_steps = rounds * (run.nodes - 1)
        per_inter = max(0.0, spare - intra_steps * _NVLINK_STEP_US) / inter_steps
        step = per_inter if measured else _NETWORK_STEP_US
        link, level = Link(busbw / run.ranks_per_node, latency_us=step), "inter"
    return LinkFit(run, alpha, busbw, link, level, errors[len(errors) // 2], errors[-1], measured)


def load_links(path: str | Path, collective: str | None = None) -> tuple[LinkSet, list[LinkFit]]:
    """The `LinkSet` a file implies (nccl-tests output or a probe's JSON) and the fits behind
    it. A level measured by several runs keeps the one with most ranks. Raises `PlannerError`
    for a file it cannot use."""
    file = Path(path)
    if not file.is_file():
        raise PlannerError("links", f"file {file} not found")
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlannerError("links", f"{file} cannot be read as text: {exc}") from None
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:  # ValueError: incl. a 5,000-digit number
            raise PlannerError("links", f"{file} is not valid JSON: {exc}") from None
        try:
            runs = parse_probe(data)
        except PlannerError as exc:
            raise PlannerError("links", f"{file}: {exc.field}: {exc.message}") from None
    else:
        runs = parse_nccl_file(text, collective or _collective_from_name(file.name))
    fits = [fit_run(run) for run in runs if run.ranks > 1]
    if not fits:
        raise PlannerError("links", f"{file} has no run of two or more ranks")
    chosen: dict[str, LinkFit] = {}
    for fit in fits:
        if fit.level not in chosen or fit.run.ranks > chosen[fit.level].run.ranks:
            chosen[fit.level] = fit
    intra = chosen["intra"].link if "intra" in chosen else None
    inter = chosen["inter"].link if "inter" in chosen else None
    return LinkSet(intra=intra, inter=inter, source=str(file)), fits


def _collective_from_name(name: str) -> str | None:
    found = re.search(r"(all_reduce|all_gather|reduce_scatter|broadcast)", name)
    return found.group(1) if found else None
