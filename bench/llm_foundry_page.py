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

Prints the evaluation's median and max |error| and the signed error by sequence length, GPU
and precision; `--write` keeps the page with its shape columns.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Final

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


def _signed(cases: list[Case], key: str) -> dict[str, dict[str, float]]:
    groups: dict[str, list[float]] = defaultdict(list)
    for case in cases:
        value = {
            "seq_len": str(case.model.seq_len),
            "gpu": case.gpu.name,
            "precision": case.model.precision,
        }[key]
        groups[value].append(100 * case.error())
    return {
        name: {
            "rows": len(errors),
            "median_signed_pct": round(statistics.median(errors), 1),
            "min_pct": round(min(errors), 1),
            "max_pct": round(max(errors), 1),
        }
        for name, errors in sorted(groups.items(), key=lambda kv: (len(kv[0]), kv[0]))
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", type=Path, help="llm-foundry's benchmarking README.md")
    parser.add_argument("--write", type=Path, help="keep the page with its shape columns here")
    args = parser.parse_args()
    shaped = with_shapes(args.page.read_text(encoding="utf-8"))
    out = args.write or Path(args.page.parent / f"{args.page.stem}-shapes.md")
    out.write_text(shaped, encoding="utf-8")
    cases, skipped = load_cases(out)
    errors = [abs(100 * case.error()) for case in cases]
    report = {
        "page": str(args.page),
        "read_as": str(out),
        "rows": len(cases),
        "skipped": [f"{table} {model}: {why}" for table, model, why in skipped],
        "median_abs_pct": round(statistics.median(errors), 1) if errors else None,
        "max_abs_pct": round(max(errors), 1) if errors else None,
        "by_seq_len": _signed(cases, "seq_len"),
        "by_gpu": _signed(cases, "gpu"),
        "by_precision": _signed(cases, "precision"),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
