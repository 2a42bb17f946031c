"""Measured links (trainyard.planner.links): nccl-tests output and probe results parsed,
latency and bandwidth fitted per level, and the planner timing collectives on them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainyard.planner.collectives import LinkSet, Topology, best
from trainyard.planner.compute import step_time
from trainyard.planner.errors import PlannerError
from trainyard.planner.hardware import gpu
from trainyard.planner.layout import ParallelLayout
from trainyard.planner.links import Run, fit_run, load_links, parse_nccl_tests, parse_probe
from trainyard.planner.presets import preset
from trainyard.planner.search import search

EXAMPLE = (
    Path(__file__).resolve().parents[3] / "examples" / "planner" / "all_reduce_perf_h100x8.txt"
)


def test_the_example_nccl_tests_file_parses_and_fits() -> None:
    run = parse_nccl_tests(EXAMPLE.read_text())
    assert (run.collective, run.ranks, run.nodes) == ("all_reduce", 8, 1)
    assert run.points[0] == (8, 13.67) and run.points[-1][0] == 17179869184
    links, fits = load_links(EXAMPLE)
    (fit,) = fits
    assert fit.level == "intra" and links.inter is None and links.intra is fit.link
    # The sweep tends to ~475 GB/s bus bandwidth and starts at ~13 us: the fit lands near.
    assert 350 < fit.busbw_gbps < 500
    assert 5 < fit.alpha_us < 30
    assert fit.median_error < 0.2


def test_multi_node_run_gives_the_network_link(tmp_path: Path) -> None:
    hosts = [f"#  Rank {r:2d} Group  0 Pid {100 + r:5d} on node-{r // 8} device {r % 8} [0x1] H100"
             for r in range(16)]  # fmt: skip
    lines = ["# nccl-tests all_reduce_perf", *hosts]
    # 16 ranks on 2 nodes at 40 us + S / (90 GB/s algbw): busbw = 90 x 2 x 15/16 = 168.75
    for size in (8 << i for i in range(0, 28, 3)):
        t = 40 + size / 90e3
        lines.append(f"{size} {size // 4} float sum -1 {t:.2f} 0 0 0 {t:.2f} 0 0 0")
    path = tmp_path / "all_reduce_perf_2x8.txt"
    path.write_text("\n".join(lines) + "\n")
    links, (fit,) = load_links(path)
    assert fit.level == "inter" and links.intra is None
    assert fit.busbw_gbps == pytest.approx(168.75, rel=1e-3)
    assert links.inter is not None
    assert links.inter.bandwidth_gbps == pytest.approx(168.75 / 8, rel=1e-3)
    assert fit.alpha_us == pytest.approx(40, rel=1e-3)


def test_probe_json_is_read_and_noise_does_not_break_the_fit(tmp_path: Path) -> None:
    big = 1 << 20
    result = {"collectives": [
        {"collective": "all_reduce", "ranks": 2, "nodes": 1, "sizes": [[8, 900.0], [big, 800.0]]},
        {"collective": "all_gather", "ranks": 2, "nodes": 1, "sizes": [[8, 50.0], [big, 450.0]]},
    ]}  # fmt: skip
    path = tmp_path / "links.json"
    path.write_text(json.dumps(result))
    links, fits = load_links(path)
    assert [f.run.collective for f in fits] == ["all_reduce", "all_gather"]
    assert all(f.busbw_gbps > 0 and f.alpha_us >= 0 for f in fits)
    assert links.intra is not None
    assert parse_probe(result)[0] == Run("all_reduce", 2, 1, ((8, 900.0), (1 << 20, 800.0)))


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        ("# nothing here\n", "links", "no data lines"),
        ("8 2 float sum -1 10.0 0 0 0 10.0 0 0 0\n", "links", "Rank"),
        ("#  Rank  0 Group 0 Pid 1 on a device 0\n8 2 float sum -1 10 0 0 0 10 0 0 0\n",
         "collective", "which collective"),
    ],
)  # fmt: skip
def test_bad_nccl_tests_output_names_what_is_missing(text: str, field: str, words: str) -> None:
    with pytest.raises(PlannerError) as err:
        parse_nccl_tests(text)
    assert err.value.field == field and words in err.value.message


def test_bad_files_are_clear(tmp_path: Path) -> None:
    with pytest.raises(PlannerError, match="not found"):
        load_links(tmp_path / "none.txt")
    bad = tmp_path / "links.json"
    bad.write_text("{not json")
    with pytest.raises(PlannerError, match="not valid JSON"):
        load_links(bad)
    bad.write_text(json.dumps({"collectives": [{"collective": "all_reduce"}]}))
    with pytest.raises(PlannerError) as err:
        load_links(bad)
    assert err.value.field == "links"  # the file, then the entry
    assert err.value.message.startswith(f"{bad}: collectives[0]: needs collective")
    with pytest.raises(PlannerError, match="one rank"):
        fit_run(Run("all_reduce", 1, 1, ((8, 1.0), (16, 2.0))))


def test_measured_links_change_the_collective_times_and_the_plan() -> None:
    h100 = gpu("H100")
    model = preset("gpt3-13b")
    layout = ParallelLayout(tp=8, dp=2, micro_batch=1, sequence_parallel=True)
    slow = LinkSet(intra=fit_run(Run("all_reduce", 8, 1, ((8, 30.0), (1 << 30, 2e5)))).link)
    base = step_time(model, layout, h100)
    measured = step_time(model, layout, h100, links=slow)
    assert measured.tp_comm_s > base.tp_comm_s  # ~9 GB/s measured vs the catalogue's NVLink
    assert slow.intra is not None
    assert best("all_reduce", 1 << 20, Topology(8, intra=slow.intra)).time_us > 0
    plans = search(model, 16, h100, top=1, links=slow)
    assert plans[0].layout.tp < 8  # on a slow node tensor parallelism stops paying


def test_allocation_and_sizing_plan_on_measured_links_too() -> None:
    from trainyard.planner.allocation import search_allocation
    from trainyard.planner.sizing import size_for_tokens

    h100, model = gpu("H100"), preset("gpt3-13b")
    slow = LinkSet(intra=fit_run(Run("all_reduce", 8, 1, ((8, 30.0), (1 << 30, 2e5)))).link)
    plain = search_allocation(model, h100, (8, 8), top=1)[0]
    measured = search_allocation(model, h100, (8, 8), top=1, links=slow)[0]
    assert measured.time.iteration_s > plain.time.iteration_s
    options = size_for_tokens(model, h100, 1e9, max_gpus=16, links=slow)
    assert options and options[0].plan.time.iteration_s > 0


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ({"sizes": [[1024, 1e-300], [2048, 1e-300]]}, "is not a measurement"),
        ({"sizes": [[-1024, 10.0], [2048, 20.0]]}, "is not a measurement"),
        ({"sizes": [[1024, 10.0], [2048, 1e300]]}, "is not a measurement"),
        ({"ranks": 8.7}, "is not a whole number"),
        ({"ranks": 2, "nodes": 4}, "nodes <= ranks"),
        ({"ranks": 10**20}, "ranks <="),
    ],
)
def test_probe_entries_that_are_not_measurements_are_refused(
    tmp_path: Path, entry: dict[str, object], says: str
) -> None:
    """Found by an outside review: a time of 1e-300 us divided by zero in the fit, negative
    sizes made a 9,166 GB/s link, and 2 ranks on 4 nodes were accepted."""
    run = {"collective": "all_reduce", "ranks": 8, "nodes": 1,
           "sizes": [[1024, 10.0], [1 << 20, 60.0]], **entry}  # fmt: skip
    path = tmp_path / "probe.json"
    path.write_text(json.dumps({"collectives": [run]}))
    with pytest.raises(PlannerError) as caught:
        load_links(path)
    assert caught.value.field == "links" and str(path) in caught.value.message
    assert says in caught.value.message


def test_json_too_deep_or_too_long_a_number_is_not_valid_json(tmp_path: Path) -> None:
    for name, text in (
        ("deep.json", "{" + '"a":[' * 100_000),
        ("big.json", '{"n": 9' + "9" * 5000 + "}"),
    ):
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(PlannerError, match="is not valid JSON"):
            load_links(path)


def _sweep(
    name: str, sizes: range | list[int], *, tail: str = "", inplace_only: bool = False
) -> str:
    """An nccl-tests section of 8 ranks on one node: 15 us + S / (200 GB/s algbw)."""
    lines = [f"# Collective test starting: {name}", "# nThread 1 nGpus 1 minBytes 8"]
    lines += [f"#  Rank {r} Group 0 Pid {r} on node-0 device {r} [0x1] H100" for r in range(8)]
    for size in sizes:
        t = f"{15 + size / 200e3:.2f}"
        out = "N/A N/A N/A 0" if inplace_only else f"{t} 0 0 0"
        lines.append(f"{size} {size // 4} float sum -1 {out} {t} 0 0 0{tail}")
    return "\n".join(lines) + "\n"


SIZES = [8 << i for i in range(0, 28, 3)]  # 8 B to 1 GiB


def test_what_nccl_tests_prints_besides_the_plain_table_is_read(tmp_path: Path) -> None:
    # Outside review 13, F10: in-place figures only, RCCL's trailing columns and a second
    # collective in the same file were refused or dropped.
    plain = parse_nccl_tests(_sweep("all_reduce_perf", SIZES))
    assert parse_nccl_tests(_sweep("all_reduce_perf", SIZES, inplace_only=True)) == plain
    assert parse_nccl_tests(_sweep("all_reduce_perf", SIZES, tail=" RING SIMPLE 32")) == plain
    both = tmp_path / "sweeps.txt"
    both.write_text(_sweep("all_reduce_perf", SIZES) + _sweep("all_gather_perf", SIZES))
    _, fits = load_links(both)
    assert [f.run.collective for f in fits] == ["all_reduce", "all_gather"]
    unnamed = tmp_path / "out.txt"
    unnamed.write_text(_sweep("", SIZES).replace("# Collective test starting: \n", ""))
    with pytest.raises(PlannerError, match="--links-collective"):
        load_links(unnamed)
    assert load_links(unnamed, "all_reduce")[1][0].run == plain


def test_a_file_cut_short_or_a_sweep_that_shows_no_bandwidth_is_refused() -> None:
    # Outside review 13, F9: a file cut at 32 KiB was fitted to an 8 GB/s NVLink.
    cut = _sweep("all_reduce_perf", SIZES)[:-25]
    with pytest.raises(PlannerError, match="cut short"):
        parse_nccl_tests(cut)
    with pytest.raises(PlannerError, match="largest message is 32,768 bytes"):
        parse_nccl_tests(_sweep("all_reduce_perf", [8, 1024, 32768]))


def test_a_sweep_of_large_messages_only_keeps_nccls_latency() -> None:
    # Outside review 13, F9: a 512 MB-2 GB sweep was fitted to a 771 us latency, as measured
    large = fit_run(parse_nccl_tests(_sweep("all_reduce_perf", [2**29, 2**30, 2**31])))
    assert not large.latency_measured and large.link.latency_us == pytest.approx(3.4)
    full = fit_run(parse_nccl_tests(_sweep("all_reduce_perf", SIZES)))
    assert full.latency_measured and large.busbw_gbps == pytest.approx(full.busbw_gbps, rel=0.01)
