"""`bench/gemm_curve.py`, the tool that measures a GPU's GEMM efficiency curve for the planner
(issue 18): its fit, its shapes, its device names, and a whole run on the CPU (which checks
the tool, not a GPU)."""

from __future__ import annotations

import json
from types import ModuleType

import pytest

from bench_scripts import load


@pytest.fixture(scope="module")
def tool() -> ModuleType:
    return load("gemm_curve")


def test_the_fit_recovers_a_saturating_curve(tool: ModuleType) -> None:
    points = [(h, 0.7 * h / (h + 500.0)) for h in (1024.0, 2048.0, 4096.0, 8192.0)]
    gemm_max, half = tool.fit_curve(points)
    assert gemm_max == pytest.approx(0.7) and half == pytest.approx(500.0)
    assert tool.fit_curve(points[:1]) is None  # one size says nothing about the shape
    assert tool.fit_curve([(1024.0, 0.2), (4096.0, 0.1)]) is None  # falling: no such curve


def test_attention_flops_are_counted_as_flashattention_counts_them(tool: ModuleType) -> None:
    # causal: half of 4·b·s²·heads·dim (16 heads of 128)
    assert tool.attention_flops(2, 1024) == 4.0 * 2 * 1024 * 1024 * 16 * 128 / 2


def test_the_three_passes_do_the_same_work(tool: ModuleType) -> None:
    shapes = tool.shapes(4096, 8192)
    assert set(shapes) == {"forward", "input_grad", "weight_grad"}
    assert {m * k * n for m, k, n in shapes.values()} == {8192 * 4096 * 16384}


@pytest.mark.parametrize(
    ("device", "name"),
    [
        ("NVIDIA H100 80GB HBM3", "H100-SXM"),
        ("NVIDIA H100 PCIe", "H100-PCIe"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA GB200", "GB200"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("Tesla T4", None),
    ],
)
def test_cuda_device_names_map_to_the_catalogue(tool: ModuleType, device: str, name: str) -> None:
    assert tool.catalogue_name(device) == name


def test_a_run_on_the_cpu_prints_every_pass_and_the_planners_curve(
    tool: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--device", "cpu", "--hidden", "32,64", "--tokens", "32", "--repeat", "1"]
    argv += ["--seq", "32,64", "--attention-tokens", "128"]
    assert tool.main([*argv, "--gpu", "H100"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    header, records, summary = lines[0], lines[1:-1], lines[-1]
    assert header["device"] == "cpu" and header["fp8"] is False
    attention = [r for r in records if r.get("kernel") == "attention"]
    records = [r for r in records if r.get("kernel") != "attention"]
    assert {(r["pass"], r["seq"], r["batch"]) for r in attention} == {
        (p, s, 128 // s) for p in ("forward", "backward") for s in (32, 64)
    }
    assert all(r["tflops"] > 0 and 0 < r["planner_fraction"] < 1 for r in attention)
    assert set(summary["attention"]) == {"forward@32", "backward@32", "forward@64", "backward@64"}
    assert {(r["pass"], r["hidden"]) for r in records} == {
        (p, h) for p in ("forward", "input_grad", "weight_grad") for h in (32, 64)
    }
    assert all(r["precision"] == "bf16" and r["tflops"] > 0 for r in records)
    assert summary["gpu"] == "H100-SXM" and set(summary["planner"]) == {"32", "64"}
    assert "fp8_backward_split_over_fast" not in summary  # no fp8 on a CPU


def test_bad_arguments_are_named(tool: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        tool.main(["--device", "cpu", "--hidden", "4k"])
    assert "--hidden" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        tool.main(["--device", "cpu", "--seq", "512,-1"])
    assert "--seq" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        tool.main(["--device", "cpu", "--gpu", "H100-SMX"])
    assert "H100-SXM" in capsys.readouterr().err  # the planner's suggestion
