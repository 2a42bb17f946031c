"""GPU hardware descriptions: the `GPU` record, a catalogue of well-known GPUs, and YAML overrides.

This module owns the numbers the planner assumes about hardware. The catalogue is a constant;
`load_catalogue` returns a new dict (built-ins plus overrides) and never mutates it.

Numbers are public datasheet values (NVIDIA A100, A800, H100, H800, H200, B200/HGX B200, GB200
NVL72, B300/HGX B300, GB300 NVL72, V100, L40S datasheets). TFLOP/s are *dense* tensor-core
peaks (no 2:4 sparsity); fp32 is the non-tensor-core peak. NVLink bandwidth is per GPU and
unidirectional (half the datasheet's bidirectional total); for a GPU without an NVLink switch
it is the intra-node path the planner should assume (PCIe or a 2-GPU bridge, see each entry).
`gpus_per_node` is the NVLink domain (8 for the HGX/DGX boards, 72 for a GB200 or GB300 NVL72
rack). Network bandwidth is per GPU (one NIC per GPU, e.g. 200 Gb/s HDR = 25 GB/s, 400 Gb/s
NDR = 50 GB/s, 800 Gb/s ConnectX-8 = 100 GB/s).

Memory (`memory_gb`, GB = 1e9 bytes) is what CUDA reports a process may allocate, not the
datasheet's figure: an "80 GB" H100 or A100 holds 80 GiB of HBM, and the driver keeps about
1 % of it. PyTorch's `torch.cuda.get_device_properties(i).total_memory`, as printed in public
logs: H100 80GB HBM3 81,089 MiB (85.0 GB), A100-SXM4-80GB 85,056,798,720 bytes (85.1 GB),
A100-SXM4-40GB 40,536 MiB (42.5 GB), H200 143,156 MiB (150.1 GB), B200 182,631 MiB (191.5
GB); nvidia-smi's total where no such log was found: V100-SXM2-32GB 32,510 MiB (34.1 GB),
L40S 46,068 MiB (48.3 GB). H800, A800 and H100 PCIe carry the same 80 GiB parts as the H100
and A100. GB200, B300 and GB300, with no public figure found, are their datasheets' GiB less
B200's share kept by the driver (0.9908): 186 and 288 GiB make 197.9 and 306.4 GB. Read as
80 decimal GB, the H100 lost 6 % of its memory, and a plan that ran on it (Nemotron-4 340B
at t8 p8 on 128 H100s without recompute, NeMo 24.07) did not fit.

The host side, for activation offloading (`trainyard.planner.offload`): `host_link_gb_s` is
one GPU's unidirectional path to its host's memory while every GPU copies at once, as
offloading does. PCIe Gen3 / Gen4 / Gen5 x16 carry 16 / 32 / 64 GB/s each way, and the DGX
and HGX boards put two GPUs (with their NICs) behind each PCIe switch, whose x16 link to the
CPU they share (DGX A100's documented topology, taken for the others): 8 / 16 / 32 GB/s per
GPU (the DGX B300's Xeon 6 hosts speak PCIe Gen5, so its GPUs' Gen6 links run at Gen5 to host
memory). A PCIe card is taken to have its own x16 link. A Grace Blackwell GPU reaches its Grace
CPU over NVLink-C2C, 900 GB/s bidirectional per Grace shared by the two GPUs it hosts: 225
GB/s each way per GPU (the Grace's 480 GB of LPDDR5X at up to 512 GB/s, also shared by two,
bounds it no lower). `host_memory_gb` is the host's memory per GPU: DGX-1 512 GB, DGX A100 1
TB, DGX H100 / H200 / B200 / B300 2 TB over 8 GPUs; 480 GB per Grace over 2 GPUs in an NVL72
rack (NVIDIA's "up to 17 TB" over 72). 0 means unknown (PCIe cards, whose servers vary): the
search then does not offload to that host.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from trainyard import yamlio
from trainyard.planner.errors import PlannerError, unknown_name
from trainyard.textfile import TextFileError, read_text

__all__ = [
    "ALIASES",
    "CATALOGUE",
    "GPU",
    "gpu",
    "has_bf16",
    "has_fused_attention",
    "load_catalogue",
]

_PRECISIONS = ("bf16", "fp16", "fp8", "fp32")
# the range of a catalogue figure (TFLOP/s, GB, TB/s, GB/s, us, counts): a thousandth of
# the slowest part to a million times the fastest
_SMALLEST: Final = 1e-3
_LARGEST: Final = 1e9


@dataclass(frozen=True)
class GPU:
    """One GPU model and the node/network it usually sits in.

    Fields: `bf16_tflops` dense bf16/fp16 tensor peak; `fp8_tflops` dense fp8 peak (0 when the
    GPU has no fp8); `fp32_tflops`; `memory_gb` (GB = 1e9 bytes); `memory_bw_tbs` (TB/s);
    `nvlink_gb_s` per-GPU unidirectional intra-node bandwidth (GB/s); `gpus_per_node`;
    `network_gb_s` per-GPU inter-node bandwidth (GB/s); `network_latency_us`;
    `gpus_per_host` the GPUs one host (one operating system, torchrun's `--nproc-per-node`)
    holds when that is fewer than its NVLink domain (GB200 NVL72: 4 of 72); 0: the node is
    one host; `fp8_backward_slowdown` the time factor (>= 1) of the fp8 backward GEMMs
    (`FP8_SPLIT_ACCUMULATOR`, on the GPUs whose fp8 tensor cores have a fast-accumulation mode);
    `host_link_gb_s` one GPU's unidirectional bandwidth to host memory (GB/s) and
    `host_memory_gb` the host memory per GPU (GB), both 0 when unknown (module docstring);
    `compute_capability` CUDA's (7.0 Volta, 8.0 Ampere, 9.0 Hopper, 10.0 Blackwell): below
    8.0 a GPU has no bf16 (its 16-bit tensor cores are fp16, `bf16_tflops` their peak) and no
    fused attention (FlashAttention-2 and cuDNN's fused attention need Ampere or later).
    """

    name: str
    bf16_tflops: float
    fp8_tflops: float
    fp32_tflops: float
    memory_gb: float
    memory_bw_tbs: float
    nvlink_gb_s: float
    gpus_per_node: int
    network_gb_s: float
    network_latency_us: float
    gpus_per_host: int = 0
    fp8_backward_slowdown: float = 1.0
    host_link_gb_s: float = 0.0
    host_memory_gb: float = 0.0
    compute_capability: float = 8.0

    def __post_init__(self) -> None:
        if not self.name:
            raise PlannerError("name", "a GPU needs a non-empty name")
        for f in dataclasses.fields(self):
            if f.name == "name":
                continue
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise PlannerError(f.name, f"must be a number, got {value!r}")
            if not math.isfinite(value) or value < 0:
                raise PlannerError(f.name, f"must be a finite number >= 0, got {value!r}")
            if value > _LARGEST or 0 < value < _SMALLEST:  # keeps every figure printable
                raise PlannerError(
                    f.name, f"must be 0 or {_SMALLEST:g} to {_LARGEST:g}, got {value!r}"
                )
        if self.fp8_backward_slowdown < 1:
            raise PlannerError(
                "fp8_backward_slowdown",
                f"must be >= 1 (a time factor; 1: no slowdown), got {self.fp8_backward_slowdown!r}",
            )
        for positive in ("bf16_tflops", "memory_gb", "memory_bw_tbs", "nvlink_gb_s"):
            if getattr(self, positive) <= 0:
                raise PlannerError(positive, f"must be > 0 for GPU {self.name!r}")
        if not isinstance(self.gpus_per_node, int) or self.gpus_per_node < 1:
            raise PlannerError("gpus_per_node", "must be an integer >= 1")
        host = self.gpus_per_host
        if not isinstance(host, int) or (host and self.gpus_per_node % host):
            raise PlannerError(
                "gpus_per_host",
                f"must be 0 or an integer dividing gpus_per_node ({self.gpus_per_node}), "
                f"got {host!r}",
            )

    @property
    def host_gpus(self) -> int:
        """GPUs one host holds (torchrun's processes per node)."""
        return self.gpus_per_host or self.gpus_per_node

    def peak_tflops(self, precision: str) -> float:
        """Dense peak TFLOP/s for "bf16", "fp16", "fp8" or "fp32"; fp8 falls back to bf16 if 0."""
        if precision in ("bf16", "fp16"):
            return self.bf16_tflops
        if precision == "fp8":
            return self.fp8_tflops if self.fp8_tflops > 0 else self.bf16_tflops
        if precision == "fp32":
            return self.fp32_tflops
        raise PlannerError("precision", f"must be one of {', '.join(_PRECISIONS)}")


# Transformer Engine runs the fp8 GEMMs of the backward pass (dgrad, wgrad) with a split,
# higher-precision accumulator and those of the forward pass without (`_2X_ACC_FPROP = False`,
# `_2X_ACC_DGRAD = True`, `_2X_ACC_WGRAD = True` in transformer_engine/pytorch/module/base.py;
# torchao's float8 training does the same). On the GPUs whose fp8 tensor cores accumulate
# in reduced precision unless told otherwise (Ada, Hopper: cuBLASLt's FAST_ACCUM mode) the
# split accumulator costs time: fast accumulation was measured 1.1x to 1.2x faster
# (pytorch/ao issue #2377, 2025-06; triton-lang/triton issue #2513 shows the same direction
# on H100). The planner takes the middle, 1.15, for the backward GEMMs; Blackwell has no
# fast-accumulation mode (NVIDIA/TransformerEngine PR #2748 review: "there is no fastAccuMode
# for sm100"), so its factor is 1. A figure from one report, not fitted to any row.
FP8_SPLIT_ACCUMULATOR: Final = 1.15


def _g(
    name: str,
    *values: float,
    host: int = 0,
    bwd8: float = 1.0,
    cpu: tuple[float, float],
    cc: float,
) -> GPU:
    bf16, fp8, fp32, mem, bw, nvl, per_node, net, lat = values
    link, memory = cpu
    return GPU(
        name, bf16, fp8, fp32, mem, bw, nvl, int(per_node), net, lat, host, bwd8, link, memory,
        cc,
    )  # fmt: skip


def has_bf16(gpu: GPU) -> bool:
    """Whether `gpu` computes in bf16 (Ampere or later; see `GPU`)."""
    return gpu.compute_capability >= 8.0


def has_fused_attention(gpu: GPU) -> bool:
    """Whether fused attention kernels run on `gpu` (Ampere or later; see `GPU`)."""
    return gpu.compute_capability >= 8.0


# (host_link_gb_s, host_memory_gb) per board (module docstring)
_PCIE3_DGX1: Final = (8.0, 64.0)
_PCIE4_DGXA100: Final = (16.0, 128.0)
_PCIE5_DGX: Final = (32.0, 256.0)
_C2C_GRACE: Final = (225.0, 240.0)
_PCIE5_CARD: Final = (64.0, 0.0)
_PCIE4_CARD: Final = (32.0, 0.0)
_SPLIT: Final = FP8_SPLIT_ACCUMULATOR


# name, bf16, fp8, fp32, memory GB, TB/s, NVLink GB/s (1 dir), GPUs/node, net GB/s, latency us
CATALOGUE: dict[str, GPU] = {
    g.name: g
    for g in (
        # V100 SXM2: fp16 tensor 125 (no bf16), NVLink2 300 GB/s total; DGX-1, 100 Gb/s EDR.
        _g("V100-32GB", 125, 0, 15.7, 34.1, 0.9, 150, 8, 12.5, 5.0, cpu=_PCIE3_DGX1, cc=7.0),
        # A100 SXM4: 312 bf16 dense, NVLink3 600 GB/s total; DGX A100, 200 Gb/s HDR per GPU.
        _g("A100-40GB", 312, 0, 19.5, 42.5, 1.555, 300, 8, 25, 5.0, cpu=_PCIE4_DGXA100, cc=8.0),
        _g("A100-80GB", 312, 0, 19.5, 85.1, 2.039, 300, 8, 25, 5.0, cpu=_PCIE4_DGXA100, cc=8.0),
        # H100 SXM5: 989 bf16 / 1979 fp8 dense, NVLink4 900 GB/s total; 400 Gb/s NDR per GPU.
        _g(
            "H100-SXM",
            989,
            1979,
            67,
            85.0,
            3.35,
            450,
            8,
            50,
            5.0,
            bwd8=_SPLIT,
            cpu=_PCIE5_DGX,
            cc=9.0,
        ),
        # H800 SXM5 / A800 SXM4 80GB: the H100 and A100 with NVLink cut to 400 GB/s total.
        _g("H800", 989, 1979, 67, 85.0, 3.35, 200, 8, 50, 5.0, bwd8=_SPLIT, cpu=_PCIE5_DGX, cc=9.0),
        _g("A800-80GB", 312, 0, 19.5, 85.1, 2.039, 200, 8, 25, 5.0, cpu=_PCIE4_DGXA100, cc=8.0),
        # H100 PCIe: 756 / 1513 dense; NVLink bridge 600 GB/s total (GPU pairs only).
        _g(
            "H100-PCIe",
            756,
            1513,
            51,
            85.0,
            2.0,
            300,
            8,
            25,
            5.0,
            bwd8=_SPLIT,
            cpu=_PCIE5_CARD,
            cc=9.0,
        ),
        # H200 SXM: H100 compute, 141 GB HBM3e at 4.8 TB/s. (Memory: the datasheet's figures
        # here are GiB; `memory_gb` is what CUDA gives, module docstring.)
        _g("H200", 989, 1979, 67, 150.1, 4.8, 450, 8, 50, 5.0, bwd8=_SPLIT, cpu=_PCIE5_DGX, cc=9.0),
        # B200 (HGX B200): 2.25 PF bf16 / 4.5 PF fp8 dense, 180 GB at 7.7 TB/s, NVLink5 1.8 TB/s.
        _g("B200", 2250, 4500, 75, 191.5, 7.7, 900, 8, 50, 5.0, cpu=_PCIE5_DGX, cc=10.0),
        # GB200 in an NVL72 rack: NVIDIA's rack figures per GPU (360 PF bf16 and 720 PF fp8 with
        # sparsity, 13.4 TB HBM3e at 576 TB/s, over 72 GPUs): 2.5 / 5 PF dense, 186 GB at 8 TB/s,
        # NVLink5 1.8 TB/s. All 72 GPUs share one NVLink domain, which is what `gpus_per_node`
        # means to the time model; a host (compute tray: two Grace CPUs, four GPUs) holds 4 of
        # them, which is what torchrun starts per node. 400 Gb/s per GPU beyond the rack.
        _g("GB200", 2500, 5000, 80, 197.9, 8.0, 900, 72, 50, 5.0, host=4, cpu=_C2C_GRACE, cc=10.0),
        # Blackwell Ultra: the same bf16 / fp8 tensor peaks as B200 / GB200 (it adds fp4 and
        # attention throughput), 288 GB of HBM3e (8 stacks of 12-high) at 8 TB/s, NVLink5 1.8
        # TB/s, ConnectX-8 NICs at 800 Gb/s per GPU. B300 (HGX / DGX B300): 36 PF bf16 and 72
        # PF fp8 with sparsity and 2.3 TB over 8 GPUs: 2.25 / 4.5 PF dense, 288 GB.
        _g("B300", 2250, 4500, 75, 306.4, 8.0, 900, 8, 100, 5.0, cpu=_PCIE5_DGX, cc=10.3),
        # GB300 in an NVL72 rack, the rack's figures per GPU as for GB200 (180 PF bf16 and 360
        # PF fp8 dense, 20.7 TB HBM3e at 576 TB/s over 72 GPUs): 2.5 / 5 PF, 288 GB at 8
        # TB/s; one NVLink domain of 72 on trays of 4.
        _g("GB300", 2500, 5000, 80, 306.4, 8.0, 900, 72, 100, 5.0, host=4, cpu=_C2C_GRACE, cc=10.3),
        # L40S: 362 bf16 / 733 fp8 dense, 48 GB GDDR6, no NVLink: PCIe Gen4 x16 (32 GB/s).
        _g(
            "L40S",
            362,
            733,
            91.6,
            48.3,
            0.864,
            32,
            8,
            25,
            5.0,
            bwd8=_SPLIT,
            cpu=_PCIE4_CARD,
            cc=8.9,
        ),
    )
}

ALIASES: dict[str, str] = {
    "h100": "H100-SXM",
    "h100-80gb": "H100-SXM",
    "h100-sxm5": "H100-SXM",
    "a100": "A100-80GB",
    "a800": "A800-80GB",
    "a100-sxm": "A100-80GB",
    "a100-sxm4-80gb": "A100-80GB",
    "a100-sxm4-40gb": "A100-40GB",
    "v100": "V100-32GB",
    "h200-sxm": "H200",
    "b200-sxm": "B200",
    "gb200-nvl72": "GB200",
    "b300-sxm": "B300",
    "gb300-nvl72": "GB300",
}


def gpu(name: str, catalogue: dict[str, GPU] | None = None) -> GPU:
    """Look up a GPU by name (case-insensitive; aliases such as "H100" and "A100" allowed)."""
    cat = CATALOGUE if catalogue is None else catalogue
    by_lower = {k.lower(): v for k, v in cat.items()}
    key = name.strip().lower()
    if key in by_lower:
        return by_lower[key]
    if key in ALIASES and ALIASES[key].lower() in by_lower:
        return by_lower[ALIASES[key].lower()]
    raise unknown_name("gpu", "GPU", name, list(cat) + [a.upper() for a in ALIASES])


_OPTIONAL = frozenset(
    f.name for f in dataclasses.fields(GPU) if f.default is not dataclasses.MISSING
)  # fields a new GPU may leave out (gpus_per_host: 0, its node is one host)


def load_catalogue(path: str | Path, base: dict[str, GPU] | None = None) -> dict[str, GPU]:
    """Return `base` (default: the built-in catalogue) with GPUs from a YAML file added/overridden.

    The file maps GPU names to field mappings. An entry whose name is already known may give only
    the fields it changes; a new entry must give every field but `gpus_per_host`. `memory_gb`
    is what the runtime gives a process, in GB of 1e9 bytes (a datasheet's "192 GB" of HBM is
    192 GiB, about 204 GB once the driver keeps its share; module docstring). Example::

        H100-SXM: {network_gb_s: 25}
        MI300X: {bf16_tflops: 1307, fp8_tflops: 2615, fp32_tflops: 163.4, memory_gb: 204,
                 memory_bw_tbs: 5.3, nvlink_gb_s: 448, gpus_per_node: 8, network_gb_s: 50,
                 network_latency_us: 5}
    """
    result = dict(CATALOGUE if base is None else base)
    try:
        text = read_text(path)
    except TextFileError as exc:
        raise PlannerError("catalogue", f"{path} {exc}") from None
    try:
        data: Any = yamlio.load_yaml(text)
    except yamlio.YamlError as exc:
        raise PlannerError("catalogue", f"{path} is not valid YAML: {exc}") from None
    if data is None:
        return result
    if not isinstance(data, dict):
        raise PlannerError("catalogue", f"{path} must map GPU names to field mappings")
    names = [f.name for f in dataclasses.fields(GPU) if f.name != "name"]
    for raw_name, entry in data.items():
        name = str(raw_name)
        if not isinstance(entry, dict):
            raise PlannerError(name, "must be a mapping of GPU fields")
        unknown = sorted(set(map(str, entry)) - set(names))
        if unknown:
            raise PlannerError(
                f"{name}.{unknown[0]}", f"unknown GPU field; known fields: {', '.join(names)}"
            )
        existing = next((v for k, v in result.items() if k.lower() == name.lower()), None)
        if existing is None:
            missing = [n for n in names if n not in entry and n not in _OPTIONAL]
            if missing:
                raise PlannerError(
                    f"{name}.{missing[0]}",
                    f"new GPU {name!r} must set every field; missing: {', '.join(missing)}",
                )
            fields = {n: entry[n] for n in names if n in entry}
        else:
            fields = {n: entry.get(n, getattr(existing, n)) for n in names}
            result.pop(existing.name)
        try:
            result[name] = GPU(name=name, **fields)
        except PlannerError as exc:
            raise PlannerError(f"{name}.{exc.field}", exc.message) from exc
    return result
