"""GPU catalogue: datasheet numbers, lookup with aliases and suggestions, YAML overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainyard.planner.errors import PlannerError
from trainyard.planner.hardware import CATALOGUE, GPU, gpu, load_catalogue

EXPECTED = {"A100-40GB", "A100-80GB", "A800-80GB", "H100-SXM", "H100-PCIe", "H800", "H200", "B200",
            "GB200", "B300", "GB300", "V100-32GB", "L40S"}  # fmt: skip


def test_catalogue_has_the_well_known_gpus() -> None:
    assert set(CATALOGUE) >= EXPECTED


@pytest.mark.parametrize(
    ("name", "bf16", "fp8"),
    [
        ("A100-80GB", 312, 0),
        ("H100-SXM", 989, 1979),
        ("H200", 989, 1979),
        ("B300", 2250, 4500),
        ("GB300", 2500, 5000),
    ],
)
def test_datasheet_peaks(name: str, bf16: float, fp8: float) -> None:
    g = gpu(name)
    assert (g.bf16_tflops, g.fp8_tflops) == (bf16, fp8)


@pytest.mark.parametrize(
    ("name", "datasheet_gib", "cuda_gb"),
    [  # torch.cuda.get_device_properties().total_memory in public logs (hardware docstring)
        ("A100-40GB", 40, 42.5),  # 40,536 MiB
        ("A100-80GB", 80, 85.1),  # 85,056,798,720 bytes
        ("H100-SXM", 80, 85.0),  # 81,089 MiB
        ("H200", 141, 150.1),  # 143,156 MiB
        ("B200", 180, 191.5),  # 182,631 MiB
        ("GB300", 288, 306.4),  # no log found: B200's share kept by the driver
    ],
)
def test_memory_is_what_cuda_gives_not_the_datasheets_decimal_reading(
    name: str, datasheet_gib: float, cuda_gb: float
) -> None:
    # A datasheet's "80 GB" of HBM is 80 GiB; the driver keeps about 1 % of it.
    g = gpu(name)
    assert g.memory_gb == cuda_gb
    assert 0.985 < g.memory_gb / (datasheet_gib * 2**30 / 1e9) < 0.995


def test_peak_by_precision_and_fp8_fallback() -> None:
    assert gpu("H100").peak_tflops("fp8") == 1979
    assert gpu("A100").peak_tflops("fp8") == 312  # no fp8: bf16 peak
    assert gpu("A100").peak_tflops("fp32") == 19.5
    with pytest.raises(PlannerError) as err:
        gpu("A100").peak_tflops("int4")
    assert err.value.field == "precision"


@pytest.mark.parametrize(
    ("alias", "name"),
    [("H100", "H100-SXM"), ("a100", "A100-80GB"), ("h200", "H200"), ("l40s", "L40S")],
)
def test_case_insensitive_lookup_and_aliases(alias: str, name: str) -> None:
    assert gpu(alias).name == name


def test_unknown_gpu_suggests_close_names() -> None:
    with pytest.raises(PlannerError) as err:
        gpu("H100-SMX")
    assert err.value.field == "gpu"
    assert "Did you mean" in str(err.value) and "H100-SXM" in str(err.value)


def test_invalid_gpu_names_the_field() -> None:
    with pytest.raises(PlannerError) as err:
        GPU("X", 100, 0, 10, 0, 1, 100, 8, 25, 5)
    assert err.value.field == "memory_gb"
    with pytest.raises(PlannerError) as err:
        GPU("X", 100, -1, 10, 80, 1, 100, 8, 25, 5)
    assert err.value.field == "fp8_tflops"


def test_yaml_overrides_and_adds(tmp_path: Path) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text(
        "h100-sxm: {network_gb_s: 25}\n"
        "MI300X: {bf16_tflops: 1307, fp8_tflops: 2615, fp32_tflops: 163.4, memory_gb: 192,\n"
        "         memory_bw_tbs: 5.3, nvlink_gb_s: 448, gpus_per_node: 8, network_gb_s: 50,\n"
        "         network_latency_us: 5}\n"
    )
    cat = load_catalogue(path)
    assert gpu("H100", cat).network_gb_s == 25
    assert gpu("H100", cat).bf16_tflops == 989  # untouched fields kept
    assert gpu("mi300x", cat).memory_gb == 192
    assert CATALOGUE["H100-SXM"].network_gb_s == 50  # built-ins not mutated


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("H200: {memory_gb: -1}\n", "H200.memory_gb"),
        ("H200: {memroy_gb: 100}\n", "H200.memroy_gb"),
        ("NEW: {bf16_tflops: 10}\n", "NEW.fp8_tflops"),
        ("H200: {gpus_per_node: 0}\n", "H200.gpus_per_node"),
        ("H200: {bf16_tflops: fast}\n", "H200.bf16_tflops"),
        ("- a\n- b\n", "catalogue"),
        ("H200: [1, 2]\n", "H200"),
        ("H200: {a: [\n", "catalogue"),
        # absurd but finite: refused, not a plan of 100-digit figures
        ("H200: {nvlink_gb_s: 1.0e-300}\n", "H200.nvlink_gb_s"),
        ("H200: {network_gb_s: 1.0e+300}\n", "H200.network_gb_s"),
        ("H200: {network_latency_us: 1.0e+12}\n", "H200.network_latency_us"),
    ],
)
def test_yaml_errors_name_the_field(tmp_path: Path, text: str, field: str) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text(text)
    with pytest.raises(PlannerError) as err:
        load_catalogue(path)
    assert err.value.field == field


def test_empty_yaml_is_the_builtin_catalogue(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert load_catalogue(path) == CATALOGUE


def test_gpus_per_host_is_the_gb200_tray_and_is_checked(tmp_path: Path) -> None:
    """GB200 NVL72: a domain of 72 GPUs on hosts of 4; other GPUs' node is one host."""
    assert (gpu("GB200").gpus_per_node, gpu("GB200").host_gpus) == (72, 4)
    assert (gpu("GB300-NVL72").gpus_per_node, gpu("GB300").host_gpus) == (72, 4)
    assert gpu("b300-sxm").gpus_per_node == 8 and gpu("B300").gpus_per_host == 0
    assert gpu("H100").host_gpus == 8 and gpu("H100").gpus_per_host == 0
    with pytest.raises(PlannerError) as err:
        GPU("X", 100, 0, 10, 80, 1, 100, 8, 25, 5, 3)
    assert err.value.field == "gpus_per_host"
    path = tmp_path / "gpus.yaml"
    path.write_text("GB200: {gpus_per_host: 5}\n")
    with pytest.raises(PlannerError) as err:
        load_catalogue(path)
    assert err.value.field == "GB200.gpus_per_host"


