"""Report files: present, valid, mention every policy and metric, and reproducible byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from trainyard.sim.metrics import summarize
from trainyard.sim.records import JobRecord, Sample, SimResult
from trainyard.sim.report import MAX_POINTS, timeline, write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
NAMES = [
    "report.md",
    "report.html",
    "summary.json",
    "utilisation.png",
    "queue_length.png",
    "jct_cdf.png",
    "queue_waits.png",
    "allocation-fifo.png",
    "allocation-srtf.png",
    "allocation-gavel_fair.png",
]


def run(policy: str, stretch: float, seed: int = 0) -> SimResult:
    """Three jobs on 2 GPUs (two queues); `stretch` scales every time."""
    k = stretch
    records = (
        JobRecord("a", "prod", 1, 0, 0, 10 * k, 10 * k, 0, 0, 10, allocation=((0, 1), (10 * k, 0))),
        JobRecord(
            "b",
            "prod",
            2,
            0,
            10 * k,
            20 * k,
            10 * k,
            0,
            0,
            10,
            allocation=((10 * k, 2), (20 * k, 0)),
        ),
        JobRecord(
            "c",
            "dev",
            1,
            2,
            2,
            28 * k,
            16 * k,
            1,
            1,
            14,
            allocation=((2, 1), (10 * k, 0), (20 * k, 1), (28 * k, 0)),
        ),
    )
    samples = (
        Sample(0, 1, 1, 2, 0),
        Sample(2, 2, 1, 2, 0),
        Sample(10 * k, 2, 1, 1, 0),
        Sample(20 * k, 1, 0, 0, 0),
        Sample(28 * k, 0, 0, 0, 0),
    )
    return SimResult(
        "tiny-trace", "two-gpus", policy, seed, 2, records, samples, 28 * k, 9, ("dev", "prod")
    )


def runs() -> list[SimResult]:
    return [run("fifo", 1.0), run("srtf", 1.5), run("gavel|fair", 2.0)]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    """One report of three policies, written once for the tests that only read it."""
    out = tmp_path_factory.mktemp("report") / "out"
    return out, write_report(runs(), out)


def test_writes_all_files(report: tuple[Path, list[Path]]) -> None:
    out, paths = report
    assert [p.name for p in paths] == NAMES
    for p in paths:
        assert p.parent == out
        assert p.stat().st_size > 0, p
    for p in paths[3:]:
        assert p.read_bytes().startswith(PNG_MAGIC), p


def test_summary_json(report: tuple[Path, list[Path]]) -> None:
    out = report[0]
    data = json.loads((out / "summary.json").read_text())
    assert list(data) == ["fifo", "srtf", "gavel|fair"]
    assert data["fifo"] == summarize(run("fifo", 1.0))


def test_markdown_mentions_policies_metrics_and_plots(report: tuple[Path, list[Path]]) -> None:
    out = report[0]
    md = (out / "report.md").read_text()
    for text in ("tiny-trace", "two-gpus (2 GPUs)", "fifo", "srtf", "gavel\\|fair"):
        assert text in md, text
    for metric in (
        "JCT avg",
        "JCT p99",
        "wait avg",
        "wait p99",
        "makespan",
        "JCT avg (h)",
        "wait avg (min)",
        "makespan (h)",
        "util (%)",
        "util waiting (%)",
        "frag (%)",
        "rho avg",
        "rho max",
        "rho<=1 (%)",
        "preempt",
        "GPU-hours",
        "utilisation",
        "fragmentation",
        "finish-time fairness",
        "nearest-rank",
    ):
        assert metric.replace("|", "\\|") in md, metric
    for png in NAMES[3:]:
        assert f"]({png})" in md
    assert md.count("| prod |") == 3 and md.count("| dev |") == 3  # per-queue rows


def test_html_is_self_contained_and_references_pngs(report: tuple[Path, list[Path]]) -> None:
    out = report[0]
    page = (out / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>")
    for png in NAMES[3:]:
        assert f'<img src="{png}"' in page
    assert "gavel|fair" in page and "fifo" in page and "srtf" in page
    assert "http://" not in page and "https://" not in page
    assert "<script" not in page and "<link" not in page
    # the same content as the markdown: every table cell of the markdown is in the HTML
    assert page.count("<table>") == 2 and page.count("<figure>") == 7


def test_byte_identical_twice(tmp_path: Path) -> None:
    first = write_report(runs(), tmp_path / "one")
    second = write_report(runs(), tmp_path / "two")
    for a, b in zip(first, second, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name
    again = write_report(runs(), tmp_path / "one")  # overwriting in place is stable too
    assert [p.read_bytes() for p in again] == [p.read_bytes() for p in second]


def test_png_has_no_software_or_date(report: tuple[Path, list[Path]]) -> None:
    out = report[0]
    data = (out / "utilisation.png").read_bytes()
    assert b"matplotlib" not in data.lower() and b"tIME" not in data


def test_single_run_and_edge_cases(tmp_path: Path) -> None:
    empty = SimResult("none", "c", "fifo", 0, 4, (), (), 0.0, 0)
    stuck = SimResult(
        "w", "c", "lazy", 0, 4, (JobRecord("z", "q", 1, 0, None, None, 0, 0, 0, 1),), (), 5.0, 1
    )
    paths = write_report([empty, stuck], tmp_path)
    assert all(p.stat().st_size > 0 for p in paths)
    with pytest.raises(ValueError):
        write_report([], tmp_path)


def test_timeline_exact_and_downsampled() -> None:
    t, v = timeline(run("fifo", 1.0), "allocated")
    assert t.tolist() == [0, 2, 10, 20, 28]  # last step repeated at the window's end
    assert v.tolist() == [1, 2, 2, 1, 1]
    # 40,000 alternating samples (0, 2, 0, 2, ... every second) become MAX_POINTS bin averages
    n = 40_000
    samples = tuple(Sample(float(i), 2 * (i % 2), 0, 0, 0) for i in range(n))
    big = SimResult(
        "w",
        "c",
        "p",
        0,
        2,
        (JobRecord("a", "q", 1, 0, 0, float(n), 1, 0, 0, 1),),
        samples,
        float(n),
        1,
    )
    t, v = timeline(big, "allocated")
    assert len(t) == len(v) == MAX_POINTS + 1
    # each bin spans 20 s: 10 s at 0 and 10 s at 2 -> 1.0 (time-weighted)
    assert np.allclose(v, 1.0)
    assert t[0] == 0 and t[-1] == n


def test_the_allocation_plot_stacks_each_job_over_time() -> None:
    from trainyard.sim.report_alloc import allocation_matrix

    times, labels, gpus = allocation_matrix(run("fifo", 1.0), top=2)
    assert list(times) == [0, 2, 10, 20, 28]
    assert labels == ["b", "c", "other jobs (1)"]  # the most GPU-seconds first
    assert gpus.tolist() == [[0, 0, 2, 0, 0], [0, 1, 0, 1, 0], [1, 1, 0, 0, 0]]


def test_a_second_report_into_the_same_folder_drops_the_first_ones_plots(tmp_path: Path) -> None:
    """Found by an outside review: the plot of a run the new report does not have stayed
    beside it, and the console lists every `allocation-*.png` of a report folder as its own.
    Other files of the folder are left alone."""
    out = tmp_path / "out"
    write_report(runs(), out)
    mine = out / "allocation-notes.txt"
    mine.write_text("mine")
    other = tmp_path / "elsewhere.png"
    other.write_bytes(PNG_MAGIC)
    (out / "allocation-linked.png").symlink_to(other)
    write_report([run("fifo", 1.0)], out)
    plots = sorted(p.name for p in out.glob("allocation-*.png"))
    assert plots == ["allocation-fifo.png", "allocation-linked.png"]
    assert mine.read_text() == "mine" and other.exists()


def test_the_allocation_bands_of_the_top_jobs_have_colours_of_their_own() -> None:
    """Found by an outside review: 20 bands shared a 10-colour cycle."""
    from trainyard.sim.report_alloc import TOP, band_colours

    labels = [f"job-{i}" for i in range(TOP)] + ["other jobs (7)"]
    colours = band_colours(labels)
    assert len(set(colours[:TOP])) == TOP and colours[-1] == "0.75"
    assert band_colours([]) == []
