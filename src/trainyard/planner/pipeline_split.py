"""How a model's layers split over pipeline stages when they do not divide evenly.

This module owns the uneven splits the planner reads and searches: the end stages one layer
lighter when the embedding and the loss count as layers (`uneven_stages`, Megatron-Core's
--account-for-embedding/loss-in-pipeline-split, Llama 3.1 405B's 126 layers on 16 stages),
and every chunk as full as the split allows but the model's first and last
(`end_chunk_stages`, Megatron-Bridge's DeepSeek-V3 layouts of 61 layers); and the pipeline
options of the search (`pipeline_options`, `stage_ends`). Pure arithmetic on layer counts.
"""

from __future__ import annotations

from typing import Final

__all__ = ["CHUNKED", "end_chunk_stages", "pipeline_options", "stage_ends", "uneven_stages"]

# A pipeline option whose end stages `end_chunk_stages` sets for each interleaving factor.
CHUNKED: Final = -1


def uneven_stages(layers: int, pp: int) -> tuple[int, int] | None:
    """(first/last stage layers, middle stage layers) for `pp` stages that do not divide
    `layers`: the first and last stage hold one layer fewer than the others, the embedding and
    the loss counting as a layer each (layers + 2 = pp·m; Megatron's
    --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split, Llama 3's
    balancing); None when that does not split (or pp < 3)."""
    if pp < 3 or layers % pp == 0 or (layers + 2) % pp:
        return None
    mid = (layers + 2) // pp
    return (mid - 1, mid) if mid >= 2 else None


def end_chunk_stages(layers: int, pp: int, v: int) -> tuple[int, int] | None:
    """(first, last) stage layers for `layers` that do not split into pp·v chunks: every
    chunk holds c = ceil(layers / (pp·v)) but the model's first, which holds up to c, and
    its last, the rest (Megatron-Bridge's DeepSeek-V3 layouts: 61 layers on 16 x 1 or 4 x 4
    chunks as 4 + 14 x 4 + 1, on 8 x 4 as 1 + 30 x 2 + 0); each end stage adds its other
    v - 1 chunks of c. None when the layers split evenly, pp < 2, the full chunks alone
    exceed the layers (61 on 24 chunks of 3), or a last stage without interleaving would hold
    no layer (which stage counts cannot state)."""
    n = pp * v
    if pp < 2 or layers % n == 0:
        return None
    c = -(-layers // n)
    rest = layers - (n - 2) * c
    first = min(c, rest)
    last = rest - first
    if rest < 0 or (v == 1 and last < 1):
        return None
    return first + (v - 1) * c, last + (v - 1) * c


def pipeline_options(layers: int) -> list[tuple[int, int]]:
    """(pp, first/last stage layers; 0 = even, `CHUNKED`) options of the search: every
    divisor of the layer count, the counts up to it that `uneven_stages` splits, and the
    powers of two with at least two layers a stage that neither gives, their ends by
    `end_chunk_stages`."""
    out = [(pp, 0) for pp in range(1, layers + 1) if layers % pp == 0]
    for pp in range(3, layers):
        found = uneven_stages(layers, pp)
        if found is not None:
            out.append((pp, found[0]))
    given = {pp for pp, _ in out}
    pp = 2
    while 2 * pp <= layers:
        if pp not in given:
            out.append((pp, CHUNKED))
        pp *= 2
    return sorted(out)


def stage_ends(layers: int, pp: int, v: int, option: int) -> tuple[int, int] | None:
    """The (first, last) stage layers (0, 0 for even stages) of a `pipeline_options` option
    at interleaving factor v, or None when v does not fit it: even stages need v to divide
    every stage's count, end stages one layer lighter v to divide the others'."""
    if option == CHUNKED:
        return end_chunk_stages(layers, pp, v)
    if v > 1:
        mid = (layers - 2 * option) // (pp - 2) if option else layers // pp
        lighter = option and option + 1 == mid
        if mid % v or (option and not lighter) or (not option and layers % (pp * v)):
            return None
    return option, option
