"""Time-model variants tried on published runs and not kept (JSON lines on stdout).

    python bench/planner_variants.py [VARIANT ...]

Each variant changes one rule of `trainyard.planner.compute` for the length of its run only
and prints the errors it gives on the runs shipped with the planner
(`trainyard/planner/data/published_runs.csv`, all held out), beside the shipped rule's:

* ``fp8-0.85``: FP8 GEMMs at 0.85 of the 16-bit GEMM efficiency (the FP8 peak 15 % lower),
  against NVIDIA's DGX Cloud FP8 rows (`DGXC_H100`), which the shipped rule puts 7-29 % fast.
* ``fp8-hopper-0.8`` / ``fp8-hopper-0.85`` / ``fp8-hopper-0.9``: the same on Hopper GPUs only
  (H100, H800, H200), Blackwell unchanged. Measured before the shipped rule priced the split
  accumulator of the backward fp8 GEMMs (`hardware.FP8_SPLIT_ACCUMULATOR`); now on top of it.
* ``split-1.0`` / ``split-1.1`` / ``split-1.2``: that rule's backward-GEMM factor on every
  GPU that has it (Ada, Hopper) set to 1 (the model before it), or to the ends of the range
  it is taken from (fast accumulation 1.1x-1.2x faster, pytorch/ao#2377) instead of 1.15.
* ``moe-ref-2048`` / ``moe-ref-4096``: the experts' GEMMs read on the dense curve at the
  hidden size whose intensity matches theirs counting the dense layers' own tokens per
  micro-batch (2,048 / 4,096) instead of infinitely many (`moe.expert_gemm_size`).

Docs: docs/benchmarks.md, "NVIDIA's DGX Cloud benchmark recipes".
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import statistics
import sys
from collections.abc import Callable, Iterator

from trainyard.planner import compute, evaluate
from trainyard.planner.evaluate import Case, load_cases, package_csv_path
from trainyard.planner.hardware import GPU

Variant = Callable[[], contextlib.AbstractContextManager[None]]


def _summary(errors: list[float]) -> dict[str, float | int]:
    absolute = [abs(e) for e in errors]
    if not absolute:
        return {"rows": 0}
    return {
        "rows": len(absolute),
        "median_abs": round(statistics.median(absolute), 4),
        "max_abs": round(max(absolute), 4),
    }


@contextlib.contextmanager
def _shipped() -> Iterator[None]:
    yield


HOPPER = ("H100-SXM", "H100-PCIe", "H800", "H200")


def _gpu_variant(change: Callable[[GPU], GPU]) -> Variant:
    """A variant that predicts every row on `change(gpu)` instead of its catalogue GPU."""

    @contextlib.contextmanager
    def variant() -> Iterator[None]:
        original = evaluate.step_time  # what Case.predict calls

        def changed(model, layout, gpu, *args, **kwargs):  # type: ignore[no-untyped-def]
            return original(model, layout, change(gpu), *args, **kwargs)

        evaluate.step_time = changed
        try:
            yield
        finally:
            evaluate.step_time = original

    return variant


def _fp8_factor(factor: float, only: tuple[str, ...] = ()) -> Variant:
    def slower(gpu: GPU) -> GPU:
        if only and gpu.name not in only:
            return gpu
        return dataclasses.replace(gpu, fp8_tflops=gpu.fp8_tflops * factor)

    return _gpu_variant(slower)


def _split_accumulator(factor: float) -> Variant:
    def split(gpu: GPU) -> GPU:
        if gpu.fp8_backward_slowdown <= 1.0:
            return gpu
        return dataclasses.replace(gpu, fp8_backward_slowdown=factor)

    return _gpu_variant(split)


def _moe_reference(tokens: float) -> Variant:
    @contextlib.contextmanager
    def variant() -> Iterator[None]:
        original = compute.expert_gemm_size

        def matched(model, layout, micro_tokens):  # type: ignore[no-untyped-def]
            size = original(model, layout, micro_tokens)
            if size >= model.hidden:
                return size
            inverse = 1.25 / size - 1.0 / tokens  # the dense layers' own finite tokens
            return float(model.hidden) if inverse <= 0 else min(model.hidden, 1.25 / inverse)

        compute.expert_gemm_size = matched
        try:
            yield
        finally:
            compute.expert_gemm_size = original

    return variant


VARIANTS: dict[str, Variant] = {
    "fp8-0.85": _fp8_factor(0.85),
    "fp8-hopper-0.8": _fp8_factor(0.8, HOPPER),
    "fp8-hopper-0.85": _fp8_factor(0.85, HOPPER),
    "fp8-hopper-0.9": _fp8_factor(0.9, HOPPER),
    "split-1.0": _split_accumulator(1.0),
    "split-1.1": _split_accumulator(1.1),
    "split-1.2": _split_accumulator(1.2),
    "moe-ref-2048": _moe_reference(2048.0),
    "moe-ref-4096": _moe_reference(4096.0),
}


def _groups(case: Case) -> list[str]:
    groups = ["all"]
    if case.model.precision == "fp8":
        groups.append("fp8 DGXC_H100" if case.table_id == "DGXC_H100" else "fp8 other")
    if case.model.is_moe:
        groups.append("moe")
    return groups


def run(name: str, variant: Variant, cases: list[Case]) -> dict[str, object]:
    with variant():
        errors = [(case, case.error()) for case in cases]
    grouped: dict[str, list[float]] = {}
    for case, error in errors:
        for group in _groups(case):
            grouped.setdefault(group, []).append(error)
    return {
        "variant": name,
        **{group: _summary(errs) for group, errs in grouped.items()},
        "rows": [
            {"table_id": c.table_id, "model": c.model_name, "gpus": c.layout.gpus,
             "precision": c.model.precision, "error": round(e, 4)}
            for c, e in errors
        ],
    }  # fmt: skip


if __name__ == "__main__":
    wanted = sys.argv[1:] or list(VARIANTS)
    unknown = [v for v in wanted if v not in VARIANTS]
    if unknown:
        sys.exit(f"unknown variant {unknown[0]!r}; known: {', '.join(VARIANTS)}")
    cases, _ = load_cases(package_csv_path())
    for name in ["shipped", *wanted]:
        print(json.dumps(run(name, _shipped if name == "shipped" else VARIANTS[name], cases)))
