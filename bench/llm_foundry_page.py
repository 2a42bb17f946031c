"""A blind check of the planner on MosaicML's MPT training benchmarks (JSON on stdout).

    git -C <llm-foundry clone> show 495218376:scripts/train/benchmarking/README.md > mpt.md
    PYTHONPATH=src python bench/llm_foundry_page.py mpt.md [--write mpt-shapes.md]

llm-foundry's page (mosaicml/llm-foundry, `scripts/train/benchmarking/README.md`, tables last
changed in 5e85bd62d, 2024-01-06) prints 216 runs of its MPT models under PyTorch FSDP on 8 to
512 H100 / A100 GPUs, but names each model only by its size ("7b"). This script adds five
columns after the Model column with the shapes those names stood for in the repository's
`scripts/train/yamls/pretrain/mpt-<size>.yaml` at 5e85bd62d (layers, d_model, heads, the
50,368-token vocabulary, a GELU MLP of 4 x d_model) and leaves every printed cell as it is, so
the page is read as published (`trainyard plan --evaluate`). The runs used those yamls'
`attn_impl: triton` (llm-foundry's Triton FlashAttention), which the page does not say.

Prints the evaluation's median and max |error|, the signed error by sequence length, GPU and
precision, and per GPU the efficiency the causal attention core ran at in the bf16 runs of
32K tokens or more (`implied_attention`); `--write` says where the page with its shape columns
is kept (default: beside the page, `<name>-shapes.md`).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from trainyard.planner import attention
from trainyard.planner.compute import step_time
from trainyard.planner.evaluate import Case, load_cases

# size -> (layers, d_model, heads): mpt-<size>.yaml at mosaicml/llm-foundry 5e85bd62d
SHAPES: Final = {
    "125m": (12, 768, 12),
    "350m": (24, 1024, 16),
    "760m": (24, 1536, 12),
    "1b": (24, 2048, 16),
    "3b": (32, 2560, 20),
    "7b": (32, 4096, 32),
    "13b": (40, 5120, 40),
    "30b": (48, 7168, 56),
    "70b": (80, 8192, 64),
}
VOCAB: Final = 50368
ADDED: Final = ("num_layers", "hidden_size", "num_attention_heads", "vocab_size", "mlp")


def with_shapes(page: str) -> str:
    """`page` with the five shape columns after the Model column of each of its tables."""
    out = []
    for line in page.splitlines():
        if line.lstrip().startswith("|"):
            cells = line.strip().strip("|").split("|")
            first = cells[0].strip()
            if first == "Model":
                added: list[str] = list(ADDED)
            elif first.startswith("---"):
                added = ["---"] * len(ADDED)
            elif first in SHAPES:
                added = [*map(str, SHAPES[first]), str(VOCAB), "gelu"]
            else:
                added = [""] * len(ADDED)
            line = "|" + "|".join([cells[0], *(f" {a} " for a in added), *cells[1:]]) + "|"
        out.append(line)
    return "\n".join(out) + "\n"


KEYS: Final[dict[str, Callable[[Case], str]]] = {
    "by_seq_len": lambda case: str(case.model.seq_len),
    "by_gpu": lambda case: case.gpu.name,
    "by_precision": lambda case: case.model.precision,
}
LONG: Final = 32768  # tokens from which the attention core is most of a step


def _signed(errors: list[tuple[Case, float]], key: Callable[[Case], str]) -> dict[str, Any]:
    """Rows, median / min / max signed error (%) of each group `key` names."""
    groups: dict[str, list[float]] = defaultdict(list)
    for case, error in errors:
        groups[key(case)].append(error)
    return {
        name: {
            "rows": len(group),
            "median_signed_pct": round(statistics.median(group), 1),
            "min_pct": round(min(group), 1),
            "max_pct": round(max(group), 1),
        }
        for name, group in sorted(groups.items(), key=lambda kv: (len(kv[0]), kv[0]))
    }


@contextmanager
def _attention_free() -> Iterator[None]:
    """The fused attention priced at (next to) nothing: its efficiency curve 10^4 times."""
    shipped = attention.CURVE
    attention.CURVE = tuple((n, f * 1e4, b * 1e4) for n, f, b in shipped)
    try:
        yield
    finally:
        attention.CURVE = shipped


def implied_attention(cases: list[Case]) -> dict[str, list[float]]:
    """Per GPU, the fraction of its peak the causal attention core ran at in the published
    bf16 runs of LONG tokens or more without recompute: everything else priced as the
    planner prices it, the rest of the published step is the core's, against the planner's
    own price of the core (`attention.fused_attention_efficiency`)."""
    chosen = [
        c for c in cases
        if c.model.seq_len >= LONG and c.model.precision == "bf16" and c.layout.recompute == "none"
    ]  # fmt: skip

    def step(case: Case) -> float:
        return step_time(case.model, case.layout, case.gpu, case.gpu.gpus_per_node).iteration_s

    priced = [step(c) for c in chosen]
    with _attention_free():
        rest = [step(c) for c in chosen]
    out: dict[str, list[float]] = defaultdict(list)
    for case, whole, other in zip(chosen, priced, rest, strict=True):
        published = case.model.tokens_per_iteration / (case.published * case.layout.gpus)
        forward, backward = attention.fused_attention_efficiency(case.model.seq_len)
        kernel = (forward + backward) / 2 * (whole - other) / (published - other)
        out[case.gpu.name].append(round(kernel, 3))
    return dict(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", type=Path, help="llm-foundry's benchmarking README.md")
    parser.add_argument("--write", type=Path, help="keep the page with its shape columns here")
    args = parser.parse_args()
    shaped = with_shapes(args.page.read_text(encoding="utf-8"))
    out = args.write or args.page.with_name(f"{args.page.stem}-shapes.md")
    out.write_text(shaped, encoding="utf-8")
    cases, skipped = load_cases(out)
    errors = [(case, 100 * case.error()) for case in cases]
    absolute = [abs(error) for _, error in errors]
    report = {
        "page": str(args.page),
        "read_as": str(out),
        "rows": len(cases),
        "skipped": [f"{table} {model}: {why}" for table, model, why in skipped],
        "median_abs_pct": round(statistics.median(absolute), 1) if absolute else None,
        "max_abs_pct": round(max(absolute), 1) if absolute else None,
        **{name: _signed(errors, key) for name, key in KEYS.items()},
        "implied_attention_efficiency": implied_attention(cases),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