def test_fp8_backward_slowdown_is_hopper_and_ada_and_is_checked(tmp_path: Path) -> None:
    """Transformer Engine's split accumulator costs time only where fp8 tensor cores have a
    fast-accumulation mode (Ada, Hopper); Blackwell and GPUs without fp8 have factor 1."""
    slow = {name for name, g in CATALOGUE.items() if g.fp8_backward_slowdown > 1.0}
    assert slow == {"H100-SXM", "H100-PCIe", "H800", "H200", "L40S"}
    assert all(CATALOGUE[n].fp8_backward_slowdown == 1.0 for n in ("B200", "GB300", "A100-80GB"))
    with pytest.raises(PlannerError) as err:
        GPU("X", 100, 200, 10, 80, 1, 100, 8, 25, 5, 0, 0.9)
    assert err.value.field == "fp8_backward_slowdown"
    path = tmp_path / "gpus.yaml"
    path.write_text("H100-SXM: {fp8_backward_slowdown: 1}\n")
    assert load_catalogue(path)["H100-SXM"].fp8_backward_slowdown == 1.0
    path.write_text("H100-SXM: {fp8_backward_slowdown: 0.5}\n")
    with pytest.raises(PlannerError) as err:
        load_catalogue(path)
    assert err.value.field == "H100-SXM.fp8_backward_slowdown"
